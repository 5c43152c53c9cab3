// kwb compare TASK_DIR [--baseline SRC] --candidate SRC | --aa  [gates, budgets] [--output-dir D] [--json]
#include "builder/builder.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/terminal.h"
#include "pipeline/compare.h"
#include "task/task.h"
#include "util/error.h"

#include <fmt/format.h>

#include <iostream>

namespace kwb::cli {

namespace {

struct CompareArgs {
  std::string task_dir, baseline, candidate, backend = "cpu", gate = "ci", output_dir;
  bool cold = false;
  bool aa = false, json = false, exhaustive = false;
  double min_improvement = 0.0, max_aa_difference = 1.0, max_minutes = 1.0, timeout_seconds = 60;
  size_t repetitions = 10, max_blocks = 100000;
  int warmups = 2, samples = 0;
  uint64_t seed = 1;
  std::vector<std::string> workloads;
};

void print_human(const CompareReport& r) {
  std::cout << fmt::format("kwb compare ({})\n", r.mode == CompareMode::aa ? "A/A: baseline vs its own copy A'"
                                                                           : "A/B: baseline A vs candidate B");
  for (size_t i = 0; i < r.arm_labels.size(); ++i) {
    std::cout << fmt::format("  {:<2} {}  artifact {}\n", r.arm_labels[i], r.arm_paths[i],
                             r.arm_identities[i].artifact_sha256.substr(0, 16));
  }
  if (!r.refused.empty()) {
    std::cout << "\ntiming refused: no metric is reported for rejected code\n";
    for (const std::string& s : r.refused) std::cout << "  " << s << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const WorkloadResult& w : r.workloads) {
    auto pct = [&](double v) { return fmt::format("{:+.2f}%", v); };
    if (w.estimate) {
      rows.push_back({w.name, pct(w.estimate->improvement_pct),
                      fmt::format("[{}, {}]", pct(w.estimate->ci_low_pct), pct(w.estimate->ci_high_pct)),
                      fmt::format("{:.2f}%", w.estimate->mde_pct), std::to_string(w.blocks),
                      std::to_string(w.timed_samples), fmt::format("{:.1f}", w.seconds), w.verdict});
    } else {
      rows.push_back({w.name, "-", "-", "-", std::to_string(w.blocks), std::to_string(w.timed_samples),
                      fmt::format("{:.1f}", w.seconds), w.verdict});
    }
  }
  std::cout << "\n"
            << format_table({r.mode == CompareMode::aa ? "workload (A' vs A)" : "workload", "improvement",
                             "interval", "MDE", "blocks", "samples", "seconds", "verdict"},
                            rows);
  std::cout << "\n";
  for (const WorkloadResult& w : r.workloads) std::cout << fmt::format("  {}: {}\n", w.name, w.reason);
  std::cout << fmt::format("\nverdict: {}\n", r.verdict);
}

int exit_code_for(const std::string& verdict) {
  if (verdict == "PASS") return static_cast<int>(ExitCode::ok);
  if (verdict == "FAIL" || verdict == "REFUSED") return static_cast<int>(ExitCode::rejected);
  if (verdict == "INCONCLUSIVE") return static_cast<int>(ExitCode::inconclusive);
  return static_cast<int>(ExitCode::invalid);
}

}  // namespace

Action add_compare(CLI::App& root) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* app = root.add_subcommand("compare", "Interleaved A/B (or A/A) timing with intervals and a gate");
  app->add_option("task_dir", a->task_dir, "Task folder (holding task.toml)")->required();
  app->add_option("--baseline", a->baseline, "Baseline source (default: the task's baseline for the backend)");
  app->add_option("--candidate", a->candidate, "Candidate source");
  app->add_flag("--aa", a->aa, "A/A: the baseline against a separately built copy of itself (A')");
  app->add_option("--backend", a->backend, "cpu, opencl or cuda")->capture_default_str()
      ->check(CLI::IsMember({"cpu", "opencl", "cuda"}));
  app->add_option("--gate", a->gate, "ci: the whole interval must clear the bar; point: median >= bar (legacy)")
      ->check(CLI::IsMember({"ci", "point"}))->capture_default_str();
  app->add_option("--min-improvement-pct", a->min_improvement, "Improvement the candidate must show")
      ->capture_default_str();
  app->add_option("--max-aa-difference-pct", a->max_aa_difference, "A/A: |difference| allowed")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--repetitions", a->repetitions, "Minimum blocks (the first look)")->capture_default_str()
      ->check(CLI::Range(2, 1000000));
  app->add_option("--max-blocks", a->max_blocks, "Block cap per workload")->capture_default_str()
      ->check(CLI::Range(2, 10000000));
  app->add_option("--warmups", a->warmups, "Untimed calls per visit (at least the input-set pool size)")
      ->capture_default_str()->check(CLI::Range(0, 100000));
  app->add_option("--samples", a->samples, "Timed calls per visit; 0 = sized by a pilot")->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app->add_option("--max-minutes", a->max_minutes, "Budget per workload comparison")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--timeout-seconds", a->timeout_seconds, "Per call (and per check call)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--seed", a->seed, "Seed for block orders and timed data")->capture_default_str();
  app->add_option("--workload", a->workloads, "Only this timing case (repeatable)");
  app->add_option("--output-dir", a->output_dir, "Write samples.csv (every sample) and compare.json here");
  app->add_flag("--json", a->json, "Print the JSON summary");
  app->add_flag("--cold", a->cold, "Flush caches before every timed call, outside the timer (default: warm)");
  app->add_flag("--exhaustive", a->exhaustive,
                "The arms' checks run every case even after a worker failure (default: stop there)");
  return [a]() {
    Task task = load_task(a->task_dir);
    if (!task.backends.contains(a->backend)) {
      throw DataError(fmt::format("{}: the task has no [backends.{}] section", task.manifest.string(), a->backend));
    }
    if (!a->aa && a->candidate.empty()) throw UsageError("compare needs --candidate SOURCE (or --aa for A/A)");
    if (a->aa && !a->candidate.empty()) throw UsageError("--aa compares the baseline with itself: drop --candidate");
    const std::string baseline = a->baseline.empty() ? task.backends.at(a->backend).baseline.string() : a->baseline;

    require_backend(a->backend);
    Artifact base = build_implementation({baseline, 0, a->backend});
    Artifact other = a->aa ? build_implementation({baseline, 1, a->backend}) : build_implementation({a->candidate, 0, a->backend});
    for (const Artifact* art : {&base, &other}) {
      if (!art->ok) {
        std::cerr << art->log;
        throw DataError(fmt::format("{}: does not build (compiler output above)", art->source.string()));
      }
    }
    CompareRequest req;
    req.mode = a->aa ? CompareMode::aa : CompareMode::ab;
    req.arms = {&base, &other};
    req.labels = {"A", a->aa ? "A'" : "B"};
    req.workloads = a->workloads;
    req.gate = {req.mode, a->gate == "ci" ? stats::GateKind::ci : stats::GateKind::point, a->min_improvement,
                a->max_aa_difference, 0.05};
    req.budget = {a->repetitions, a->max_blocks, a->max_minutes * 60.0};
    req.timing.backend = a->backend;
    req.timing.cold = a->cold;
    req.timing.timeout = std::chrono::milliseconds(static_cast<int64_t>(a->timeout_seconds * 1000));
    req.timing.warmups = a->warmups;
    req.timing.samples = a->samples;
    req.timing.nonce = a->seed ^ 0x7153D47Aull;
    req.seed = a->seed;
    req.output_dir = a->output_dir;
    req.exhaustive_checks = a->exhaustive;
    CompareReport report = run_compare(task, req, make_progress_sink("  "));
    end_progress_line();
    if (a->json) {
      std::cout << to_json(report).dump(2) << "\n";
    } else {
      print_human(report);
    }
    return exit_code_for(report.verdict);
  };
}

}  // namespace kwb::cli
