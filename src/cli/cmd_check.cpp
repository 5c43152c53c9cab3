// kwb check TASK_DIR --impl SOURCE [--backend cpu] [--held-out] [--exhaustive] [--json]
#include "builder/builder.h"
#include "cli/commands.h"
#include "cli/ledger.h"
#include "cli/options.h"
#include "cli/terminal.h"
#include "pipeline/check.h"
#include "record/control_margin.h"
#include "task/task.h"
#include "util/error.h"
#include "util/json_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <iostream>

namespace kwb::cli {

namespace fs = std::filesystem;

namespace {

// The worst element's share of atol + rtol * |expected| (100% is the limit): the relative error alone misleads
// where atol dominates (near-zero expected values).
std::string tolerance_text(double used) {
  if (!std::isfinite(used)) return "all (inf)";
  return used < 0.0001 ? "0%" : fmt::format("{:.2g}%", 100.0 * used);
}

// `shown_as`: how to name the implementation when its path is not what a person gave (a control written as a change
// of another source lives in kwb's cache); empty: its path.
// Each output's worst element over every case: how far it was, absolutely and relatively, and how much of that
// output's tolerance it used, with the case it was in, so that a tolerance is judged per output and per mode.
void print_output_errors(const CheckReport& r, const Task& task) {
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < task.signature.outputs.size(); ++i) {
    OutputErrors worst;
    std::string worst_case = "-";  // none where no element erred at all
    double worst_used = 0.0, worst_abs = 0.0;
    for (const CaseReport& c : r.cases) {
      if (i >= c.outputs.size()) continue;
      worst.merge(c.outputs[i]);
      const OutputErrors& e = c.outputs[i];
      if (e.tolerance_used > worst_used || (e.tolerance_used == worst_used && e.max_abs_error > worst_abs)) {
        worst_used = e.tolerance_used;
        worst_abs = e.max_abs_error;
        worst_case = c.name;
      }
    }
    const TensorSpec& spec = task.signature.outputs[i];
    const Tolerance& tol = task.output_tolerance.at(i);
    const bool exact = is_exact_dtype(spec.dtype) || tol.mode == ToleranceMode::exact;
    rows.push_back({spec.name, to_string(spec.dtype), exact ? "exact" : describe_tolerance(tol),
                    fmt::format("{:.3g}", worst.max_abs_error), fmt::format("{:.3g}", worst.max_rel_error),
                    exact ? (worst.max_abs_error == 0.0 ? "equal" : "differs") : tolerance_text(worst.tolerance_used),
                    worst_case});
  }
  std::cout << "\n"
            << format_table(
                   {"output", "dtype", "tolerance", "max abs error", "max rel error", "tolerance used", "worst case"},
                   rows);
}

void print_human(const CheckReport& r, const Artifact& art, const Task& task, const std::string& shown_as = "") {
  std::cout << fmt::format("kwb check: task {}, implementation {}\n", r.task,
                           shown_as.empty() ? r.implementation : shown_as);
  if (!r.device.empty()) std::cout << fmt::format("  backend {}: {}\n", r.backend, r.device);
  std::cout << fmt::format("  source sha256 {}  artifact sha256 {}{}\n", art.identity.source_sha256.substr(0, 16),
                           art.identity.artifact_sha256.empty() ? "-" : art.identity.artifact_sha256.substr(0, 16),
                           art.from_cache ? " (cached build)" : "");
  if (!r.built) {
    std::cout << "\nbuild failed:\n" << r.build_log << "\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const CaseReport& c : r.cases) {
      rows.push_back({c.name, to_string(c.role), c.dims, std::to_string(c.calls_run), std::to_string(c.passed),
                      std::to_string(c.failed), tolerance_text(c.tolerance_used), c.failed == 0 ? "ok" : "FAIL"});
    }
    std::cout << "\n"
              << format_table({"case", "role", "dims", "calls", "passed", "failed", "tolerance used", "result"}, rows);
    print_output_errors(r, task);
    // The device trace of each case's first call: the kernels an implementation launches are part of what it is.
    for (const CaseReport& c : r.cases) {
      if (c.kernels.empty()) continue;
      std::cout << fmt::format("  {} launches {} command(s) per call: {}\n", c.name, c.kernels.size(),
                               fmt::join(c.kernels, ", "));
      break;
    }
  }
  if (!r.failures.empty()) {
    std::cout << "\nfailures:\n";
    size_t shown = 0;
    for (const Failure& f : r.failures) {
      if (shown++ == 20) {
        std::cout << fmt::format("  ... and {} more (use --json for all)\n", r.failures.size() - 20);
        break;
      }
      std::string where = f.case_name.empty() ? "build" : f.case_name;
      if (f.call >= 0) where += fmt::format(" call {}", f.call);
      std::string detail = f.detail.size() > 400 ? f.detail.substr(0, 400) + " ..." : f.detail;
      std::cout << fmt::format("  [{}] {}: {} — {}\n", f.reason, where, f.assertion, detail);
    }
  }
  if (!r.not_run.empty()) {
    std::cout << fmt::format("\nnot run ({} case(s)): {}\n  stopped because {}\n", r.not_run.size(),
                             fmt::join(r.not_run, ", "), r.stop_reason);
  }
  std::cout << fmt::format("\n{} assertions passed, {} failed{}\n", r.passed, r.failed,
                           r.not_run.empty() ? "" : fmt::format("; {} case(s) not run", r.not_run.size()));
  std::cout << fmt::format("verdict: {}\n", r.pass() ? "PASS" : "FAIL");
}

