// One implementation loaded in one worker, and the parent's side of every call made to it: fresh poison and
// canaries before the call, and after it every assertion of the check (inputs unchanged, nothing written outside
// the outputs, every element written, non-finite agreement, values within tolerance) and the parent's
// cross-checks of what the worker reports (the time is physically and clock-wise plausible; nothing kept running
// after the call returned). check and compare both call through here, so a timed call is validated exactly like a
// checked one. docs/threat-model.md lists what each defends against.
#pragma once

#include "builder/builder.h"
#include "session/case_data.h"
#include "task/data.h"
#include "task/task.h"
#include "util/cpu_watch.h"
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
  int call = -1;          // the call's index within its case, -1 when not tied to one call
  std::string assertion;  // what was asserted, e.g. "within_tolerance:y"
  FailureReason reason = FailureReason::crashed;
  std::string detail;  // for people
  // How many elements of an output the failed assertion counted (values out of tolerance, NaN/Inf disagreements,
  // poison left); 0 for an assertion about the call as a whole. A control's margin (pipeline/check.h) sums them.
  size_t elements = 0;
};

// {case, call, assertion, reason, detail}: how check reports and compare results write a failure.
nlohmann::json to_json(const Failure& f);
// The reasons among `failures`, each once, in the order they first appear.
std::vector<std::string> distinct_reasons(const std::vector<Failure>& failures);

// One output's worst element in a call (or over calls): OutputComparison's error maxima.
struct OutputErrors {
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  double tolerance_used = 0.0;
  void merge(const OutputErrors& o);
};

struct CallResult {
  bool completed = false;  // the worker answered
  // The call's sample (util/cpu_watch.h, charged_ns): window_ns plus the worker's CPU outside the window on the
  // call's data (pre_cpu_ns, post_cpu_ns); the window alone where the call was not watched per window.
  int64_t ns = -1;
  int64_t window_ns = -1;  // go to done, as the parent timed it (kwb_run + the backend's synchronization)
  size_t passed = 0;
  std::vector<Failure> failures;
  double max_rel_error = 0.0;
  double max_tolerance_used = 0.0;    // OutputComparison::max_tolerance_used, over the call's outputs
  std::vector<OutputErrors> outputs;  // per output, by signature index (check mode computes them; else zeros)
  bool valid() const { return completed && failures.empty(); }
  std::optional<RunProfile> profile;                  // only from kwb-profile-worker
  int64_t device_ns = -1;                             // device backends: the device's own time for the call (-1: none)
  std::optional<std::vector<DeviceCommand>> kernels;  // device backends with tracing: what the call launched
  // What the call was charged beyond its window, where the parent reads exact per-window figures: the worker's CPU
  // from just before the inputs were written to ready, beyond the parent's reaction, and after done. -1 where the
  // call was not watched that way. gap_cpu_ns: its CPU between the previous call's capture and this call's inputs.
  int64_t pre_cpu_ns = -1;
  int64_t post_cpu_ns = -1;
  int64_t gap_cpu_ns = -1;
  // Device backends: the call's uploads before go and its read-back after done, as the worker's CPU (beyond the
  // parent's reaction) and as wall time (RunOutcome::pre_wall_ns, read_wall_ns): kwb's own work, the same for both
  // arms, recorded and not charged (util/cpu_watch.h, device_charged_ns). -1 on the cpu backend.
  int64_t outside_cpu_ns = -1;
  int64_t outside_wall_ns = -1;
};

// check: every assertion on every call, including replay detection (which keeps a copy of the last output).
// timing: the same assertions, except that inputs are fingerprinted once per visit (verify_inputs) rather than per
// call: they are sealed memfds, so the per-call hash only re-proves what the kernel already enforces.
enum class CallMode { check, timing };

struct SessionOptions {
  BackendKind backend = BackendKind::cpu;
  // Per call. No default here: every caller passes the user's value or pipeline/defaults.h's.
  std::chrono::milliseconds timeout{0};
  uint64_t poison_seed = 0;                 // poison and canaries derive from it; fresh per call
  std::filesystem::path worker_executable;  // empty: kwb-worker (util/paths.h); the profiler uses kwb-profile-worker
  std::vector<std::string> wrapper;         // command the worker runs under (valgrind), empty for none
  bool trace = false;  // device backends: per-call kernel trace (check, profile); never for timed calls
  bool cold = false;   // flush caches before every call, outside the timer
  // Layout (stats/layout.h): the stack offset at every call, and each tensor's offset within its page (inputs then
  // outputs, in signature order; missing entries are 0).
  uint32_t stack_offset = 0;
  std::vector<uint32_t> tensor_offsets;
  // Timing traps only on sets whose twin exists already. Making a twin runs the oracle (and fills fresh pages) on
  // the CPUs the worker uses; done just before a timed call, it slowed that call by whatever it left in the caches,
  // and only in the first blocks, while twins were still missing. A trap drawn on a set without a twin is skipped and
  // the set is listed (twins_wanted); compare makes those twins between visits, when no worker runs.
  bool twins_made_between_visits = false;
};

