// task.toml parser. Strict on purpose: an unknown key, a wrong type or an impossible shape is an error with the
// file, the line and what was expected, never a silent default (a typo'd `rtoll` must not leave rtol at 0).
#include "task/task.h"

#include "task/data.h"
#include "task/table_reader.h"

#include "util/backend_kind.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "util/text.h"
#include "util/units.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>

namespace kwb {

namespace fs = std::filesystem;

const char* to_string(ToleranceMode m) {
  switch (m) {
    case ToleranceMode::abs_rel:
      return "abs_rel";
    case ToleranceMode::ulp:
      return "ulp";
    case ToleranceMode::exact:
      return "exact";
  }
  return "?";
}

std::string describe_tolerance(const Tolerance& tol) {
  switch (tol.mode) {
    case ToleranceMode::abs_rel:
      return fmt::format("atol {:g} + rtol {:g} * |expected|", tol.atol, tol.rtol);
    case ToleranceMode::ulp:
      return fmt::format("{:g} ulp of the output's dtype", tol.ulp);
    case ToleranceMode::exact:
      return "exact equality";
  }
  return "";
}

const char* to_string(DistributionKind k) {
  switch (k) {
    case DistributionKind::normal:
      return "normal";
    case DistributionKind::uniform:
      return "uniform";
    case DistributionKind::zeros:
      return "zeros";
    case DistributionKind::constant:
      return "constant";
    case DistributionKind::log_uniform:
      return "log_uniform";
    case DistributionKind::randint:
      return "randint";
    case DistributionKind::arange:
      return "arange";
    case DistributionKind::permutation:
      return "permutation";
  }
  return "?";
}

const char* to_string(CaseRole r) { return r == CaseRole::timing ? "timing" : "correctness"; }

size_t TensorShape::elements() const {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  return n;
}

const Case* Task::find_case(const std::string& case_name) const {
  for (const Case& c : cases) {
    if (c.name == case_name) return &c;
  }
  return nullptr;
}

const Case& Task::require_case(const std::string& option, const std::string& case_name, bool list_timing) const {
  if (const Case* c = find_case(case_name)) return *c;
  std::vector<std::string> names;
  for (const Case& k : cases) {
    if (!list_timing || k.role == CaseRole::timing) names.push_back(k.name);
  }
  throw UsageError(fmt::format("{} {}: task '{}' has no case of that name; its {}cases are: {}", option, case_name,
                               name, list_timing ? "timing " : "", fmt::join(names, ", ")));
}

std::string input_shapes_text(const Task& task, const Case& c) {
  const std::vector<TensorSpec>& tensors =
      task.signature.inputs.empty() ? task.signature.outputs : task.signature.inputs;
  std::vector<std::string> parts;
  parts.reserve(tensors.size());
  for (const TensorSpec& t : tensors)
    parts.push_back(fmt::format("{}[{}]", t.name, fmt::join(resolve_shape(t, c).dims, ", ")));
  return fmt::format("{}", fmt::join(parts, " "));
}

TensorShape resolve_shape(const TensorSpec& spec, const Case& c) {
  TensorShape s;
  for (const ShapeExpr& e : spec.shape) s.dims.push_back(e.evaluate(c.dims));
  return s;
}

Distribution input_law(const TensorSpec& spec, const Case& c) {
  const auto it = c.input_laws.find(spec.name);
  Distribution d = it != c.input_laws.end() ? it->second : spec.distribution ? *spec.distribution : c.data;
  if (d.low_expr) d.low = static_cast<double>(d.low_expr->evaluate(c.dims));
  if (d.high_expr) d.high = static_cast<double>(d.high_expr->evaluate(c.dims));
  return d;
}

size_t input_reads(const TensorSpec& spec, const Case& c) {
  const size_t all = resolve_shape(spec, c).elements();
  if (!spec.reads) return all;
  const int64_t n = spec.reads->evaluate(c.dims);
  return n <= 0 ? 0 : std::min(all, static_cast<size_t>(n));
}

std::vector<double> resolve_scalars(const Signature& sig, const Case& c) {
  std::vector<double> v;
  for (const ScalarSpec& s : sig.scalars) {
    auto it = c.scalars.find(s.name);
    v.push_back(it == c.scalars.end() ? s.default_value : it->second);
  }
  return v;
}

namespace {

// The largest magnitude of a number that shapes generated data or is passed to the kernel (a distribution's
// parameters, a scalar): finite, and far enough from f64's limit that arithmetic on it stays finite.
constexpr double k_max_data_parameter = 1e300;
// The most threads a task may declare: each allowed thread widens the worker's address-space limit.
constexpr int64_t k_max_threads = 256;

const toml::table& as_table(const toml::node& n, const std::string& field, const std::string& file) {
  if (!n.is_table()) {
    throw DataError(fmt::format("{}:{}: field '{}': expected a table ({{ ... }}), got {}", file,
                                TableReader::line_of(n), field, TableReader::type_name(n)));
  }
  return *n.as_table();
}

// special_fraction and special_value: the special value may be anything a float holds (-inf, nan); its fraction is
// a probability, and the two come together.
void read_special_values(TableReader& r, Distribution& d) {
  const std::optional<double> fraction = r.optional_number("special_fraction");
  const std::optional<double> special = r.optional_number("special_value");
  if (fraction.has_value() != special.has_value()) {
    const char* given = fraction ? "special_fraction" : "special_value";
    r.fail(r.get(given), given,
           "special_fraction and special_value go together: give both (e.g. special_fraction = 0.25, "
           "special_value = -inf), or neither");
  }
  if (fraction) {
    if (!(*fraction > 0.0 && *fraction <= 1.0)) {
      r.fail(r.get("special_fraction"), "special_fraction", fmt::format("a probability in (0, 1] (got {})", *fraction));
    }
    d.special_fraction = *fraction;
    d.special_value = *special;
  }
}

constexpr DistributionKind k_distribution_kinds[] = {
    DistributionKind::normal,      DistributionKind::uniform, DistributionKind::zeros,  DistributionKind::constant,
    DistributionKind::log_uniform, DistributionKind::randint, DistributionKind::arange, DistributionKind::permutation};

// An integer key of an integer law: a TOML integer (or a float with an integral value) within +-2^53, the integers
// a double holds exactly.
std::optional<double> optional_integral(TableReader& r, const std::string& key) {
  const std::optional<double> v = r.optional_number(key);
  if (v && !(std::isfinite(*v) && std::nearbyint(*v) == *v && std::fabs(*v) <= 9007199254740991.0)) {
    r.fail(r.get(key), key, fmt::format("must be an integer within +-2^53 (got {})", *v));
  }
  return v;
}

// randint (low and high, both included), arange (low: the first value, 0 unless given) and permutation (no
// parameter), with the special-value mix of any law. Parameters of the other laws are refused: a `scale` given to
// randint would otherwise be silently ignored.
Distribution read_integer_distribution(TableReader& r, Distribution d) {
  const char* kind = to_string(d.kind);
  for (const char* k : {"scale", "mean", "value"}) {
    if (r.get(k) != nullptr) r.fail(r.get(k), k, fmt::format("{} takes no '{}'", kind, k));
  }
  // randint's bounds may be dim expressions (a string): resolved per case by input_law.
  auto bound_expr = [&](const char* key) -> std::optional<ShapeExpr> {
    const toml::node* n = r.get(key);
    if (n == nullptr || !n->is_string() || d.kind != DistributionKind::randint) return std::nullopt;
    try {
      return ShapeExpr::parse(std::string(*n->value<std::string>()));
    } catch (const std::invalid_argument& e) {
      r.fail(n, key, fmt::format("{} (a bound is an integer or a dim expression such as \"vocab - 1\")", e.what()));
    }
  };
  d.low_expr = bound_expr("low");
  d.high_expr = bound_expr("high");
  const std::optional<double> low = d.low_expr ? std::optional(0.0) : optional_integral(r, "low");
  const std::optional<double> high = d.high_expr ? std::optional(0.0) : optional_integral(r, "high");
  if (d.kind == DistributionKind::randint) {
    if (!low || !high) {
      const char* missing = !low ? "low" : "high";
      throw DataError(
          fmt::format("{}:{}: missing field '{}' (randint draws integers from low to high, both "
                      "included: e.g. low = -128, high = 127)",
                      r.file(), r.line(), r.field(missing)));
    }
    if (!d.low_expr && !d.high_expr && *low > *high) {
      r.fail(r.get("low"), "low", fmt::format("randint needs low <= high (got low = {}, high = {})", *low, *high));
    }
    d.low = *low;
    d.high = *high;
  } else {
    if (high)
      r.fail(r.get("high"), "high", fmt::format("{} takes no 'high' (its values are set by the tensor's size)", kind));
    if (d.kind == DistributionKind::permutation && low) {
      r.fail(r.get("low"), "low", "permutation takes no 'low': it holds 0 to n - 1, n the tensor's elements");
    }
    d.low = low.value_or(0.0);
    d.high = d.low;
  }
  read_special_values(r, d);
  return d;
}

// Reads distribution/scale/mean/low/high/value keys from a table that may hold other keys too.
std::optional<Distribution> read_distribution(TableReader& r, bool required) {
  auto kind_text = required ? std::optional(r.string("distribution")) : r.optional_string("distribution");
  if (!kind_text) {
    for (const char* k : {"scale", "mean", "low", "high", "value", "special_fraction", "special_value"}) {
      if (r.get(k) != nullptr) r.fail(r.get(k), k, "given without 'distribution'");
    }
    return std::nullopt;
  }
  Distribution d;
  bool known = false;
  for (DistributionKind k : k_distribution_kinds) {
    if (*kind_text == to_string(k)) {
      d.kind = k;
      known = true;
    }
  }
  if (!known) {
    std::vector<std::string> names;
    for (DistributionKind k : k_distribution_kinds) names.emplace_back(to_string(k));
    const std::optional<std::string> guess = closest_match(*kind_text, names);
    r.fail(r.get("distribution"), "distribution",
           fmt::format("unknown distribution '{}' (expected one of {}){}", *kind_text, fmt::join(names, ", "),
                       guess ? fmt::format("; did you mean '{}'?", *guess) : ""));
  }
  if (d.kind == DistributionKind::randint || d.kind == DistributionKind::arange ||
      d.kind == DistributionKind::permutation) {
    return read_integer_distribution(r, d);
  }
  // Generated data must stay finite in every dtype's arithmetic (f64: about 1.8e308): the parameters are bounded
  // well inside it. Infinities and NaNs are asked for with special_value, on purpose.
  d.scale = r.optional_finite("scale", 0.0, k_max_data_parameter).value_or(1.0);
  d.mean = r.optional_finite("mean", -k_max_data_parameter, k_max_data_parameter).value_or(0.0);
  d.low = r.optional_finite("low", -k_max_data_parameter, k_max_data_parameter).value_or(-1.0);
  d.high = r.optional_finite("high", -k_max_data_parameter, k_max_data_parameter).value_or(1.0);
  d.value = r.optional_finite("value", -k_max_data_parameter, k_max_data_parameter).value_or(0.0);
  if ((d.kind == DistributionKind::uniform || d.kind == DistributionKind::log_uniform) && !(d.low < d.high)) {
    r.fail(r.get("low"), "low",
           fmt::format("{} needs low < high (got low = {}, high = {})", to_string(d.kind), d.low, d.high));
  }
  if (d.kind == DistributionKind::log_uniform && (d.low < -300 || d.high > 300)) {
    r.fail(
        r.get("low"), "low",
        fmt::format("log_uniform takes decimal exponents within [-300, 300] (got low = {}, high = {})", d.low, d.high));
  }
  if (d.kind == DistributionKind::normal && !(d.scale > 0)) {
    r.fail(r.get("scale"), "scale", fmt::format("normal needs scale > 0 (got {})", d.scale));
  }
  read_special_values(r, d);
  return d;
}

std::vector<TensorSpec> read_tensors(const toml::array& arr, const std::string& path, const std::string& file,
                                     bool allow_distribution) {
  std::vector<TensorSpec> out;
  std::set<std::string> names;
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string p = fmt::format("{}[{}]", path, i);
    TableReader r(as_table(*arr.get(i), p, file), p, file);
    TensorSpec t;
    t.name = r.string("name");
    if (!names.insert(t.name).second) r.fail(r.get("name"), "name", fmt::format("duplicate tensor '{}'", t.name));
    std::string dt = r.string("dtype");
    auto parsed = parse_dtype(dt);
    if (!parsed)
      r.fail(r.get("dtype"), "dtype", fmt::format("unknown dtype '{}' (expected one of {})", dt, dtype_choices()));
    t.dtype = *parsed;
    const toml::array& shape = r.array("shape");
    if (shape.empty()) r.fail(&shape, "shape", "a tensor needs at least one dimension");
    for (size_t d = 0; d < shape.size(); ++d) {
      const toml::node& n = *shape.get(d);
      if (n.is_integer()) {
        int64_t v = *n.value<int64_t>();
        if (v <= 0) r.fail(&n, fmt::format("shape[{}]", d), fmt::format("dimension must be positive (got {})", v));
        t.shape.push_back(ShapeExpr::constant(v));
      } else if (n.is_string()) {
        try {
          t.shape.push_back(ShapeExpr::parse(std::string(*n.value<std::string>())));
        } catch (const std::invalid_argument& e) {
          r.fail(&n, fmt::format("shape[{}]", d), e.what());
        }
      } else {
        r.fail(
            &n, fmt::format("shape[{}]", d),
            fmt::format("expected a dim name, an expression string or an integer, got {}", TableReader::type_name(n)));
      }
    }
    if (allow_distribution) {
      t.distribution = read_distribution(r, false);
      if (const toml::node* n = r.get("reads")) {
        if (n->is_integer() && *n->value<int64_t>() >= 0) {
          t.reads = ShapeExpr::constant(*n->value<int64_t>());
        } else if (n->is_string()) {
          try {
            t.reads = ShapeExpr::parse(std::string(*n->value<std::string>()));
          } catch (const std::invalid_argument& e) {
            r.fail(n, "reads", e.what());
          }
        } else {
          r.fail(n, "reads",
                 "expected the elements a call reads at least: a dim expression such as \"ids * dim\", "
                 "or a non-negative integer");
        }
      }
      if (const toml::node* n = r.get("shared")) {
        if (!n->is_boolean()) {
          r.fail(n, "shared",
                 fmt::format("expected true or false (true: the same data in every call of a timing pool, as a "
                             "model's weights), got {}",
                             TableReader::type_name(*n)));
        }
        t.shared = *n->value<bool>();
      }
    } else if (const toml::node* n = r.get("shared")) {
      r.fail(n, "shared", "only an input can be shared across calls; remove it from this output");
    }
    r.reject_unknown_keys();
    out.push_back(std::move(t));
  }
  return out;
}

// A task's sources live in its folder: a path that leaves it (absolute, "..", or a symlink pointing out) would let a
// task pull any file on the machine into a build, a plan and a bundle.
fs::path resolve_source(TableReader& r, const std::string& key, const fs::path& dir) {
  std::string rel = r.string(key);
  if (rel.empty() || fs::path(rel).is_absolute()) {
    r.fail(r.get(key), key,
           fmt::format("source '{}' must be a path relative to the task folder {}", rel, dir.string()));
  }
  fs::path p = dir / rel;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) {
    r.fail(r.get(key), key,
           fmt::format("source '{}' does not exist (paths are relative to the task folder {})", rel, dir.string()));
  }
  fs::path resolved = fs::canonical(p, ec);
  const fs::path inside = resolved.lexically_relative(dir);
  if (ec || inside.empty() || *inside.begin() == "..") {
    r.fail(r.get(key), key,
           fmt::format("source '{}' resolves to {}, outside the task folder {}; copy it into the "
                       "task folder",
                       rel, resolved.string(), dir.string()));
  }
  return resolved;
}

