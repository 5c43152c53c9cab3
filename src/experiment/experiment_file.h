// An experiment (docs/experiments.md): does one candidate generator (an agent, a skill, a search strategy) produce
// better kernels than another? Two arms, each a generator command, run on the same tasks with the same seeds; every
// proposal is judged by kwb validate. This is its file, experiment.toml, parsed and checked before anything runs:
// every bad input is a DataError (exit 65) naming the file, the line, the field and the fix. The [executor] and
// [validate] tables are a campaign's (campaign/campaign_file.h) and are checked the same way.
#pragma once

#include "campaign/campaign_file.h"
#include "experiment/model_proxy.h"
#include "util/backend_kind.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace kwb {

struct ExperimentArm {
  std::string name;                                      // [[arms]] name: letters, digits, '-', '_'
  std::vector<std::string> command;                      // argv; run with the arm's folder as working directory
  std::vector<std::pair<std::string, std::string>> env;  // sorted by name
  // Files and folders copied into the arm's frozen folder (storage/arms/<name>/), each under its own file name.
  std::vector<std::filesystem::path> files;  // absolute
  double timeout_seconds = 300.0;            // one generator run's wall-clock limit
  double cpu_seconds = 600.0;                // one generator run's CPU limit (RLIMIT_CPU)
  // Its work folder's quota (every regular file's bytes together), checked after each run: past it the attempt is
  // a violation and the folder is reset (GeneratorSpec::work_quota_bytes).
  double work_quota_mib = 256.0;
  // Folders or files bound read-only into the sandbox at their own paths, not copied (a local model's weights):
  // frozen by the SHA-256 of every file in them, each trajectory checks their sizes and times (plan.h).
  std::vector<std::filesystem::path> mounts;  // absolute
  // Each process's address space (RLIMIT_AS): a local model needs more than the default.
  double address_space_gib = 4.0;
  // The model endpoints it may call through kwb's proxy (experiment/model_proxy.h; docs/arms.md, "Calling a
  // model"), and its budgets there, per attempt and over all its trajectories. Empty: no way out at all.
  std::vector<ModelEndpoint> endpoints;
  ModelBudget budget_per_attempt;
  ModelBudget budget_per_arm;
  int line = 0;
};

struct ExperimentTask {
  std::filesystem::path dir;  // absolute
  std::string name;           // task.toml's name
  int line = 0;
};

struct Experiment {
  std::filesystem::path file;       // absolute
  std::string name;                 // `name`, else the file's stem
  std::filesystem::path storage;    // absolute: the frozen plan, the arms, every trajectory, the analysis, the reports
  std::vector<std::int64_t> seeds;  // replicates: one trajectory per (arm, task, seed)
  int attempts = 5;                 // generator runs per trajectory
  // Trajectories per (arm, task, seed): an arm that is not deterministic is run this many times on the same data,
  // and a pair's outcome per arm is the mean of its repeats' ln(speedup) (docs/experiments.md, "Repeats").
  int repeats = 1;
  double confidence = 0.95;  // of the interval over pairs
  // The budget per workload of each trajectory's final comparison (kwb validate's --max-minutes there), which is the
  // experiment's measurement; 0: the [validate] table's.
  double final_max_minutes = 0.0;
  double run_limit_minutes = 120.0;   // per trajectory (a job)
  double queue_limit_minutes = 60.0;  // per trajectory: waiting for a node or for the timing lock
  BackendKind backend = BackendKind::cpu;
  std::vector<ValidateFlag> validate;  // passed to every kwb validate of the experiment
  ExecutorTable executor;
  // `kwb experiment run --replay DIR`: the recorded experiment (its storage folder) whose model exchanges every arm's
  // proxy serves instead of calling a model. Not from the file.
  std::filesystem::path replay_from;
  std::vector<ModelPrice> prices;   // [[prices]]: what a model's tokens cost, for money budgets and the report
  std::vector<ExperimentArm> arms;  // exactly two: A (the first) and B
  std::vector<ExperimentTask> tasks;
};

// Reads and checks `file`: tasks load and have the backend and the workloads, arm files exist, numbers are in range,
// names are unique. DataError (65) naming file:line, the field and the fix.
Experiment load_experiment(const std::filesystem::path& file, const FlagCheck& check);

}  // namespace kwb