class WorkerSession {
public:
  WorkerSession(const Task& task, const Artifact& artifact, const SessionOptions& options);
  ~WorkerSession();
  WorkerSession(const WorkerSession&) = delete;  // owns a worker process and its buffers
  WorkerSession& operator=(const WorkerSession&) = delete;

  // Refuses an artifact that exports forbidden symbols (builder/elf_inspect.h) before any worker exists, then starts a
  // worker confined to the task's limits and loads the artifact there.
  LoadOutcome start();
  bool alive() const { return m_worker && m_worker->alive(); }
  pid_t pid() const { return m_worker ? m_worker->pid() : -1; }
  std::optional<WorkerDeath> death() const { return m_worker ? m_worker->death() : std::nullopt; }

  // Inputs reach the worker through per-case slots that the parent refills before every call, behind the same
  // addresses (an implementation that keys anything on addresses or mappings sees new data behind old pointers);
  // the sets themselves are never mapped into a worker.

  // One call on `set`, validated. `call_index` labels failures.
  CallResult call(const InputSet& set, int call_index, CallMode mode);
  // The input_unchanged assertions for one input set: when the slots hold it, their data must still be its data
  // (the slots are sealed for the worker, so this re-proves what the kernel enforces).
  CallResult verify_inputs(const InputSet& set, int call_index);
  // verify_inputs for what the slots hold now (the last call's set, or its twin): the one input data the worker
  // could reach. No assertion when no call has filled them.
  CallResult verify_slots(int call_index);

  // Polite exit. False when the worker was gone, or its goodbye does not account for every call (see death()).
  bool shutdown();

  // While another worker's call is timed, this one is stopped (WorkerProcess::freeze): nothing it does can take a
  // CPU, a cache or memory bandwidth from that call. False, with death() set, when it died or would not stop: the
  // implementation's failure. The next call() thaws it.
  bool freeze();