// A control written as a change of its base: the base's text with the one occurrence of `replace` replaced by
// `with`, written once into kwb's cache folder under the SHA-256 of the result (so the same change is the same
// file, and the build cache finds it), keeping the base's file name. A `replace` that does not occur exactly once is
// an error at its line: a change that could apply in two places is not reviewable.
fs::path derived_control_source(TableReader& r, const ControlSpec& ctl) {
  if (ctl.replace.empty()) r.fail(r.get("replace"), "replace", "the text to replace must not be empty");
  std::ifstream in(ctl.base, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t found = 0, at = std::string::npos;
  for (size_t pos = text.find(ctl.replace); pos != std::string::npos; pos = text.find(ctl.replace, pos + 1)) {
    if (found++ == 0) at = pos;
  }
  if (found != 1) {
    r.fail(r.get("replace"), "replace",
           fmt::format("must occur exactly once in {} (found {} time{}): quote enough of the line to make it unique",
                       ctl.base.string(), found, found == 1 ? "" : "s"));
  }
  std::string changed = text;
  changed.replace(at, ctl.replace.size(), ctl.with);
  // Diagnostics of the changed file name the base and its lines (the change may shift the lines after it).
  changed = fmt::format("#line 1 \"{}\"\n", ctl.base.string()) + changed;
  const fs::path dir = cache_dir() / "controls" / sha256_hex(changed);
  fs::path out = dir / ctl.base.filename();
  std::error_code ec;
  if (!fs::is_regular_file(out, ec)) {
    fs::create_directories(dir, ec);
    if (ec) {
      throw Error(ExitCode::io_error,
                  fmt::format("cannot create {} for control '{}': {}", dir.string(), ctl.name, ec.message()));
    }
    write_file_atomic(out, changed);
  }
  return out;
}

// Every tensor of case `c` has positive dimensions, and all of them together fit in k_max_case_bytes, computed
// without overflow: a size that cannot be held is reported at the case's dims, before anything is allocated.
void check_case_size(const Task& task, const Case& c, TableReader& r) {
  const toml::node* dims = r.get("dims");
  uint64_t total = 0;
  std::vector<std::string> sizes;
  bool overflow = false;
  for (const auto* list : {&task.signature.inputs, &task.signature.outputs}) {
    for (const TensorSpec& t : *list) {
      uint64_t bytes = dtype_size(t.dtype);
      for (size_t d = 0; d < t.shape.size(); ++d) {
        int64_t v = 0;
        try {
          v = t.shape[d].evaluate(c.dims);
        } catch (const std::overflow_error& e) {
          r.fail(dims, "dims", fmt::format("tensor '{}' dimension {}: {}; make the dims smaller", t.name, d, e.what()));
        }
        if (v <= 0) {
          r.fail(dims, "dims",
                 fmt::format("tensor '{}' dimension {} ('{}') evaluates to {} for this case", t.name, d,
                             t.shape[d].text(), v));
        }
        if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(v), &bytes)) {
          r.fail(dims, "dims",
                 fmt::format("tensor '{}': its byte size overflows 64 bits; make the dims smaller", t.name));
        }
      }
      overflow = overflow || __builtin_add_overflow(total, bytes, &total);
      sizes.push_back(fmt::format("{} {}", t.name, bytes_text(static_cast<double>(bytes))));
    }
  }
  if (overflow || total > k_max_case_bytes) {
    r.fail(dims, "dims",
           fmt::format("the case's tensors take {} bytes ({}), over kwb's limit of {} GiB per case; make the dims "
                       "smaller",
                       overflow ? std::string("more than 2^64") : std::to_string(total), fmt::join(sizes, ", "),
                       k_max_case_bytes >> 30));
  }
}

