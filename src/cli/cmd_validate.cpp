// kwb validate TASK_DIR --candidate SRC [--baseline SRC] --output-dir DIR [gates, budgets] [--json]
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/terminal.h"
#include "record/bundle_reader.h"
#include "pipeline/validate.h"
#include "task/task.h"
#include "util/error.h"
#include "util/interrupt.h"

#include <fmt/format.h>

#include <iostream>

namespace kwb::cli {

namespace {

struct ValidateArgs {
  std::string task_dir, candidate, baseline, output_dir, backend = "cpu", gate = "ci";
  bool cold = false;
  double min_improvement = 0.0, max_aa_difference = 5.0, max_minutes = 1.0, timeout_seconds = 60;
  size_t repetitions = 5;
  int warmups = 2, samples = 0;
  std::optional<uint64_t> seed;
  std::vector<std::string> workloads;
  bool json = false;
};

void print_summary(const ValidateResult& r) {
  const BundleData b = read_bundle(r.bundle);
  std::vector<std::vector<std::string>> rows;
  auto find = [](const std::optional<nlohmann::json>& cmp, const std::string& name) -> const nlohmann::json* {
    if (!cmp) return nullptr;
    for (const auto& w : (*cmp)["workloads"]) {
      if (w["name"] == name) return &w;
    }
    return nullptr;
  };
  auto pct = [](const nlohmann::json* w) {
    if (w == nullptr || !w->contains("improvement_pct") || !(*w)["improvement_pct"].is_number()) return std::string("-");
    return fmt::format("{:+.2f}% [{:+.2f}, {:+.2f}]", (*w)["improvement_pct"].get<double>(),
                       (*w)["ci_low_pct"].get<double>(), (*w)["ci_high_pct"].get<double>());
  };
  std::vector<std::string> names;
  for (const auto* cmp : {&b.ab, &b.aa}) {
    if (!*cmp) continue;
    for (const auto& w : (**cmp)["workloads"]) {
      if (std::find(names.begin(), names.end(), w["name"].get<std::string>()) == names.end()) names.push_back(w["name"]);
    }
  }
  for (const std::string& n : names) {
    const nlohmann::json* ab = find(b.ab, n);
    const nlohmann::json* aa = find(b.aa, n);
    rows.push_back({n, pct(ab), ab ? (*ab)["verdict"].get<std::string>() : "-", pct(aa),
                    aa ? (*aa)["verdict"].get<std::string>() : "-"});
  }
  if (!rows.empty()) {
    std::cout << "\n" << format_table({"workload", "B vs A (improvement)", "gate", "A' vs A", "A/A"}, rows);
  }
  std::cout << fmt::format("\nDECISION: {}\n", r.decision.decision);
  for (const std::string& reason : r.decision.reasons) std::cout << "  - " << reason << "\n";
  std::cout << fmt::format("\nbundle: {}\nplan digest: {}\nreport: {}\n", r.bundle.string(), r.plan_digest,
                           (r.bundle / "report.md").string());
}

}  // namespace

Action add_validate(CLI::App& root) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* app = root.add_subcommand("validate", "The whole workflow: freeze, checks, controls, A/A, A/B, decision");
  app->add_option("task_dir", a->task_dir, "Task folder (holding task.toml)")->required();
  app->add_option("--candidate", a->candidate, "Candidate source")->required();
  app->add_option("--baseline", a->baseline, "Baseline source (default: the task's baseline for the backend)");
  app->add_option("--output-dir", a->output_dir, "Evidence bundle folder (must not exist yet)")->required();
  app->add_option("--backend", a->backend, "cpu, opencl or cuda")->capture_default_str()
      ->check(CLI::IsMember({"cpu", "opencl", "cuda"}));
  app->add_option("--gate", a->gate, "ci or point")->check(CLI::IsMember({"ci", "point"}))->capture_default_str();
  app->add_option("--min-improvement-pct", a->min_improvement, "Improvement the candidate must show on every workload")
      ->capture_default_str();
  app->add_option("--max-aa-difference-pct", a->max_aa_difference, "A/A: |A' vs A| allowed")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--repetitions", a->repetitions, "Minimum blocks per comparison (the first look)")
      ->capture_default_str()->check(CLI::Range(2, 1000000));
  app->add_option("--max-minutes", a->max_minutes, "Budget per workload comparison")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--timeout-seconds", a->timeout_seconds, "Per call")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--warmups", a->warmups, "Untimed calls per visit")->capture_default_str()->check(CLI::Range(0, 100000));
  app->add_option("--samples", a->samples, "Timed calls per visit; 0 = sized by a pilot")->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app->add_option("--seed", a->seed, "Seed for everything random (default: drawn and recorded in the plan)");
  app->add_option("--workload", a->workloads, "Only this timing case (repeatable)");
  app->add_flag("--json", a->json, "Print decision.json");
  app->add_flag("--cold", a->cold, "Flush caches before every timed call, outside the timer (default: warm)");
  return [a]() {
    // Bad input is reported before a bundle folder is created.
    Task task = load_task(a->task_dir);
    if (!task.backends.contains(a->backend)) {
      throw DataError(fmt::format("{}: the task has no [backends.{}] section", task.manifest.string(), a->backend));
    }
    for (const std::string& src : {a->candidate, a->baseline}) {
      if (!src.empty() && !std::filesystem::is_regular_file(src)) {
        throw DataError(fmt::format("{}: implementation source does not exist", src));
      }
    }
    for (const std::string& w : a->workloads) {
      if (task.find_case(w) == nullptr) throw UsageError(fmt::format("--workload {}: the task has no such case", w));
    }
    ValidateOptions o;
    o.device = require_backend(a->backend);
    o.task_dir = a->task_dir;
    o.candidate = a->candidate;
    o.baseline = a->baseline;
    o.output_dir = a->output_dir;
    o.backend = a->backend;
    o.gate = {CompareMode::ab, a->gate == "ci" ? stats::GateKind::ci : stats::GateKind::point, a->min_improvement,
              a->max_aa_difference, 0.05};
    o.budget = {a->repetitions, 100000, a->max_minutes * 60.0};
    o.timing.backend = a->backend;
    o.timing.cold = a->cold;
    o.timing.timeout = std::chrono::milliseconds(static_cast<int64_t>(a->timeout_seconds * 1000));
    o.timing.warmups = a->warmups;
    o.timing.samples = a->samples;
    o.seed = a->seed;
    o.workloads = a->workloads;
    o.argv = g_argv;

    const bool quiet = a->json;
    ValidateObserver obs;
    obs.stage_started = [quiet](int i, int n, const std::string& stage, double budget_left) {
      if (quiet) return;
      if (budget_left > 0) {
        std::cerr << fmt::format("[{}/{}] {} ... (timing budget ahead: at most {:.0f} s)\n", i, n, stage, budget_left);
      } else {
        std::cerr << fmt::format("[{}/{}] {} ...\n", i, n, stage);
      }
    };
    obs.stage_finished = [quiet](const std::string&, const std::string& status, const std::string& summary, double s) {
      end_progress_line();
      if (!quiet) std::cerr << fmt::format("      {} ({:.1f} s): {}\n", status, s, summary);
    };
    obs.plan_frozen = [quiet](const std::string& digest) {
      if (!quiet) std::cerr << fmt::format("      plan digest {}\n", digest);
    };
    obs.comparison_progress = make_progress_sink("      ");
    ValidateResult r;
    try {
      r = run_validate(o, obs);
    } catch (const Interrupted&) {
      end_progress_line();
      std::cerr << fmt::format("\nINTERRUPTED: no decision. bundle: {} (stages.json says where it stopped; what was "
                               "measured before is kept)\n",
                               o.output_dir.string());
      throw;
    }
    end_progress_line();
    if (a->json) {
      std::cout << r.decision_json.dump(2) << "\n";
    } else {
      print_summary(r);
    }
    return r.decision.exit_code;
  };
}

}  // namespace kwb::cli