// The task's error control --control names (nullptr without --control), after the arguments are checked.
const ControlSpec* checked_control(const CheckArgs& args, const Task& task) {
  if (!task.backends.contains(args.backend)) {
    throw DataError(fmt::format("{}: the task has no [backends.{}] section", task.manifest.string(), args.backend));
  }
  for (const std::string& c : args.cases) (void)task.require_case("--case", c, false);
  if (args.impl.empty() == args.control.empty()) {
    throw UsageError("check needs --impl SOURCE, or --control NAME for one of the task's error controls");
  }
  if (args.control.empty()) return nullptr;
  std::vector<std::string> names;
  for (const ControlSpec& c : task.backends.at(args.backend).controls) {
    names.push_back(c.name);
    if (c.name == args.control) return &c;
  }
  throw UsageError(fmt::format("--control {}: the task has no such control on {} (it has: {})", args.control,
                               args.backend, names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
}

// What a control's check says of it, after the report: rejected for its reason (and by how much), or not.
void print_control(const ControlSpec& control, const CheckReport& report, bool expected_reason,
                   const ControlMargin& margin) {
  std::cout << fmt::format("control {} must be rejected with {}: {}\n", control.name, control.expect,
                           report.pass()     ? "it PASSED (the check cannot catch this mistake)"
                           : expected_reason ? "it was, " + describe(margin)
                                             : fmt::format("it was rejected, but not for that reason (it "
                                                           "was for {})",
                                                           fmt::join(distinct_reasons(report.failures), ", ")));
  if (expected_reason && !margin.thin.empty()) {
    std::cout << fmt::format("WARNING: control {} was {}\n", control.name, margin.thin);
  }
}

LedgerRun check_run(const Task& task, BackendKind backend, const std::string& source, const std::string& key) {
  LedgerRun run;
  run.kind = "check";
  run.task = task.name;
  run.task_dir = task.dir.string();
  run.backend = backend;
  run.arms.push_back({"implementation", source, key});
  return run;
}

}  // namespace

Action add_check(CLI::App& root) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* app = root.add_subcommand("check", "Check an implementation against the task's independent oracle");
  add_check_options(*app, *args);
  return [args]() {
    const Task task = load_task(args->task_dir);
    const ControlSpec* control = checked_control(*args, task);
    require_backend(args->backend);
    const fs::path impl_source = control ? control->source : fs::path(args->impl);
    begin_ledger_run(check_run(task, args->backend, fs::absolute(impl_source).lexically_normal().string(), ""));
    Artifact art = build_implementation({impl_source, 0, args->backend});
    CheckOptions opt = check_options(*args);
    if (control != nullptr && args->until_rejected) opt.stop_after_reason = control->expect;
    CheckReport report = run_check(task, art, opt);
    LedgerRun run = check_run(task, args->backend, art.source.string(), art.identity.key);
    run.outcome = !report.built ? "BUILD_FAILED" : report.pass() ? "PASS" : "FAIL";
    run.reasons = distinct_reasons(report.failures);
    record_in_ledger(run);
    const bool expected_reason = control && report.has_reason(control->expect);
    const ControlMargin margin = control ? control_margin(to_json(report), control->expect) : ControlMargin{};
    if (args->json) {
      nlohmann::json j = to_json(report);
      if (control) {
        j["control"] = {{"name", control->name},
                        {"expect", to_string(control->expect)},
                        {"expected_reason_seen", expected_reason},
                        {"margin", expected_reason ? to_json(margin) : nlohmann::json(nullptr)}};
      }
      std::cout << json_text(j, 2) << "\n";
    } else {
      print_human(report, art, task,
                  !control ? ""
                  : control->base.empty()
                      ? fmt::format("control {} ({})", control->name, control->source.string())
                      : fmt::format("control {} ({} with one change)", control->name, control->base.string()));
      if (control) print_control(*control, report, expected_reason, margin);
    }
    if (!report.built) return static_cast<int>(ExitCode::data_error);
    return static_cast<int>(report.pass() ? ExitCode::ok : ExitCode::rejected);
  };
}

}  // namespace kwb::cli
