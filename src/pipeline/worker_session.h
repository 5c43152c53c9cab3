// One implementation loaded in one worker, and the parent's side of every call made to it: fresh poison and
// canaries before the call, and after it every assertion of the check (inputs unchanged, nothing written outside
// the outputs, every element written, non-finite agreement, values within tolerance). check and compare both call
// through here, so a timed call is validated exactly like a checked one.
#pragma once

#include "build/builder.h"
#include "pipeline/case_data.h"
#include "task/data.h"
#include "task/task.h"
#include "worker/worker_process.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

struct Failure {
  std::string case_name;
  int call = -1;           // the call's index within its case, -1 when not tied to one call
  std::string assertion;   // what was asserted, e.g. "within_tolerance:y"
  std::string reason;      // stable code: numeric_mismatch, crashed, ...
  std::string detail;      // for people
};

struct CallResult {
  bool completed = false;  // the worker answered
  int64_t ns = -1;         // the worker's measurement of kwb_run (+ backend sync)
  size_t passed = 0;
  std::vector<Failure> failures;
  double max_rel_error = 0.0;
  bool valid() const { return completed && failures.empty(); }
  std::optional<RunProfile> profile;  // only from kwb-profile-worker
};

// check: every assertion on every call, including replay detection (which keeps a copy of the last output).
// timing: the same assertions, except that inputs are fingerprinted once per visit (verify_inputs) rather than per
// call: they are sealed memfds, so the per-call hash only re-proves what the kernel already enforces.
enum class CallMode { check, timing };

struct SessionOptions {
  std::string backend = "cpu";
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  uint64_t poison_seed = 0;  // poison and canaries derive from it; fresh per call
  std::filesystem::path worker_executable;  // empty: kwb-worker (util/paths.h); the profiler uses kwb-profile-worker
  std::vector<std::string> wrapper;         // command the worker runs under (valgrind), empty for none
};

class WorkerSession {
public:
  WorkerSession(const Task& task, const Artifact& artifact, const SessionOptions& options);
  ~WorkerSession();
  WorkerSession(const WorkerSession&) = delete;  // owns a worker process and its buffers
  WorkerSession& operator=(const WorkerSession&) = delete;

  LoadOutcome start();
  bool alive() const { return m_worker && m_worker->alive(); }
  pid_t pid() const { return m_worker ? m_worker->pid() : -1; }
  std::optional<WorkerDeath> death() const { return m_worker ? m_worker->death() : std::nullopt; }

  // Maps an input set into the worker (once). False when the worker died doing so.
  bool attach(const InputSet& set);
  void detach(const InputSet& set);

  // One call on `set`, validated. `call_index` labels failures.
  CallResult call(const InputSet& set, int call_index, CallMode mode);
  // The input_unchanged assertions for one input set, on their own (timing mode runs them once per visit).
  CallResult verify_inputs(const InputSet& set, int call_index);

  void shutdown();

private:
  struct Outputs {
    std::vector<std::unique_ptr<SharedBuffer>> buffers;
    std::vector<int> ids;
  };
  bool ensure_outputs(const InputSet& set);
  int next_id() { return ++m_last_id; }

  const Task& m_task;
  const Artifact& m_artifact;
  SessionOptions m_options;
  std::unique_ptr<WorkerProcess> m_worker;
  std::map<const InputSet*, std::vector<int>> m_input_ids;
  std::string m_outputs_case;
  Outputs m_outputs;
  std::vector<std::vector<double>> m_previous_expected;
  Rng m_rng;
  int m_last_id = 0;
};

}  // namespace kwb