// The manifest of the task folder `dir_in`, parsed; fills in where the task lives and the manifest's hash.
toml::table parse_manifest(Task& task, const fs::path& dir_in) {
  if (!fs::is_directory(dir_in)) {
    throw DataError(fmt::format("{}: not a task folder (expected a directory holding task.toml)", dir_in.string()));
  }
  task.dir = fs::canonical(dir_in);
  task.manifest = task.dir / "task.toml";
  const std::string file = task.manifest.string();
  if (!fs::is_regular_file(task.manifest)) {
    throw DataError(fmt::format("{}: missing (a task folder must hold task.toml)", file));
  }
  task.manifest_sha256 = sha256_file(task.manifest);
  try {
    return toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    throw DataError(fmt::format("{}:{}: TOML syntax error: {}", file, e.source().begin.line, e.description()));
  }
}

// name, description, oracle, threads.
void read_header(Task& task, TableReader& top) {
  task.name = top.string("name");
  task.description = top.string("description");
  if (const std::string named = top.string("oracle"); fs::path(named).extension().empty()) {
    // The form of kwb's former built-in oracles (oracle = "rmsnorm").
    top.fail(top.get("oracle"), "oracle",
             fmt::format("'{}' is not a source file: kwb has no built-in oracles; write the task's reference "
                         "implementation against include/kwb/oracle.h in a .c or .cpp file in the task folder and "
                         "name it here (oracle = \"oracle.cpp\"; docs/task-format.md, \"The oracle\")",
                         named));
  }
  task.oracle = resolve_source(top, "oracle", task.dir);
  task.oracle_sha256 = sha256_file(task.oracle);
  if (auto t = top.get("threads")) {
    if (!t->is_integer() || *t->value<int64_t>() < 1 || *t->value<int64_t>() > k_max_threads) {
      top.fail(t, "threads", fmt::format("expected an integer from 1 to {}", k_max_threads));
    }
    task.threads = static_cast<int>(*t->value<int64_t>());
  }
  if (auto m = top.get("same_margin_pct")) {
    const std::optional<double> v = m->value<double>();  // an integer reads as a double too
    if (!v || !std::isfinite(*v) || *v < 0.0 || *v > 100.0) {
      top.fail(m, "same_margin_pct", "expected a number from 0 to 100 (percent; 0: no SAME verdict for this task)");
    }
    task.same_margin_pct = *v;
  }
}

