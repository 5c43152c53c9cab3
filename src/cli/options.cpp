#include "cli/options.h"

#include "util/backend_kind.h"
#include "util/data_secret.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>

namespace kwb::cli {

std::chrono::milliseconds timeout_from_seconds(double seconds) {
  const double s =
      std::isnan(seconds) ? k_timeout_range.min : std::clamp(seconds, k_timeout_range.min, k_timeout_range.max);
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000)));
}

namespace {

std::string bound_text(const OptionRange& r, double v) {
  if (!r.integer) return fmt::format("{}", v);
  return v == k_seed_range.max ? std::string("2^64 - 1") : fmt::format("{:.0f}", v);
}

}  // namespace

std::string out_of_range(const OptionRange& r, const std::string& given) {
  // from_chars reads what strtod reads but a leading '+', which a person may well type.
  const std::string text = given.starts_with('+') ? given.substr(1) : given;
  const std::string wanted =
      fmt::format("{} must be {} from {} to {}", r.flag, r.integer ? "an integer" : "a finite number",
                  bound_text(r, r.min), bound_text(r, r.max));
  const std::string shown = given.size() > 40 ? given.substr(0, 40) + "..." : given;
  if (r.integer) {
    // Integers are read exactly (a double would round 2^64 - 1): digits only, no sign, no exponent.
    uint64_t v = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || ptr != end || static_cast<double>(v) < r.min ||
        static_cast<double>(v) > r.max) {
      return fmt::format("{} (got {})", wanted, shown);
    }
    return "";
  }
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v) || v < r.min || v > r.max) {
    return fmt::format("{} (got {})", wanted, shown);
  }
  return "";
}

CLI::Validator in_range(const OptionRange& range) {
  // CLI11 puts the option's name in front ("--calls: must be ..."), so it is not repeated here.
  return CLI::Validator(
      [range](std::string& text) {
        const std::string why = out_of_range(range, text);
        return why.empty() ? why : why.substr(std::string_view(range.flag).size() + 1);
      },
      fmt::format("{} in [{} - {}]", range.integer ? "INT" : "NUMBER", bound_text(range, range.min),
                  bound_text(range, range.max)),
      "");
}

std::string gate_name(stats::GateKind kind) { return kind == stats::GateKind::ci ? "ci" : "point"; }

std::vector<std::string> gate_names() { return option_row("gate").choices; }

void add_backend_option(CLI::App& app, BackendKind& backend) {
  // The name is checked first, so the callback's parse cannot fail.
  app.add_option_function<std::string>(
         "--backend", [&backend](const std::string& name) { backend = parse_backend(name).value(); },
         "cpu, opencl or cuda")
      ->check(CLI::IsMember(backend_names()))
      ->default_str(std::string(to_string(backend)));
}

namespace {

stats::GateKind gate_kind(const std::string& name) {
  return name == "point" ? stats::GateKind::point : stats::GateKind::ci;
}

}  // namespace

// ---- check ----------------------------------------------------------------------------------------------------------

void add_check_options(CLI::App& app, CheckArgs& a) {
  app.add_option("task_dir", a.task_dir, "Task folder (holding task.toml)")->required();
  CLI::Option* impl = app.add_option("--impl", a.impl, "Implementation source (.c/.cpp)");
  CLI::Option* control =
      app.add_option("--control", a.control, "One of the task's error controls, by name (instead of --impl)");
  impl->excludes(control);
  control->excludes(impl);
  add_backend_option(app, a.backend);
  app.add_flag("--json", a.json, "Print one JSON object instead of the table");
  app.add_option("--timeout-seconds", a.timeout_seconds, "Per call")
      ->capture_default_str()
      ->check(in_range(k_timeout_range));
  app.add_option("--seed", a.seed, "Data nonce: 0 uses the task's published seeds")
      ->capture_default_str()
      ->check(in_range(k_seed_range));
  app.add_option("--calls", a.calls, "Calls per case, each with fresh data")
      ->capture_default_str()
      ->check(in_range(k_calls_range));
  app.add_option("--case", a.cases, "Only this case (repeatable)");
  app.add_flag("--held-out", a.held_out,
               "Also run held-out cases (perturbed shapes, fresh data) and rehearse a timing visit, as final "
               "validation does");
  app.add_flag("--exhaustive", a.exhaustive,
               "Run every case even after the worker failed in one (timeout, crash, sandbox violation); by default "
               "the check stops there and lists the cases not run");
  app.add_flag("--until-rejected", a.until_rejected,
               "With --control: stop after the first case in which the control's expected reason appears, as "
               "validate's control stage does, and list the cases not run")
      ->needs(control);
}

CheckOptions check_options(const CheckArgs& a) {
  CheckOptions o;
  o.backend = a.backend;
  o.timeout = timeout_from_seconds(a.timeout_seconds);
  o.nonce = a.seed;
  o.calls_per_case = a.calls;
  o.only_cases = a.cases;
  o.held_out = a.held_out;
  o.exhaustive = a.exhaustive;
  return o;
}

// ---- compare and validate -------------------------------------------------------------------------------------------

namespace {

// An option of `row`, bound to `value`: its flag, help and range from the row.
template <typename T>
CLI::Option* add_row(CLI::App& app, const char* key, T& value) {
  const OptionRow& row = option_row(key);
  if constexpr (std::is_same_v<T, bool>) {
    return app.add_flag(row.flag, value, row.help);
  } else {
    CLI::Option* o = app.add_option(row.flag, value, row.help);
    if (row.range != nullptr) o->check(in_range(*row.range));
    if (!row.choices.empty()) o->check(CLI::IsMember(row.choices));
    return o;
  }
}

}  // namespace

