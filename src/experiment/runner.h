// `kwb experiment run`: freeze the experiment (experiment/plan.h), run every trajectory not yet done as a job of
// its own on the campaign executors (campaign/executor.h: one at a time on this machine, or one exclusive Slurm job
// per trajectory), then analyze (experiment/analysis.h) and write the reports. A trajectory is one job because its
// attempts are sequential (each starts from the incumbent the previous one left) and all its timings belong on one
// machine; two trajectories never share a comparison, so they may run on different nodes.
#pragma once

#include "campaign/executor.h"
#include "experiment/experiment_file.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kwb {

struct ExperimentRunSummary {
  size_t trajectories = 0;
  size_t skipped = 0;  // done in an earlier run
  size_t started = 0;
  size_t failed = 0;  // jobs that ended without a finished trajectory record
  double wall_seconds = 0.0;
};

std::unique_ptr<Executor> make_experiment_executor(const Experiment& x);

// Runs what is left of the experiment; `kwb` is kwb's own executable. `plan_only`: freeze, submit nothing.
ExperimentRunSummary run_experiment(const Experiment& x, Executor& executor, const std::filesystem::path& kwb,
                                    const std::function<void(const std::string&)>& say, bool plan_only = false);

// Every trajectory record of a storage folder (trajectories/*/trajectory.json), in plan order; a planned
// trajectory without one is absent.
std::vector<nlohmann::json> trajectory_records(const std::filesystem::path& storage);

// analysis.json, report.md and report.html of a storage folder, from its plan and records. Returns the analysis.
nlohmann::json write_experiment_reports(const std::filesystem::path& storage);

}  // namespace kwb