std::vector<ScalarSpec> read_scalars(TableReader& sig, const std::string& file) {
  std::vector<ScalarSpec> out;
  const toml::node* scalars = sig.get("scalars");
  if (scalars == nullptr) return out;
  if (!scalars->is_array()) sig.fail(scalars, "scalars", "expected an array of { name, default }");
  const toml::array& arr = *scalars->as_array();
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string p = fmt::format("signature.scalars[{}]", i);
    TableReader r(as_table(*arr.get(i), p, file), p, file);
    ScalarSpec s{r.string("name"), r.finite_number("default", -k_max_data_parameter, k_max_data_parameter)};
    r.reject_unknown_keys();
    out.push_back(std::move(s));
  }
  return out;
}

Signature read_signature(TableReader& top, const std::string& file) {
  Signature s;
  TableReader sig(top.table("signature"), "signature", file);
  s.inputs = read_tensors(sig.array("inputs"), "signature.inputs", file, true);
  s.outputs = read_tensors(sig.array("outputs"), "signature.outputs", file, false);
  if (s.outputs.empty()) sig.fail(sig.get("outputs"), "outputs", "a task needs at least one output");
  s.scalars = read_scalars(sig, file);
  sig.reject_unknown_keys();
  std::set<std::string> all;
  for (const auto* list : {&s.inputs, &s.outputs}) {
    for (const TensorSpec& t : *list) {
      if (!all.insert(t.name).second)
        sig.fail(nullptr, "outputs", fmt::format("tensor name '{}' is used twice", t.name));
    }
  }
  return s;
}