void add_timing_options(CLI::App& app, TimingArgs& a) {
  add_backend_option(app, a.backend);
  add_row(app, "gate", a.gate)->capture_default_str();
  add_row(app, "min_improvement_pct", a.min_improvement_pct)->capture_default_str();
  add_row(app, "max_aa_difference_pct", a.max_aa_difference_pct)->capture_default_str();
  add_row(app, "same_margin_pct", a.same_margin_pct);
  add_row(app, "repetitions", a.repetitions)->capture_default_str();
  add_row(app, "max_blocks", a.max_blocks)->capture_default_str();
  add_row(app, "warmups", a.warmups)->capture_default_str();
  add_row(app, "samples", a.samples)->capture_default_str();
  add_row(app, "max_minutes", a.max_minutes)->capture_default_str();
  add_row(app, "timeout_seconds", a.timeout_seconds)->capture_default_str();
  add_row(app, "lock_timeout_seconds", a.lock_timeout_seconds);
  add_row(app, "workloads", a.workloads);
  add_row(app, "cold", a.cold);
  add_row(app, "layouts", a.layouts)->capture_default_str();
  add_row(app, "exhaustive", a.exhaustive);
}

GateConfig gate_config(const TimingArgs& a, CompareMode mode) {
  GateConfig g;
  g.mode = mode;
  g.kind = gate_kind(a.gate);
  g.min_improvement_pct = a.min_improvement_pct;
  g.max_aa_difference_pct = a.max_aa_difference_pct;
  g.same_margin_pct = a.same_margin_pct.value_or(defaults::k_same_margin_pct);  // the task's: same_margin_pct()
  return g;                                                                     // alpha: defaults::k_alpha, not a flag
}

double same_margin_pct(const TimingArgs& a, const Task& task) {
  return a.same_margin_pct.value_or(task.same_margin_pct.value_or(defaults::k_same_margin_pct));
}

Budget budget(const TimingArgs& a) { return {a.repetitions, a.max_blocks, a.max_minutes * 60.0}; }

TimingOptions timing_options(const TimingArgs& a) {
  TimingOptions t;
  t.backend = a.backend;
  t.cold = a.cold;
  t.timeout = timeout_from_seconds(a.timeout_seconds);
  t.warmups = a.warmups;
  t.samples = a.samples;
  return t;
}

void add_compare_options(CLI::App& app, CompareArgs& a) {
  app.add_option("task_dir", a.task_dir, "Task folder (holding task.toml)")->required();
  app.add_option("--baseline", a.baseline, "Baseline source (default: the task's baseline for the backend)");
  app.add_option("--candidate", a.candidate, "Candidate source");
  app.add_flag("--aa", a.aa, "A/A: the baseline's layout pool against itself, drawn independently (A')");
  add_timing_options(app, a.timing);
  app.add_option("--seed", a.seed,
                 "Seed for block orders and layouts (timed data comes from a secret drawn at run time)")
      ->capture_default_str()
      ->check(in_range(k_seed_range));
  app.add_option("--output-dir", a.output_dir, "Write samples.csv (every sample) and compare.json here");
  app.add_flag("--json", a.json, "Print the JSON summary");
}

CompareRequest compare_request(const CompareArgs& a) {
  CompareRequest r;
  r.mode = a.aa ? CompareMode::aa : CompareMode::ab;
  r.workloads = a.timing.workloads;
  r.gate = gate_config(a.timing, r.mode);
  r.budget = budget(a.timing);
  r.timing = timing_options(a.timing);
  r.seed = a.seed;
  r.output_dir = a.output_dir;
  r.exhaustive_checks = a.timing.exhaustive;
  r.lock_timeout_s = a.timing.lock_timeout_seconds;
  return r;
}

void add_validate_options(CLI::App& app, ValidateArgs& a) {
  app.add_option("task_dir", a.task_dir, "Task folder (holding task.toml)")->required();
  app.add_option("--candidate", a.candidate, "Candidate source")->required();
  app.add_option("--baseline", a.baseline, "Baseline source (default: the task's baseline for the backend)");
  app.add_option("--against", a.against,
                 "incumbent: the baseline is the task's incumbent in the ledger (kwb keep; the task's baseline when "
                 "nothing was kept)")
      ->check(CLI::IsMember({"incumbent"}));
  add_validate_run_options(app, a);
}

void add_validate_run_options(CLI::App& app, ValidateArgs& a) {
  app.add_option("--output-dir", a.output_dir, "Evidence bundle folder (must not exist yet)")->required();
  add_timing_options(app, a.timing);
  add_row(app, "seed", a.seed);
  add_row(app, "no_profile", a.no_profile);
  app.add_flag("--json", a.json, "Print decision.json");
  app.add_option("--job-nonce", a.job_nonce,
                 "Set by kwb campaign and kwb experiment, not by hand: a nonce for this job attempt, recorded in the "
                 "plan's command line (64 hex digits)")
      ->check([](const std::string& v) {
        return DataSecret::from_hex(v) ? std::string() : std::string("--job-nonce takes the 64 hex digits kwb drew");
      });
}

ValidateOptions validate_options(const ValidateArgs& a) {
  ValidateOptions o;
  o.task_dir = a.task_dir;
  o.candidate = a.candidate;
  o.baseline = a.baseline;
  o.output_dir = a.output_dir;
  o.backend = a.timing.backend;
  o.gate = gate_config(a.timing, CompareMode::ab);  // the mode is set per stage
  o.budget = budget(a.timing);
  o.timing = timing_options(a.timing);
  o.seed = a.seed;
  o.workloads = a.timing.workloads;
  o.exhaustive_checks = a.timing.exhaustive;
  o.layouts = a.timing.layouts;
  o.profile = !a.no_profile;
  o.lock_timeout_s = a.timing.lock_timeout_seconds;
  return o;
}

}  // namespace kwb::cli
