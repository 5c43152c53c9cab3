// An experiment's frozen plan (docs/experiments.md, "The freeze"): before any generator runs, kwb copies each arm's
// files into the storage folder, copies each task's public part (what a generator may see), and writes
// storage/experiment.json (kwb.experiment): the SHA-256 of every task folder, of every public and arm file, the arm
// commands and environments, kwb's own identity (version, commit, binary), the settings and the trajectories. Its
// SHA-256 is the experiment's plan digest, which every trajectory record and the analysis carry. A resumed
// experiment must freeze to the same plan (but its time): anything changed since is refused, with what changed.
#pragma once

#include "experiment/experiment_file.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kwb {

// 2: the model proxy's fields, mounts, repeats, prices and replay (issue 43); a kwb of version 1 refuses them.
inline constexpr int k_experiment_schema_version = 2;

// One arm on one task with one seed.
struct TrajectoryPlan {
  std::string id;  // "<arm>--<task>--s<seed>" (and "--r<repeat>" with repeats), a path component
  std::string arm;
  int arm_index = 0;  // 0: A, 1: B
  std::string task;
  std::int64_t seed = 0;
  int repeat = 1;  // 1..repeats; the id ends in "--r<repeat>" when the experiment repeats
};

std::vector<TrajectoryPlan> plan_trajectories(const Experiment& x);

// Where things are in an experiment's storage folder.
struct ExperimentPaths {
  std::filesystem::path storage;
  std::filesystem::path plan() const { return storage / "experiment.json"; }
  std::filesystem::path arm(const std::string& name) const { return storage / "arms" / name; }
  std::filesystem::path public_task(const std::string& task) const { return storage / "tasks" / task; }
  std::filesystem::path trajectory(const std::string& id) const { return storage / "trajectories" / id; }
  std::filesystem::path analysis() const { return storage / "analysis.json"; }
};

// The public part of a task folder that a generator sees: task.toml, README.md and the backend's baseline source
// (relative paths). Not the oracle's held-out data, the error controls, the ledger or any other implementation.
std::vector<std::filesystem::path> public_task_files(const std::filesystem::path& task_dir, BackendKind backend);

// Every regular file below `dir` as the plan lists it: [{path (relative), sha256}], sorted by path.
nlohmann::json frozen_file_list(const std::filesystem::path& dir);

// A mounted folder or file (ExperimentArm::mounts) as the plan lists it: {path, files: [{path (relative; "" for the
// mount itself when it is a file), bytes, mtime_ns, sha256}]}, sorted by path. With hash false the SHA-256s are
// left out: what a trajectory compares before it starts (sizes and times, not gigabytes read again).
nlohmann::json mounted_file_list(const std::filesystem::path& mount, bool hash);

// Freezes `x` into its storage folder (creating it), or, when it was frozen before, checks that it freezes to the
// same plan: DataError (65) naming what changed otherwise. Returns the plan as written.
nlohmann::json freeze_experiment(const Experiment& x);

// The frozen plan of a storage folder, checked: its schema, and its digest against storage/experiment.sha256.
nlohmann::json load_frozen_plan(const std::filesystem::path& storage);

// SHA-256 of the plan file's bytes.
std::string plan_digest(const std::filesystem::path& storage);

}  // namespace kwb
