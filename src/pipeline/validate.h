// `kwb validate`: the whole workflow (README.md; docs/evidence-bundle.md, stage dependencies), stage by stage, into
// an evidence bundle:
//   freeze -> check baseline -> profile -> check candidate -> controls -> A/A -> A/B -> final validation -> decision
// A stage that fails stops what depends on it and says why; the bundle is complete and readable either way.
#pragma once

#include "pipeline/compare.h"
#include "record/decision.h"
#include "record/schema.h"
#include "record/stages.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

struct ValidateOptions {
  std::filesystem::path task_dir;
  std::filesystem::path candidate;
  std::filesystem::path baseline;  // empty: the task's baseline for the backend
  std::filesystem::path output_dir;
  BackendKind backend = BackendKind::cpu;
  std::string device;  // the backend's description of its device (empty for cpu), for the plan and the report
  GateConfig gate;     // mode is set per stage
  Budget budget;
  TimingOptions timing;
  std::optional<uint64_t> seed;  // empty: drawn at random, recorded in the plan
  std::vector<std::string> workloads;
  int layouts = 0;                                  // builds per arm in the layout pool; 0: default_layouts(backend)
  bool exhaustive_checks = defaults::k_exhaustive;  // every check runs every case (CheckOptions::exhaustive)
  // Profile baseline and candidate (the profile stage, and the candidate's after its check). Descriptive only: the
  // decision never depends on it, and under valgrind it is the slowest part of a short validate.
  bool profile = true;
  // Give up waiting for the timing lock after this many seconds (the comparison's stage errs, the decision is
  // INVALID, and ValidateResult::lock_timeout says so); none: wait as long as it takes.
  std::optional<double> lock_timeout_s;
  std::vector<std::string> argv;
  // The stages to run, in order (record/stages.h); null: kwb's own declaration, validate_stages(). Tests add a
  // marker stage here to see validate and verify follow the declaration.
  const StageGraph* stages = nullptr;
};

// What the terminal shows; all optional.
struct ValidateObserver {
  // budget_left: an upper bound, in seconds, on the timing still ahead (comparisons stop at their budgets); the
  // checks and the profile add a few seconds each on top.
  std::function<void(int index, int total, const std::string& stage, double budget_left)> stage_started;
  std::function<void(const std::string& stage, const std::string& status, const std::string& summary, double seconds)>
      stage_finished;
  std::function<void(const std::string& digest)> plan_frozen;
  ProgressSink comparison_progress;
  TimingLock::WaitNotice timing_lock_wait;  // a comparison waits for the timing lock (util/timing_lock.h)
  LockWaited timing_lock_waited;            // ... and holds it now: its hold, and the timing budget from now on
};

struct ValidateResult {
  Decision decision;
  nlohmann::json decision_json;
  std::string plan_digest;
  std::string manifest_sha256;  // of MANIFEST.sha256 as written: the ledger records it (ledger/bundle_entry.h)
  std::string unsigned_reason;  // why the bundle carries no signature.json ("" when it does)
  std::filesystem::path bundle;
  // The freeze failed on bad input (the task, a source): the bundle records it with an INVALID decision, and the
  // command exits with this input error's code (65 for a bad task) rather than 3, naming what to fix.
  std::optional<int> input_error_code;
  std::string input_error;
  // A comparison gave up waiting for the timing lock (--lock-timeout): the bundle records the stage error, what was
  // measured before it and an INVALID decision, and the command exits 75 (ExitCode::lock_timeout) with this message.
  std::string lock_timeout;
};

ValidateResult run_validate(const ValidateOptions& options, const ValidateObserver& observer);

}  // namespace kwb
