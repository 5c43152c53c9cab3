// kwb validate TASK_DIR --candidate SRC [--baseline SRC] --output-dir DIR [gates, budgets] [--json]
#include "cli/commands.h"
#include "cli/comparison_text.h"
#include "cli/ledger.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/terminal.h"
#include "pipeline/validate.h"
#include "record/bundle_reader.h"
#include "task/task.h"
#include "util/error.h"
#include "util/interrupt.h"
#include "util/json_text.h"

#include <fmt/format.h>

#include <iostream>

namespace kwb::cli {

namespace {

void print_summary(const ValidateResult& r) {
  const BundleData b = read_bundle(r.bundle);
  if (b.ab) std::cout << "\nA/B: candidate B against baseline A\n" << comparison_table(*b.ab, "B");
  if (b.aa) std::cout << "\nA/A: the baseline against itself (the noise floor)\n" << comparison_table(*b.aa, "A'");
  std::vector<std::string> warnings = b.ab ? noise_warnings(*b.ab, "B") : std::vector<std::string>{};
  for (const nlohmann::json& w : b.environment.value("warnings", nlohmann::json::array())) {
    if (w.is_string()) warnings.push_back("machine: " + w.get<std::string>());
  }
  std::cout << warning_block(warnings);
  if (r.decision_json.is_null() || r.decision_json.empty()) {
    std::cout << "\nDECISION: none (the decision stage did not finish; stages.json says why)\n";
  } else {
    const std::string figures = decision_figures(r.decision_json);
    std::cout << fmt::format("\nDECISION: {}{}{}\n", r.decision.decision, figures.empty() ? "" : "  ", figures);
  }
  for (const std::string& reason : r.decision.reasons) std::cout << "  - " << reason << "\n";
  std::cout << fmt::format("\nbundle: {}\nplan digest: {}\nreport: {}\n", r.bundle.string(), r.plan_digest,
                           (r.bundle / "report.md").string());
}

}  // namespace

namespace {

// The options validate runs with, after the input is checked (before a bundle folder is created).
ValidateOptions checked_options(const ValidateArgs& a, const Task& task) {
  if (!task.backends.contains(a.timing.backend)) {
    throw DataError(fmt::format("{}: the task has no [backends.{}] section", task.manifest.string(), a.timing.backend));
  }
  for (const std::string& src : {a.candidate, a.baseline}) {
    if (!src.empty() && !std::filesystem::is_regular_file(src)) {
      throw DataError(fmt::format("{}: implementation source does not exist", src));
    }
  }
  for (const std::string& w : a.timing.workloads) (void)task.require_case("--workload", w, true);
  ValidateOptions o = validate_options(a);
  o.gate.same_margin_pct = same_margin_pct(a.timing, task);
  if (a.against == "incumbent") {
    if (!a.baseline.empty()) throw UsageError("--against incumbent and --baseline name two baselines: give one");
    if (std::optional<std::filesystem::path> src = incumbent_source(task, a.timing.backend)) o.baseline = *src;
  }
  o.device = require_backend(a.timing.backend);
  o.argv = g_argv;
  return o;
}

// The stage lines go to stderr with --json too: stdout carries the JSON alone, and a caller that runs validate for a
// while (an agent through kwb mcp, which forwards them as progress) sees where it is.
ValidateObserver stage_printer() {
  ValidateObserver obs;
  obs.stage_started = [](int i, int n, const std::string& stage, double budget_left) {
    if (budget_left > 0) {
      std::cerr << fmt::format(
          "[{}/{}] {} ... (timing budget ahead: at most {:.0f} s, plus any wait for the timing "
          "lock)\n",
          i, n, stage, budget_left);
    } else {
      std::cerr << fmt::format("[{}/{}] {} ...\n", i, n, stage);
    }
  };
  obs.stage_finished = [](const std::string&, const std::string& status, const std::string& summary, double s) {
    end_progress_line();
    std::cerr << fmt::format("      {} ({:.1f} s): {}\n", status, s, summary);
  };
  obs.plan_frozen = [](const std::string& digest) { std::cerr << fmt::format("      plan digest {}\n", digest); };
  obs.comparison_progress = make_progress_sink("      ");
  obs.timing_lock_wait = make_lock_notice("      ");
  obs.timing_lock_waited = make_lock_waited("      ");
  return obs;
}

// The ledger's row for the run as it starts: task, backend, bundle and the two arms' sources.
LedgerRun started_run(const ValidateOptions& o, const Task& task, const ValidateArgs& a,
                      const std::string& ledger_kind) {
  LedgerRun started;
  started.kind = ledger_kind;
  started.task = task.name;
  started.task_dir = task.dir.string();
  started.backend = a.timing.backend;
  started.bundle = std::filesystem::absolute(o.output_dir).lexically_normal().string();
  const std::filesystem::path baseline =
      o.baseline.empty() ? task.backends.at(a.timing.backend).baseline : std::filesystem::absolute(o.baseline);
  started.arms.push_back({"baseline", baseline.lexically_normal().string(), ""});
  started.arms.push_back({"candidate", std::filesystem::absolute(o.candidate).lexically_normal().string(), ""});
  return started;
}

}  // namespace

int validate_command(const ValidateArgs& a, const std::string& ledger_kind) {
  // Bad input is reported before a bundle folder is created.
  const Task task = load_task(a.task_dir);
  const ValidateOptions o = checked_options(a, task);
  begin_ledger_run(started_run(o, task, a, ledger_kind));
  ValidateResult r;
  try {
    r = run_validate(o, stage_printer());
  } catch (const Interrupted& i) {
    end_progress_line();
    std::cerr << fmt::format(
        "\nINTERRUPTED: no decision. bundle: {} (stages.json says where it stopped; what was "
        "measured before is kept)\n",
        o.output_dir.string());
    // A stopped run is a row too (outcome INTERRUPTED): a loop that retries until PASS shows in the ledger.
    record_interrupted_bundle_in_ledger(o.output_dir, ledger_kind, i.what());
    throw;
  }
  end_progress_line();
  record_bundle_in_ledger(r.bundle, ledger_kind, r.manifest_sha256);
  if (!r.unsigned_reason.empty()) {
    std::cerr << fmt::format(
        "kwb: warning: the bundle is not signed ({}); this machine's ledger still records it, "
        "but another machine cannot tell who made it\n",
        r.unsigned_reason);
  }
  if (a.json) {
    std::cout << json_text(r.decision_json, 2) << "\n";
  } else {
    print_summary(r);
  }
  if (!r.lock_timeout.empty()) {
    std::cerr << fmt::format(
        "kwb: error: {}\n(the bundle {} records what was measured before it, with an INVALID "
        "decision)\n",
        r.lock_timeout, r.bundle.string());
    return static_cast<int>(ExitCode::lock_timeout);
  }
  if (r.input_error_code) {
    std::cerr << fmt::format("kwb: error: {}\n(the bundle {} records the stage that found it, in stages.json)\n",
                             r.input_error, r.bundle.string());
    return *r.input_error_code;
  }
  return r.decision.exit_code;
}

Action add_validate(CLI::App& root) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* app = root.add_subcommand("validate", "The whole workflow: freeze, checks, controls, A/A, A/B, decision");
  add_validate_options(*app, *a);
  return [a]() { return validate_command(*a, "validate"); };
}

}  // namespace kwb::cli