// One tolerance table's fields: `mode` (abs_rel, the default, ulp or exact) and the numbers that mode takes (rtol and
// atol; ulp; none). `what` names the outputs it applies to, for messages.
Tolerance read_tolerance_fields(TableReader& tol) {
  Tolerance out;
  const std::string mode = tol.optional_string("mode").value_or("abs_rel");
  if (mode == "abs_rel") {
    out.mode = ToleranceMode::abs_rel;
    for (auto [key, value] : {std::pair{"rtol", &out.rtol}, std::pair{"atol", &out.atol}}) {
      *value = tol.number(key);
      if (!std::isfinite(*value) || *value < 0) {
        tol.fail(tol.get(key), key,
                 fmt::format("must be a finite number >= 0 (got {}): outputs pass when |got - "
                             "expected| <= atol + rtol * |expected|",
                             *value));
      }
    }
    if (tol.get("ulp") != nullptr)
      tol.fail(tol.get("ulp"), "ulp", "'ulp' needs mode = \"ulp\" (and then no rtol or atol)");
  } else if (mode == "ulp") {
    out.mode = ToleranceMode::ulp;
    const double ulp = tol.number("ulp");
    if (!std::isfinite(ulp) || ulp <= 0 || ulp > 1048576) {
      tol.fail(tol.get("ulp"), "ulp",
               fmt::format("must be a number from above 0 to 2^20 (got {}): outputs pass when |got - expected| <= ulp "
                           "* the spacing of the output's dtype at |expected|",
                           ulp));
    }
    out.ulp = ulp;
    for (const char* k : {"rtol", "atol"}) {
      if (tol.get(k) != nullptr) tol.fail(tol.get(k), k, fmt::format("mode \"ulp\" takes 'ulp', not '{}'", k));
    }
  } else if (mode == "exact") {
    out.mode = ToleranceMode::exact;
    for (const char* k : {"rtol", "atol", "ulp"}) {
      if (tol.get(k) != nullptr) tol.fail(tol.get(k), k, fmt::format("mode \"exact\" takes no '{}'", k));
    }
  } else {
    tol.fail(tol.get("mode"), "mode",
             fmt::format("unknown tolerance mode '{}' (expected abs_rel, ulp or exact)", mode));
  }
  return out;
}

// [tolerance]: the default of the floating outputs, and [tolerance.NAME] per output. An integer or boolean output is
// compared exactly (its table, if any, may only say mode = "exact"); [tolerance] itself may be left out when every
// floating output has a table of its own.
void read_tolerance(Task& task, TableReader& top, const std::string& file) {
  const Signature& sig = task.signature;
  bool default_needed = false;
  const toml::table* top_table = nullptr;
  if (const toml::node* n = top.get("tolerance"); n != nullptr) top_table = &top.table("tolerance");
  std::map<std::string, const toml::table*> own;
  if (top_table != nullptr) {
    for (const auto& [k, v] : *top_table) {
      const std::string key(k.str());
      if (!v.is_table()) continue;
      const auto it =
          std::find_if(sig.outputs.begin(), sig.outputs.end(), [&](const TensorSpec& t) { return t.name == key; });
      if (it == sig.outputs.end()) {
        std::vector<std::string> names;
        for (const TensorSpec& t : sig.outputs) names.push_back(t.name);
        throw DataError(
            fmt::format("{}:{}: field 'tolerance.{}': no output is named '{}' (outputs: {}); a table "
                        "under [tolerance] is one output's own tolerance",
                        file, TableReader::line_of(v), key, key, fmt::join(names, ", ")));
      }
      own[key] = v.as_table();
    }
  }
  for (const TensorSpec& t : sig.outputs) default_needed |= !is_exact_dtype(t.dtype) && !own.contains(t.name);
  if (top_table == nullptr && default_needed) top.table("tolerance");  // the missing-field error, with its fix
  if (top_table != nullptr) {
    TableReader tol(*top_table, "tolerance", file);
    for (const auto& [name, table] : own) tol.get(name);
    const bool has_default_fields =
        std::any_of(top_table->begin(), top_table->end(), [](const auto& kv) { return !kv.second.is_table(); });
    if (default_needed || has_default_fields) {
      task.tolerance = read_tolerance_fields(tol);
    } else {
      task.tolerance.mode = ToleranceMode::exact;
    }
    tol.reject_unknown_keys();
  } else {
    task.tolerance.mode = ToleranceMode::exact;
  }
  for (const TensorSpec& t : sig.outputs) {
    const auto it = own.find(t.name);
    Tolerance tol = is_exact_dtype(t.dtype) ? Tolerance{ToleranceMode::exact} : task.tolerance;
    if (it != own.end()) {
      TableReader r(*it->second, "tolerance." + t.name, file);
      tol = read_tolerance_fields(r);
      if (is_exact_dtype(t.dtype) && tol.mode != ToleranceMode::exact) {
        r.fail(nullptr, "mode",
               fmt::format("output '{}' is {}: integer and boolean outputs are compared exactly; write mode = "
                           "\"exact\" or leave the table out",
                           t.name, to_string(t.dtype)));
      }
      r.reject_unknown_keys();
    }
    task.output_tolerance.push_back(tol);
  }
}

