// The task model: what task.toml declares, resolved and validated. Everything downstream (oracle, worker, check,
// compare) reads this, never the TOML.
#pragma once

#include "task/shape_expr.h"
#include "util/backend_kind.h"
#include "util/dtype.h"
#include "util/failure_reason.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

enum class DistributionKind { normal, uniform, zeros, constant, log_uniform, randint, arange, permutation };
const char* to_string(DistributionKind k);

// How to fill a tensor. normal: N(mean, scale^2); uniform: U[low, high); zeros; constant: every element = value;
// log_uniform: |x| = 10^U[low, high) with a random sign (magnitudes spread over high - low decades: rows whose
// sums are dominated by a few elements, the ill-conditioned inputs a precision downgrade cannot average away).
// The integer laws, for integer data and for integer-valued data of any dtype: randint: an integer uniform on
// [low, high], both included; arange: low, low + 1, ... in memory order (positions); permutation: the integers 0 to
// n - 1 (n the tensor's elements) in a random order (indices, distinct values without ties).
struct Distribution {
  DistributionKind kind = DistributionKind::normal;
  double scale = 1.0;
  double mean = 0.0;
  double low = -1.0;
  double high = 1.0;
  double value = 0.0;
  // A mix of one special value into the drawn data: each element, independently, is special_value with probability
  // special_fraction (an attention mask's -inf, a NaN an implementation must propagate). 0: none.
  double special_fraction = 0.0;
  double special_value = 0.0;
  // randint's bounds as dim expressions ("vocab - 1"): an index that follows the dim it indexes, at every shape a
  // case or a held-out check gives it. Resolved per case by input_law; absent: the numbers above.
  std::optional<ShapeExpr> low_expr, high_expr;
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<ShapeExpr> shape;
  // Inputs with their own distribution (e.g. a weight that must never be all ones) ignore the case's data spec.
  std::optional<Distribution> distribution;
  // The elements of this input a call reads at least, as a dim expression ("ids * dim" for a gather of `ids` rows
  // of a [vocab, dim] table): the operator's traffic, which the plausibility floor counts (docs/task-format.md).
  // Absent: every element.
  std::optional<ShapeExpr> reads;
  // The same data in every call of a timing pool, as a model's weights are in every forward pass (`shared = true`,
  // docs/task-format.md): drawn once per pool from the run's secret instead of once per set, so a pool of large sets
  // costs one copy of it. What varies between a pool's calls is then the other inputs alone; an implementation may
  // keep what it derives from this one across calls, as a real model's weights are packed once. Checks still draw it
  // afresh for every call.
  bool shared = false;
};

struct ScalarSpec {
  std::string name;
  double default_value = 0.0;
};

struct Signature {
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<ScalarSpec> scalars;
};

// How an output's elements are compared with the oracle's (docs/task-format.md, "The tolerance"):
//   abs_rel: |got - expected| <= atol + rtol * |expected|
//   ulp:     |got - expected| <= ulp * (the spacing of the output's dtype at |expected|): a bound in units in the
//            last place of the stored type, for operators specified to within rounding of their result
//   exact:   got == expected; the only mode of integer and boolean outputs
// In every mode NaN and Inf must match the oracle's in kind.
enum class ToleranceMode { abs_rel, ulp, exact };
const char* to_string(ToleranceMode m);

struct Tolerance {
  ToleranceMode mode = ToleranceMode::abs_rel;
  double rtol = 0.0;
  double atol = 0.0;
  double ulp = 0.0;  // mode ulp: how many units in the last place
};

// The rule in words, for messages: "atol 1e-06 + rtol 0.0001 * |expected|", "2 ulp of the output's dtype", "exact
// equality".
std::string describe_tolerance(const Tolerance& tol);

// What the operator requires of one dim, declared in the task's [dims] table and kept by every shape kwb makes up
// (validate's held-out shapes, check.h): a multiple of N (2: even), at least a minimum, or equal to another dim.
// Every published case must satisfy them too (the task does not load otherwise).
struct DimConstraint {
  int64_t multiple_of = 1;
  int64_t min = 1;
  std::string equal_to;  // another dim's name; empty when free
};

// Why `dims` break `constraints`, naming the dim, its value and the [dims] key ("" when they keep them).
std::string constraint_violation(const std::map<std::string, DimConstraint>& constraints,
                                 const std::map<std::string, int64_t>& dims);

enum class CaseRole { timing, correctness };
const char* to_string(CaseRole r);