  // In timing mode, the chance that a call secretly runs on a twin of its input set (a copy with a few elements
  // changed) swapped in behind the same addresses: a pointer-keyed or sampled-content cache replays a stale result
  // there and fails validation. Which calls, and which elements, come from a secret drawn per session.
  static constexpr double k_trap_probability = 1.0 / 8;
  // The sets a trap was drawn on that had no twin (SessionOptions::twins_made_between_visits), in draw order.
  const std::vector<const InputSet*>& twins_wanted() const { return m_twins_wanted; }
  // The physical floor under a reported time: no CPU thread moves more than this many bytes per ns (1 TB/s, above
  // the L1 bandwidth of any current core); a reported time implying more is a lie (docs/threat-model.md).
  static constexpr double k_max_bytes_per_ns_per_thread = 1000.0;
  // The CPU watch (docs/timing.md, "What a sample charges"). Where the worker's CPU clock is exact per window (a perf
  // task-clock following every thread), the worker's CPU outside the timed window on the call's data is charged to
  // the sample, not bounded: from just before the inputs are written to ready (beyond the parent's own reaction,
  // while the worker spins for go) and after done. Work moved there gains nothing, whether it got there through
  // threads or by taking over the worker's control flow, so no bound has to tell it from a loaded machine.
  // What is still bounded is what cannot be charged:
  // - Between calls the worker answers, reads the next request and arms (kwb's protocol work, the same for every
  //   implementation): the median over a worker's calls of that gap (cpu_watch::k_gap_cpu_median_bound_ns), judged
  //   from the ninth call after the first two (cold paths). Nine, so that a burst of up to four disturbed gaps cannot
  //   carry the median: three consecutive gaps of 13, 37 and 11 ms of stolen vCPU once made an honest fused RMSNorm
  //   on prefill INVALID when the median was judged from the fifth call. A thread that never stops is in every gap.
  // - Where only the coarse CPU clock is available (no perf_event_open): CPU over the whole call cycle beyond the
  //   timed window, for parsing the request and answering it.
  // - After its answer the worker waits for the next request, blocked in recvmsg, and is charged nothing: CPU there
  //   is a thread still running (which would take a CPU from the other arm's worker). Judged by the median over the
  //   worker's calls, as one call can meet an interrupt or a stolen vCPU (6.4 ms once on an honest baseline on a
  //   loaded 2-vCPU VM), plus a per-call bound no honest call reaches.
  static constexpr size_t k_median_skip_calls = 2;
  static constexpr size_t k_median_min_calls = 9;
  static constexpr int64_t k_cycle_cpu_slack_ns = 2'000'000;
  static constexpr int64_t k_idle_cpu_median_bound_ns = 1'000'000;
  static constexpr int64_t k_idle_cpu_bound_ns = 100'000'000;

private:
  struct Outputs {
    std::vector<std::unique_ptr<SharedBuffer>> buffers;
    std::vector<int> ids;
  };
  // The input slots of one case: buffers the parent refills before every call (the worker maps them read-only,
  // sealed for it), so every call sees new data behind the same addresses and nothing about the mappings changes.
  struct Slots {
    std::string case_name;
    std::vector<std::unique_ptr<SharedBuffer>> buffers;
    std::vector<int> ids;
    const InputSet* content = nullptr;  // the set whose data they hold now
    // Per slot, the buffer its bytes were copied from (kept alive, so no other buffer can take its address). The
    // worker cannot write a slot (sealed for others): a slot whose source is the next set's own buffer, a pool's
    // `shared` input, already holds its bytes and is not copied again (250 MiB a call for a model's table).
    std::vector<std::shared_ptr<const SharedBuffer>> sources;
  };
  struct Checks;
  struct Guards;
  // The steps of call().
  Guards draw_guards(const InputSet& set);
  RunRequest run_request(const InputSet& set) const;
  RunHooks run_hooks(const InputSet& set, const Guards& guards, bool watch_outputs);
  void check_reports(Checks& checks, const RunOutcome& out, const InputSet& set, bool check_mode);
  void check_device_reports(Checks& checks, const RunOutcome& out) const;
  void check_output(Checks& checks, size_t i, const InputSet& set, const Guards& guards, bool check_mode);
  void check_timing(Checks& checks, const RunOutcome& out, const InputSet& set, bool watch_outputs,
                    int64_t cpu_at_answer);
  bool ensure_outputs(const InputSet& set);
  bool ensure_slots(const InputSet& set);
  // "; the address is 37 bytes past the end of input 'table'": which tensor a fault hit, from the worker's death.
  std::string fault_tensor(const WorkerDeath& d) const;
  void fill_slots(const InputSet& set);
  const InputSet& twin_of(const InputSet& set);
  // The cross-checks of one answered call; each returns why it failed, or "".
  std::string implausible_timing(const RunOutcome& out, const InputSet& set) const;
  std::string outside_timer(const RunOutcome& out);
  // at_done: whether outputs were captured at done (into m_at_done) for this call.
  std::string work_after_return(bool at_done, int64_t cpu_at_answer, bool output_failed);
  // The cross-checks need the plain kwb-worker: under valgrind (the profile worker) clocks and CPU time mean
  // something else.
  bool hardened() const { return m_options.worker_executable.empty() && m_options.wrapper.empty(); }
  // Tensors live in device memory; the runtime's own threads work for the call (docs/backends.md).
  bool device_backend() const { return is_device(m_options.backend); }
  std::string implausible_device_timing(const RunOutcome& out) const;
  WorkerLimits limits() const;
  int next_id() { return ++m_last_id; }
  size_t tensor_offset(size_t tensor) const {
    return tensor < m_options.tensor_offsets.size() ? m_options.tensor_offsets[tensor] : 0;
  }

  const Task& m_task;
  const Artifact& m_artifact;
  SessionOptions m_options;
  std::unique_ptr<WorkerProcess> m_worker;
  Slots m_slots;
  std::string m_outputs_case;
  Outputs m_outputs;
  std::vector<std::vector<double>> m_previous_expected;
  // The outputs' bytes as the parent captured them at done (kept across calls: no allocation per call); compared
  // byte for byte after validation, so no change after done can hide in a hash collision.
  std::vector<std::vector<unsigned char>> m_at_done;
  std::vector<int64_t> m_gap_cpu, m_idle_cpu;  // this worker's CPU between calls and after its answers
  size_t m_calls_watched = 0;
  Rng m_rng;
  // Trap decisions and twin perturbations must not follow from anything the implementation can know (nonces are
  // recorded in bundles and the defaults are public): seeded from the OS.
  Rng m_secret;
  std::vector<const InputSet*> m_twins_wanted;
  int m_last_id = 0;
};

}  // namespace kwb