// Every dim name any shape uses.
std::set<std::string> dim_names_of(const Signature& sig) {
  std::set<std::string> names;
  for (const auto* list : {&sig.inputs, &sig.outputs}) {
    for (const TensorSpec& t : *list) {
      for (const ShapeExpr& e : t.shape) e.collect_names(names);
    }
  }
  return names;
}

// [dims]: per dim name the shapes use, { multiple_of = N, min = N, equal_to = "other" }. equal_to must name another
// dim that is itself free of equal_to (no chains, no cycles), and then takes no other key.
std::map<std::string, DimConstraint> read_dim_constraints(TableReader& top, const std::string& file,
                                                          const std::set<std::string>& dim_names) {
  std::map<std::string, DimConstraint> out;
  if (top.get("dims") == nullptr) return out;
  TableReader dims(top.table("dims"), "dims", file);
  for (const auto& [k, v] : top.table("dims")) {
    const std::string name(k.str());
    if (!dim_names.contains(name)) {
      dims.fail(
          &v, name,
          fmt::format("no tensor shape uses a dim named '{}' (shapes use: {})", name, fmt::join(dim_names, ", ")));
    }
    TableReader d(as_table(v, "dims." + name, file), "dims." + name, file);
    DimConstraint c;
    constexpr int64_t k_max = int64_t{1} << 30;
    if (d.get("multiple_of") != nullptr) {
      c.multiple_of = d.integer("multiple_of");
      if (c.multiple_of < 1 || c.multiple_of > k_max) {
        d.fail(d.get("multiple_of"), "multiple_of",
               fmt::format("must be an integer from 1 to {} (got {})", k_max, c.multiple_of));
      }
    }
    if (d.get("min") != nullptr) {
      c.min = d.integer("min");
      if (c.min < 1 || c.min > k_max)
        d.fail(d.get("min"), "min", fmt::format("must be an integer from 1 to {} (got {})", k_max, c.min));
    }
    if (auto other = d.optional_string("equal_to")) {
      if (!dim_names.contains(*other) || *other == name) {
        d.fail(d.get("equal_to"), "equal_to",
               fmt::format("'{}' is not another dim the shapes use ({})", *other, fmt::join(dim_names, ", ")));
      }
      if (d.get("multiple_of") != nullptr || d.get("min") != nullptr) {
        d.fail(d.get("equal_to"), "equal_to", "a dim equal to another takes that dim's constraints; give them there");
      }
      c.equal_to = *other;
    }
    d.reject_unknown_keys();
    dims.get(name);
    out[name] = c;
  }
  for (const auto& [name, c] : out) {
    if (!c.equal_to.empty() && out.contains(c.equal_to) && !out.at(c.equal_to).equal_to.empty()) {
      dims.fail(nullptr, name,
                fmt::format("equal_to = '{}', which is itself equal to '{}': name '{}' directly", c.equal_to,
                            out.at(c.equal_to).equal_to, out.at(c.equal_to).equal_to));
    }
  }
  dims.reject_unknown_keys();
  return out;
}

// A case's dims: exactly the dim names the shapes use, each a positive integer.
std::map<std::string, int64_t> read_case_dims(TableReader& r, const std::string& p, const std::string& file,
                                              const std::set<std::string>& dim_names) {
  std::map<std::string, int64_t> out;
  TableReader dims(r.table("dims"), p + ".dims", file);
  for (const auto& [k, v] : r.table("dims")) {
    std::string key(k.str());
    if (!dim_names.contains(key)) {
      dims.fail(&v, key,
                fmt::format("no tensor shape uses a dim named '{}' (shapes use: {})", key, fmt::join(dim_names, ", ")));
    }
    int64_t value = dims.integer(key);
    if (value <= 0) dims.fail(&v, key, fmt::format("dims must be positive integers (got {})", value));
    out[key] = value;
  }
  for (const std::string& needed : dim_names) {
    if (!out.contains(needed))
      dims.fail(nullptr, needed, fmt::format("missing: the signature's shapes use dim '{}'", needed));
  }
  return out;
}

// cases[i], checked against the task read so far (its signature, the cases before it).
CaseRole read_case_role(TableReader& r) {
  const std::string role = r.string("role");
  if (role == "timing") return CaseRole::timing;
  if (role == "correctness") return CaseRole::correctness;
  r.fail(r.get("role"), "role", fmt::format("unknown role '{}' (expected timing or correctness)", role));
}

