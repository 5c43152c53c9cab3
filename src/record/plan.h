// plan.json, the run's frozen plan (docs/evidence-bundle.md): its one type, written by validate and read by verify,
// the reports and the ledger. Each record's fields are declared once (`describe`, record/json_fields.h); to_json and
// plan_from_json walk that declaration, so a field renamed here is renamed for the writer and every reader.
#pragma once

#include "record/json_fields.h"
#include "record/schema.h"
#include "stats/gate.h"
#include "task/task.h"
#include "util/backend_kind.h"
#include "util/failure_reason.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

// What an implementation is in the run. The layout roles are the padded builds of an arm's layout pool
// (docs/timing.md, "Layout"); only the plain build (layout 0) of an arm has the arm's own role.
enum class ImplRole { baseline, candidate, baseline_layout, candidate_layout, control };
std::string_view to_string(ImplRole r);
std::optional<ImplRole> parse_impl_role(std::string_view name);
// The role of an arm's padded builds: baseline -> baseline_layout, candidate -> candidate_layout.
ImplRole layout_role(ImplRole arm);

struct PlannedImpl {
  ImplRole role = ImplRole::baseline;
  std::string name;
  std::optional<FailureReason> expect;  // controls only: the reason their check must report
  std::string source;                   // as the run found it (absolute)
  std::string bundle_source;            // inside the bundle
  std::string bundle_artifact;          // inside the bundle; "" when the build failed
  bool built = false;
  int layout = 0;  // index in its arm's layout pool (0: the plain build)
  uint64_t pad_bytes = 0;
  std::string build_log;    // the compiler's output when the build failed
  nlohmann::json identity;  // the build identity (builder/builder.h, to_json(BuildIdentity))

  // The identity's fields the bundle is bound by (read strictly by plan_from_json).
  std::string source_sha256() const;
  std::string artifact_sha256() const;
  std::string identity_key() const;
};

struct PlannedCase {
  std::string name;
  CaseRole role = CaseRole::correctness;
  std::map<std::string, int64_t> dims;
  uint64_t seed = 0;
  std::string distribution;
  double scale = 0;
};

struct PlanOracle {
  std::string source;         // the oracle's file, relative to the task folder
  std::string source_sha256;  // 64 hex digits
  nlohmann::json identity;    // its build identity; identity.source_sha256 == source_sha256, identity.key non-empty
};

// How one output is compared with the oracle (task.h, Tolerance): its mode (abs_rel, ulp or exact) and that mode's
// numbers (the others 0).
struct PlannedTolerance {
  std::string output;
  std::string dtype;
  std::string mode;
  double rtol = 0;
  double atol = 0;
  double ulp = 0;
};

struct PlanTask {
  std::string name;
  std::string dir;
  std::string identity;  // task_identity (task/task.h): the lineage keep extends is this one's
  std::string manifest_sha256;
  std::string manifest;  // the manifest's text
  PlanOracle oracle;
  std::vector<PlannedTolerance> tolerances;  // one per output, in signature order
  std::vector<PlannedCase> cases;
};

struct PlanGates {
  stats::GateKind kind = stats::GateKind::ci;
  double min_improvement_pct = 0;
  double max_aa_difference_pct = 0;
  double alpha = 0.05;
  double same_margin_pct = 0;  // A/B: SAME within +-this (stats::ab_verdict)
};

struct PlanBudgets {
  uint64_t min_blocks = 0;
  uint64_t max_blocks = 0;
  double max_seconds_per_workload = 0;
  int warmups = 0;
  int samples = 0;
  double timeout_seconds = 0;
};

struct PlanLayout {
  int layouts = 1;       // builds per arm in the layout pool
  bool offsets = false;  // whether tensors and the stack are offset per visit
  uint64_t tensors = 0;  // inputs plus outputs
};

// `seed` chooses what should be reproducible (block orders, layouts); no data follows from it. The timed and
// held-out data follow from a secret drawn at run time (util/data_secret.h): the plan holds only its commitment,
// and decision.json reveals it after the run (DecisionRecord::data_secret), for verify to re-derive every nonce.
struct PlanSeeds {
  uint64_t seed = 0;
  uint64_t check_nonce = 0;     // the pre-timing checks' data: 0, the task's published seeds
  std::string data_commitment;  // DataSecret::commitment(), 64 hex digits
};

struct PlanKwb {
  std::string version;
  std::string git_sha;
  std::optional<bool> git_dirty;  // null: not built from a git checkout
  std::string binary_sha256;
  std::string worker_sha256;
};

struct Plan {
  std::string created;  // UTC, ISO 8601
  std::vector<std::string> argv;
  PlanTask task;
  BackendKind backend = BackendKind::cpu;
  std::string device;
  bool cold = false;
  bool exhaustive_checks = false;
  bool profile = true;
  nlohmann::json worker_environment;  // what reaches every worker besides PATH and LC_ALL
  std::vector<PlannedImpl> implementations;
  PlanGates gates;
  PlanBudgets budgets;
  std::vector<std::string> workloads;  // as asked; empty: every timing case (effective_workloads)
  PlanLayout layout;
  PlanSeeds seeds;
  PlanKwb kwb;
  nlohmann::json environment;  // record/environment.h