struct Case {
  std::string name;
  CaseRole role = CaseRole::correctness;
  std::map<std::string, int64_t> dims;
  Distribution data;  // for inputs without their own distribution
  // This case's law for named inputs (its `inputs` table): overrides both `data` and the input's own law in the
  // signature, so one case can draw one tensor differently (NaN in q while the positions stay an arange).
  std::map<std::string, Distribution> input_laws;
  uint64_t seed = 0;
  std::map<std::string, double> scalars;  // overrides of signature defaults
  int line = 0;
};

struct ControlSpec {
  std::string name;
  std::filesystem::path source;  // absolute: the task's file, or (a change of a base) the changed text kwb wrote
  FailureReason expect = FailureReason::numeric_mismatch;  // the reason the check must report
  // A control written as a change of another source (docs/task-format.md, "Controls"): `base` with the one
  // occurrence of `replace` replaced by `with`; `source` is then that text, written once into kwb's cache folder
  // under its SHA-256. Empty for a control given as a file.
  std::filesystem::path base;
  std::string replace;
  std::string with;
};

struct BackendImpls {
  std::filesystem::path baseline;   // absolute
  std::filesystem::path reference;  // absolute; the task's optimized reference implementation
  std::vector<ControlSpec> controls;
};

struct Task {
  std::filesystem::path dir;
  std::filesystem::path manifest;
  std::string manifest_sha256;
  // What the task is, by content (task_identity): the lineage's key (ledger/ledger.h) and plan.json's task.identity,
  // so that a copy of the task under the same name with a case or a control removed is another task.
  std::string identity;
  std::string name;
  std::string description;
  std::filesystem::path oracle;  // absolute; the reference implementation (include/kwb/oracle.h)
  std::string oracle_sha256;     // of its source
  int threads = 1;
  // The A/B's margin of no practical difference for this task (percent, >= 0), when its manifest sets one: a noisy
  // task may need a wider one than the default (pipeline/defaults.h); --same-margin-pct overrides it.
  std::optional<double> same_margin_pct;
  Signature signature;
  Tolerance tolerance;  // [tolerance]: the floating outputs' default (exact when the task has none)
  // Each output's, by signature index: its own [tolerance.NAME] table, else exact for an integer or boolean dtype,
  // else `tolerance`.
  std::vector<Tolerance> output_tolerance;
  std::map<std::string, DimConstraint> dim_constraints;  // by dim name; a dim not listed is free
  std::vector<Case> cases;
  std::map<BackendKind, BackendImpls> backends;

  const Case* find_case(const std::string& name) const;
  // The case `name`, or a UsageError naming the option (`--workload`, `--case`) and listing the task's cases (only
  // its role = "timing" ones when `list_timing`, as for --workload).
  const Case& require_case(const std::string& option, const std::string& name, bool list_timing) const;
};

// SHA-256 of what defines the task: task.toml (its cases, dims, tolerances and laws), the oracle's source, and per
// backend the baseline's and every control's source (a control written as a change: the text kwb wrote). The name
// and the folder are labels, not part of it; so is the reference implementation, which judges nothing (a loop may
// well overwrite it with its own next attempt). load_task sets Task::identity to it.
std::string task_identity(const Task& task);

// The most bytes the tensors of one case (inputs and outputs together) may take: kwb holds several copies of them at
// once (input sets and their twins, input slots, expected outputs), and a size past what any machine has would fail
// deep inside a run (docs/task-format.md).
inline constexpr uint64_t k_max_case_bytes = uint64_t{16} << 30;

// A concrete tensor of one case: evaluated shape and byte size.
struct TensorShape {
  std::vector<int64_t> dims;
  size_t elements() const;
};
TensorShape resolve_shape(const TensorSpec& spec, const Case& c);
// Every input's shape at case `c`, "x[2, 8] weight[8]" (the outputs' when the task has no input): the dims column of
// check's and profile's tables.
std::string input_shapes_text(const Task& task, const Case& c);

// The law input `spec` is drawn from in case `c`: the case's own law for it, else the input's law in the
// signature, else the case's `distribution`; randint bounds given as dim expressions evaluated at the case's dims
// (std::out_of_range naming a dim the case lacks).
Distribution input_law(const TensorSpec& spec, const Case& c);
// The elements of input `spec` a call of case `c` reads at least (TensorSpec::reads, at most all of them).
size_t input_reads(const TensorSpec& spec, const Case& c);

// The scalar values of a case, in signature order.
std::vector<double> resolve_scalars(const Signature& sig, const Case& c);

// Loads and validates DIR/task.toml. Throws DataError naming the file, line, field and the fix.
Task load_task(const std::filesystem::path& dir);

}  // namespace kwb