// `scalars = { eps = 1e-5 }`: this case's values for the signature's scalars.
void read_case_scalars(const Task& task, TableReader& r, const std::string& p, const std::string& file, Case& c) {
  const toml::node* sc = r.get("scalars");
  if (sc == nullptr) return;
  const toml::table& st = as_table(*sc, p + ".scalars", file);
  TableReader sr(st, p + ".scalars", file);
  for (const ScalarSpec& s : task.signature.scalars) {
    if (auto v = sr.optional_finite(s.name, -k_max_data_parameter, k_max_data_parameter)) c.scalars[s.name] = *v;
  }
  sr.reject_unknown_keys();
}

// `inputs = { q = { distribution = "normal", scale = 4.0 } }`: this case's law for the inputs it names.
void read_case_input_laws(const Task& task, TableReader& r, const std::string& p, const std::string& file, Case& c) {
  const toml::node* in = r.get("inputs");
  if (in == nullptr) return;
  const toml::table& it = as_table(*in, p + ".inputs", file);
  for (const auto& [k, v] : it) {
    const std::string name(k.str());
    const bool known = std::any_of(task.signature.inputs.begin(), task.signature.inputs.end(),
                                   [&](const TensorSpec& t) { return t.name == name; });
    if (!known) {
      std::vector<std::string> names;
      for (const TensorSpec& t : task.signature.inputs) names.push_back(t.name);
      throw DataError(fmt::format("{}:{}: field '{}.inputs.{}': no input is named '{}' (inputs: {})", file,
                                  TableReader::line_of(v), p, name, name, fmt::join(names, ", ")));
    }
    TableReader lr(as_table(v, p + ".inputs." + name, file), p + ".inputs." + name, file);
    c.input_laws[name] = *read_distribution(lr, true);
    lr.reject_unknown_keys();
  }
}

// Every input's law at this case's dims: bounds that evaluate, a `reads` that evaluates, a law its dtype can hold.
void check_case_inputs(const Task& task, const Case& c, TableReader& r) {
  for (const TensorSpec& in : task.signature.inputs) {
    Distribution dist;
    try {
      dist = input_law(in, c);
    } catch (const std::out_of_range& e) {
      r.fail(nullptr, "distribution",
             fmt::format("input '{}': a randint bound names a dim this case does not set ({}); "
                         "bounds may use the dims the shapes use",
                         in.name, e.what()));
    }
    if (dist.kind == DistributionKind::randint && dist.low > dist.high) {
      r.fail(nullptr, "distribution",
             fmt::format("input '{}': randint needs low <= high, and at this case's dims its "
                         "bounds are low = {}, high = {}",
                         in.name, dist.low, dist.high));
    }
    if (in.reads) {
      try {
        (void)input_reads(in, c);
      } catch (const std::exception& e) {
        r.fail(nullptr, "signature.inputs",
               fmt::format("input '{}': reads = \"{}\" cannot be evaluated at this case's "
                           "dims ({}); it may use the dims the shapes use",
                           in.name, in.reads->text(), e.what()));
      }
    }
    const std::string why = distribution_misfit(dist, in.dtype, resolve_shape(in, c).elements());
    if (!why.empty()) {
      const char* whose = c.input_laws.contains(in.name) ? ", this case's law for it in inputs"
                          : in.distribution              ? ", its own distribution in [signature]"
                                                         : "";
      r.fail(in.distribution || c.input_laws.contains(in.name) ? nullptr : r.get("distribution"), "distribution",
             fmt::format("input '{}' ({}{}): {}", in.name, to_string(in.dtype), whose, why));
    }
  }
}

Case read_case(const Task& task, const toml::node& node, size_t i, const std::string& file,
               const std::set<std::string>& dim_names) {
  std::string p = fmt::format("cases[{}]", i);
  TableReader r(as_table(node, p, file), p, file);
  Case c;
  c.line = r.line();
  c.name = r.string("name");
  if (task.find_case(c.name) != nullptr) r.fail(r.get("name"), "name", fmt::format("duplicate case '{}'", c.name));
  c.role = read_case_role(r);
  c.dims = read_case_dims(r, p, file, dim_names);
  if (const std::string why = constraint_violation(task.dim_constraints, c.dims); !why.empty()) {
    r.fail(r.get("dims"), "dims", why + "; change the case or the constraint");
  }
  // The case's law for its inputs; optional when every input has a law of its own (checked below, once the case's
  // `inputs` are read).
  const std::optional<Distribution> data = read_distribution(r, false);
  if (data) c.data = *data;
  int64_t seed = r.integer("seed");
  if (seed < 0) r.fail(r.get("seed"), "seed", "seeds must be >= 0");
  c.seed = static_cast<uint64_t>(seed);
  read_case_scalars(task, r, p, file, c);
  read_case_input_laws(task, r, p, file, c);
  r.reject_unknown_keys();
  if (!data) {
    for (const TensorSpec& in : task.signature.inputs) {
      if (in.distribution || c.input_laws.contains(in.name)) continue;
      r.fail(nullptr, "distribution",
             fmt::format("missing, and input '{}' has no law of its own (a distribution in [signature], or in this "
                         "case's inputs): give the case a distribution = \"...\", or '{}' its own",
                         in.name, in.name));
    }
  }
  check_case_size(task, c, r);
  check_case_inputs(task, c, r);
  return c;
}

void read_cases(Task& task, TableReader& top, const std::string& file) {
  const std::set<std::string> dim_names = dim_names_of(task.signature);
  const toml::array& cases = top.array("cases");
  if (cases.empty()) top.fail(&cases, "cases", "a task needs at least one case");
  for (size_t i = 0; i < cases.size(); ++i) task.cases.push_back(read_case(task, *cases.get(i), i, file, dim_names));
}

