// An experiment's analysis (docs/experiments.md, "The analysis"), paired by task and seed: for every (task, seed)
// both arms ran, d = ln(speedup_B) - ln(speedup_A), each speedup the trajectory's final incumbent against the task's
// original baseline. The estimate is the mean of d with tasks weighted equally; its interval is a stratified paired
// t interval (tasks as strata, seeds as replicates within a task, Welch-Satterthwaite degrees of freedom), because
// the claim is about these tasks and the between-task spread of the arms' gains is not noise. The verdict follows
// validate's four outcomes: B_BETTER (the interval above 0), A_BETTER (below), INCONCLUSIVE (it contains 0, or too
// few pairs to form it), INVALID (a trajectory without its outcome: nothing is decided with evidence missing).
// Also: the win rate, fast_p per arm two ways (per generated kernel, KernelBench's own: the share of attempts whose
// kernel is correct and more than p times faster than the baseline, correct = it passed kwb's checks; and per
// trajectory, of final incumbents), cost per arm and rejections per arm by category. Pure functions of the trajectory
// records: `kwb experiment report` recomputes them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

// 2: the model proxy's fields, mounts, repeats, prices and replay (issue 43); a kwb of version 1 refuses them.
inline constexpr int k_experiment_analysis_schema_version = 2;

// What the analysis reads of one trajectory record (kwb.trajectory).
struct TrajectoryOutcome {
  std::string id;
  int arm = 0;  // 0: A, 1: B
  std::string task;
  std::int64_t seed = 0;
  int repeat = 1;
  std::string status;                 // "done", "invalid", "running", or "missing" (no record)
  std::optional<double> log_speedup;  // ln(baseline time / final incumbent time); 0 when nothing was kept
  std::optional<double> log_low, log_high;
  bool measured = false;  // false: nothing kept, the speedup is 1 by construction
  int keeps = 0;
  std::map<std::string, int> categories;  // attempts by category (trajectory.h's AttemptCategory names)
  // Each generated kernel, in order: every attempt but those the referee could not decide (error, invalid,
  // controls). An attempt with no candidate is a generation that failed, as in KernelBench. correct: it passed
  // every check (kept, slower, inconclusive); log_speedup: against the task's original baseline, its A/B against the
  // incumbent plus the kept lineage's A/Bs before it (nullopt where it has no A/B).
  struct Kernel {
    bool correct = false;
    std::optional<double> log_speedup;
  };
  std::vector<Kernel> kernels;
  int violations = 0;  // generator sandbox violations recorded, over all attempts
  double generator_wall_s = 0.0, generator_cpu_s = 0.0, validate_s = 0.0;
  double validate_lock_wait_s = 0.0;  // of validate_s: waiting for the timing lock (others' timing)
  // What its attempts' model calls cost (experiment/model_proxy.h), over every attempt, refused or past a budget too.
  std::uint64_t model_requests = 0, model_input_tokens = 0, model_output_tokens = 0;
  double model_usd = 0.0;
  std::string detail;
};

TrajectoryOutcome outcome_of(const nlohmann::json& trajectory_record);

struct PairedInterval {
  size_t pairs = 0;
  double mean = 0.0;  // of d, tasks weighted equally
  double low = 0.0, high = 0.0;
  double df = 0.0;     // 0 when no interval could be formed
  std::string method;  // "stratified paired t", "paired t" or "none"
};

// The interval over pairs at `confidence`. `by_task`: d per task (one entry per seed). With two or more seeds in
// every task, the stratified interval; with one seed in some task, the plain paired t over all pairs; with fewer
// than two pairs, none (df 0). When every d is the same, the interval is that point.
PairedInterval paired_interval(const std::map<std::string, std::vector<double>>& by_task, double confidence);

// The experiment's analysis as JSON (kwb.experiment_analysis), from its frozen plan and trajectory records.
nlohmann::json analyze_experiment(const nlohmann::json& plan, const std::vector<TrajectoryOutcome>& outcomes,
                                  const std::string& plan_digest);

}  // namespace kwb