  // The implementation with this role (and name, for controls); nullptr when the plan has none.
  const PlannedImpl* impl(ImplRole role, std::string_view name = "") const;
  // The arm's layout pool, as indices into implementations, in layout order: the arm's plain build, then its padded
  // builds that built. Timing draws each visit's build from it (stats/layout.h).
  std::vector<size_t> pool(ImplRole arm) const;
  std::vector<std::string> case_names() const;
  std::vector<std::string> timing_cases() const;
  // The workloads the comparisons ran: those asked for, or every timing case in the task's order.
  std::vector<std::string> effective_workloads() const;
};

// The check reports a plan calls for, by their stem in checks/: baseline, candidate, candidate_final (the final
// re-check) and control_<name> for each control.
std::string control_check_stem(std::string_view control_name);
std::string check_file(std::string_view stem);  // "checks/<stem>.json"

nlohmann::json to_json(const Plan& plan);
// Strict: schema "kwb.plan" at k_bundle_schema_version, every declared field present with its type, nothing else,
// and the plan's own invariants (one baseline and one candidate, distinct control names, hex digests, gates and
// layouts in range). Throws json_fields::FormatError naming the field.
Plan plan_from_json(const nlohmann::json& j);

// What `verify` and the reports warn about, not fail on: the kwb that wrote the plan was built from a git tree with
// changes its commit lacks (kwb.git_dirty, cmake/provenance.cmake), so that commit alone is not the code that
// produced the bundle. Empty when the tree was clean, or not built from git.
std::optional<std::string> provenance_warning(const Plan& plan);

// ---- the declaration ----------------------------------------------------------------------------------------------

template <typename V>
void describe(V& v, PlannedImpl& x) {
  v("role", x.role);
  v("name", x.name);
  v("expect", x.expect);
  v("source", x.source);
  v("bundle_source", x.bundle_source);
  v("bundle_artifact", x.bundle_artifact);
  v("built", x.built);
  v("layout", x.layout);
  v("pad_bytes", x.pad_bytes);
  v("build_log", x.build_log);
  v("identity", x.identity);
}

template <typename V>
void describe(V& v, PlannedCase& x) {
  v("name", x.name);
  v("role", x.role);
  v("dims", x.dims);
  v("seed", x.seed);
  v("distribution", x.distribution);
  v("scale", x.scale);
}

template <typename V>
void describe(V& v, PlanOracle& x) {
  v("source", x.source);
  v("source_sha256", x.source_sha256);
  v("identity", x.identity);
}

template <typename V>
void describe(V& v, PlannedTolerance& x) {
  v("output", x.output);
  v("dtype", x.dtype);
  v("mode", x.mode);
  v("rtol", x.rtol);
  v("atol", x.atol);
  v("ulp", x.ulp);
}

template <typename V>
void describe(V& v, PlanTask& x) {
  v("name", x.name);
  v("dir", x.dir);
  v("identity", x.identity);
  v("manifest_sha256", x.manifest_sha256);
  v("manifest", x.manifest);
  v("oracle", x.oracle);
  v("tolerances", x.tolerances);
  v("cases", x.cases);
}

template <typename V>
void describe(V& v, PlanGates& x) {
  v("kind", x.kind);
  v("min_improvement_pct", x.min_improvement_pct);
  v("max_aa_difference_pct", x.max_aa_difference_pct);
  v("alpha", x.alpha);
  v("same_margin_pct", x.same_margin_pct);
}

template <typename V>
void describe(V& v, PlanBudgets& x) {
  v("min_blocks", x.min_blocks);
  v("max_blocks", x.max_blocks);
  v("max_seconds_per_workload", x.max_seconds_per_workload);
  v("warmups", x.warmups);
  v("samples", x.samples);
  v("timeout_seconds", x.timeout_seconds);
}

template <typename V>
void describe(V& v, PlanLayout& x) {
  v("layouts", x.layouts);
  v("offsets", x.offsets);
  v("tensors", x.tensors);
}

template <typename V>
void describe(V& v, PlanSeeds& x) {
  v("seed", x.seed);
  v("check_nonce", x.check_nonce);
  v("data_commitment", x.data_commitment);
}

template <typename V>
void describe(V& v, PlanKwb& x) {
  v("version", x.version);
  v("git_sha", x.git_sha);
  v("git_dirty", x.git_dirty);
  v("binary_sha256", x.binary_sha256);
  v("worker_sha256", x.worker_sha256);
}

template <typename V>
void describe(V& v, Plan& x) {
  v("created", x.created);
  v("argv", x.argv);
  v("task", x.task);
  v("backend", x.backend);
  v("device", x.device);
  v("cold", x.cold);
  v("exhaustive_checks", x.exhaustive_checks);
  v("profile", x.profile);
  v("worker_environment", x.worker_environment);
  v("implementations", x.implementations);
  v("gates", x.gates);
  v("budgets", x.budgets);
  v("workloads", x.workloads);
  v("layout", x.layout);
  v("seeds", x.seeds);
  v("kwb", x.kwb);
  v("environment", x.environment);
}

}  // namespace kwb