// One [[backends.X.controls]] entry: a file of its own, or a change of one file; and the failure it must show.
ControlSpec read_control(TableReader& cr, const fs::path& dir) {
  ControlSpec ctl;
  ctl.name = cr.string("name");
  // The name becomes a file name in the bundle (checks/control_<name>.json).
  if (ctl.name.empty() || ctl.name.size() > 64 ||
      ctl.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
          std::string::npos) {
    cr.fail(cr.get("name"), "name",
            fmt::format("control name '{}' must be 1-64 letters, digits, '_' or '-'", ctl.name));
  }
  if ((cr.get("source") != nullptr) == (cr.get("base") != nullptr)) {
    cr.fail(cr.get("source") != nullptr ? cr.get("source") : nullptr, "source",
            "give either 'source' (a file of its own) or 'base', 'replace' and 'with' (a change of one file)");
  }
  if (cr.get("source") != nullptr) {
    ctl.source = resolve_source(cr, "source", dir);
  } else {
    ctl.base = resolve_source(cr, "base", dir);
    ctl.replace = cr.string("replace");
    ctl.with = cr.string("with");
    ctl.source = derived_control_source(cr, ctl);
  }
  const std::string expect = cr.string("expect");
  const std::optional<FailureReason> reason = parse_failure_reason(expect);
  if (!reason) {
    const std::optional<std::string> guess = closest_match(expect, failure_reason_names());
    cr.fail(
        cr.get("expect"), "expect",
        fmt::format("unknown failure reason '{}' (expected one of {}){}", expect,
                    fmt::join(failure_reason_names(), ", "), guess ? fmt::format("; did you mean '{}'?", *guess) : ""));
  }
  ctl.expect = *reason;
  cr.reject_unknown_keys();
  return ctl;
}

// [backends.X] (`p`): its baseline, its reference, its controls.
BackendImpls read_backend(const toml::node& node, const std::string& p, const std::string& file, const fs::path& dir) {
  TableReader b(as_table(node, p, file), p, file);
  BackendImpls impls;
  impls.baseline = resolve_source(b, "baseline", dir);
  impls.reference = resolve_source(b, "reference", dir);
  if (const toml::node* controls = b.get("controls")) {
    if (!controls->is_array()) b.fail(controls, "controls", "expected an array of tables ([[backends.X.controls]])");
    const toml::array& arr = *controls->as_array();
    for (size_t i = 0; i < arr.size(); ++i) {
      std::string cp = fmt::format("{}.controls[{}]", p, i);
      TableReader cr(as_table(*arr.get(i), cp, file), cp, file);
      impls.controls.push_back(read_control(cr, dir));
    }
  }
  b.reject_unknown_keys();
  return impls;
}

void read_backends(Task& task, TableReader& top, const std::string& file) {
  TableReader backends(top.table("backends"), "backends", file);
  // Names first: [[backends.cpu.controls]] next to a misspelled [backends.cpux] must not read as a cpu section
  // without a baseline.
  const std::vector<std::string> names = backend_names();
  for (const auto& [k, v] : top.table("backends")) {
    const std::string name(k.str());
    if (!parse_backend(name)) {
      const std::optional<std::string> guess = closest_match(name, names);
      backends.fail(&v, name,
                    fmt::format("unknown backend '{}' (kwb knows {}){}", name, fmt::join(names, ", "),
                                guess ? fmt::format("; did you mean '{}'?", *guess) : ""));
    }
  }
  for (const auto& [k, v] : top.table("backends")) {
    std::string name(k.str());
    BackendImpls impls = read_backend(v, "backends." + name, file, task.dir);
    backends.get(name);
    task.backends[*parse_backend(name)] = std::move(impls);
  }
}

}  // namespace

Task load_task(const fs::path& dir_in) {
  Task task;
  toml::table root = parse_manifest(task, dir_in);
  const std::string file = task.manifest.string();
  TableReader top(root, "", file);
  read_header(task, top);
  task.signature = read_signature(top, file);
  read_tolerance(task, top, file);
  task.dim_constraints = read_dim_constraints(top, file, dim_names_of(task.signature));
  read_cases(task, top, file);
  read_backends(task, top, file);
  top.reject_unknown_keys();
  task.identity = task_identity(task);
  return task;
}

std::string task_identity(const Task& task) {
  std::string text =
      fmt::format("kwb task identity v1\nmanifest {}\noracle {}\n", task.manifest_sha256, task.oracle_sha256);
  for (const auto& [backend, impls] : task.backends) {  // a map: in BackendKind order
    text += fmt::format("{} baseline {}\n", to_string(backend), sha256_file(impls.baseline));
    for (const ControlSpec& c : impls.controls) {
      text += fmt::format("{} control {} {}\n", to_string(backend), c.name, sha256_file(c.source));
    }
  }
  return sha256_hex(text);
}

std::string constraint_violation(const std::map<std::string, DimConstraint>& constraints,
                                 const std::map<std::string, int64_t>& dims) {
  for (const auto& [name, c] : constraints) {
    const auto at = dims.find(name);
    if (at == dims.end()) continue;
    const int64_t v = at->second;
    if (!c.equal_to.empty() && dims.contains(c.equal_to) && dims.at(c.equal_to) != v) {
      return fmt::format("dim '{}' = {} must equal dim '{}' = {} ([dims] {}.equal_to)", name, v, c.equal_to,
                         dims.at(c.equal_to), name);
    }
    if (v % c.multiple_of != 0) {
      return fmt::format("dim '{}' = {} must be a multiple of {} ([dims] {}.multiple_of)", name, v, c.multiple_of,
                         name);
    }
    if (v < c.min) return fmt::format("dim '{}' = {} must be at least {} ([dims] {}.min)", name, v, c.min, name);
  }
  return "";
}

}  // namespace kwb
