// Parent side of one kwb-worker process: spawn, feed, time out, kill, and explain how it ended. Nothing the
// worker says is trusted beyond raw facts (return code, nanoseconds, fault address); outputs are read by the
// parent from shared memory and validated there.
#pragma once

#include "util/backend_kind.h"
#include "util/failure_reason.h"
#include "worker/channel.h"
#include "worker/protocol.h"
#include "worker/shared_buffer.h"

#include <sched.h>
#include <sys/types.h>
#include <time.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

// How a worker stopped answering (crashed, aborted, exited, timeout, input_modified, out_of_bounds_write,
// sandbox_violation, resource_limit, protocol...).
struct WorkerDeath {
  FailureReason reason = FailureReason::crashed;
  std::string detail;
  int signal = 0;
  int exit_code = -1;
  std::optional<uint64_t> fault_address;
  // A fault inside one of the mapped tensors' regions: its buffer id and where the address lies against its data
  // ("37 bytes past the end"), for the session to name the tensor.
  std::optional<int> fault_buffer;
  std::string fault_where;
};

// An answer from the worker, or how it died instead.
struct LoadOutcome {
  bool ok = false;
  // When not ok: load_failed, missing_symbol, abi_mismatch, setup_failed, forbidden_symbol, or a death reason.
  FailureReason reason = FailureReason::load_failed;
  std::string detail;
  std::vector<std::string> sandbox;  // what the worker reports in force (worker/sandbox.h), for the record
  std::string device;                // the backend's description of its device (backend/backend.h)
};

// How the worker's backend is set up for one worker (backend/backend.h, BackendOptions).
struct DeviceOptions {
  bool trace = false;             // per-call kernel trace (check, profile); never for timed calls
  bool cold = false;              // flush device caches before each call, outside the timer
  std::string runtime_cache_dir;  // where the device runtime may keep compiled kernels; empty: nowhere
  // Nothing this worker runs is timed (the task's oracle, oracle/oracle.h): the parent sleeps while a call runs
  // instead of spinning on its own CPU, and the worker may use every CPU kwb was given, as a device backend's does.
  bool untimed = false;
};

// The resource limits a worker confines itself to before loading (worker/sandbox.h). 0: not limited.
struct WorkerLimits {
  uint64_t address_space_bytes = 0;
  uint64_t cpu_seconds = 0;
};

using TensorArg = protocol::TensorArg;

struct RunRequest {
  std::vector<TensorArg> inputs;
  std::vector<TensorArg> outputs;
  std::vector<std::pair<std::string, double>> scalars;
  uint32_t stack_offset = 0;  // bytes the worker moves its stack down before calling kwb_run (layout)
};

// What the caller does at the two moments of a call when the worker is asleep (worker/protocol.h). Either may be
// empty.
struct RunHooks {
  // The worker is armed and asleep: write the call's inputs and poison, evict caches. The worker's CPU clock is read
  // before this runs, and any CPU it uses from then until it says ready is work outside the timer (pre_cpu_ns).
  std::function<void()> before_wake;
  // The worker said done and is going to sleep: capture (fingerprint) the outputs. The worker's CPU clock is read
  // before and after, and it must not move.
  std::function<void()> at_done;
};

// What only kwb-profile-worker reports about one kwb_run (docs/profile.md): the heap allocations made during the
// call and, where perf_event_open is allowed and the worker is not under valgrind, user-space hardware counters.
struct RunProfile {
  uint64_t alloc_count = 0;
  uint64_t alloc_bytes = 0;
  uint64_t free_count = 0;
  std::optional<uint64_t> hw_instructions;
  std::optional<uint64_t> hw_cycles;
  std::string hw_unavailable;  // why the counters are absent
  bool on_valgrind = false;
  bool callgrind_requests = false;  // the worker was built with valgrind's client requests
};

// One command a call started on the device, as the worker's trace saw it.
struct DeviceCommand {
  std::string name;
  bool on_call_stream = true;
  int64_t device_ns = -1;
};

struct RunOutcome {
  bool answered = false;  // false: see death
  int rc = 0;
  // The call's time, taken by the parent: from go to done (worker/protocol.h).
  int64_t ns = 0;
  // The worker's CPU time (all its threads, read from outside through its CPU clock) in the three windows of the
  // call: from just before the inputs are written to ready (pre), from go to done (inside), while the parent
  // captured the outputs (post). -1 when the clock could not be read.
  int64_t pre_cpu_ns = -1;
  int64_t inside_cpu_ns = -1;
  int64_t post_cpu_ns = -1;
  // The worker's CPU between the previous call's capture and this call's inputs (it answered the previous call,
  // read this request and armed); -1 on a worker's first call or when the clock could not be read.
  int64_t gap_cpu_ns = -1;
  // Device backends: the wall time from the wake (the inputs written) to ready, less the times the parent was not
  // running while it waited (the uploads, and device work the worker waits for before go, take wall time even where
  // they take no CPU); and the wall time and the worker's CPU from done to the outputs read back (Phase::downloaded).
  // post_cpu_ns then runs from that read to the capture. -1 on the cpu backend.
  int64_t pre_wall_ns = -1;
  int64_t read_wall_ns = -1;
  int64_t read_cpu_ns = -1;
  // The parent's own reaction time from seeing ready to go, plus the times it was not running while it waited for
  // ready (a busy machine): the worker legitimately spins that long before go.
  int64_t reaction_ns = 0;
  // CPU from the inputs' arrival to the worker's answer (both ends read while it sleeps, so exact even with the
  // coarse clock), and whether the per-window figures above are exact (WorkerProcess::cpu_clock_exact()).
  int64_t cycle_cpu_ns = -1;
  bool cpu_windows_exact = false;
  bool descriptors_intact = true;
  std::optional<WorkerDeath> death;
  std::optional<RunProfile> profile;  // present only in answers of kwb-profile-worker
  // Device backends only (absent for cpu): the device's own time between the call's start and end events (-1:
  // none), inputs whose device copy differs after the call, commands put on other queues/streams, the trace.
  bool device = false;
  int64_t device_ns = -1;
  std::vector<std::string> inputs_modified_on_device;
  std::vector<std::string> written_outside_on_device;  // tensors whose device guard bytes changed
  uint64_t off_stream_commands = 0;
  std::string off_stream_detail;
  std::string runtime_tampered;  // the device runtime's state the worker relies on was rewritten: what
  std::optional<std::vector<DeviceCommand>> kernels;  // only when traced
};

// Starts a worker that opens `backend` and loads nothing: the device's description, or Error(unavailable) with
// the worker's explanation (no driver, no device, a kwb built without the backend).
std::string probe_backend(const std::filesystem::path& worker_exe, BackendKind backend);

// The device runtime's cache (PoCL's compiled kernels) of one `key` (worker_runtime_cache_key); created here. When
// kwb runs as root it is the identity's canonical cache, root's and private to it: a worker never gets it, but a
// private copy (WorkerProcess::load), and what that worker's runtime compiled comes back into it when the worker is
// gone. Otherwise (workers run as the invoking user) it is the folder the worker's runtime writes.
std::filesystem::path worker_runtime_cache_dir(BackendKind backend, const std::string& key);

// The key of the runtime directory of an implementation identity (BuildIdentity::key): that identity, the backend,
// kwb-worker's own digest and worker_environment_identity(). A runtime setting (POCL_*, a device selection) or a
// rebuilt worker gets a directory of its own, never kernels compiled under another.
std::string worker_runtime_cache_key(BackendKind backend, const std::string& identity_key);

// The environment a worker starts with (documented in docs/worker-protocol.md).
std::vector<std::string> worker_environment();

// The CPUs this process was started with (its affinity mask then, a cgroup's or taskset's), read once: workers are
// placed within them, and untimed work (the oracle's pool making) may use all of them.
const cpu_set_t& cpus_at_start();
int cpus_kwb_may_use();

// What of that environment decides how a worker behaves: worker_environment() without KWB_PARENT_PID (which names
// this kwb process), sorted. Every cache of what workers produce is keyed on it (the check cache, the device
// runtime's directory).
std::vector<std::string> worker_environment_identity();

// SHA-256 of an executable (kwb-worker, kwb itself), read once per process and path.
const std::string& executable_sha256(const std::filesystem::path& exe);

class WorkerProcess {
public:
  // `wrapper`, when given, is the start of the command line and the worker executable its last argument (the
  // profiler runs the profile worker as `valgrind --tool=callgrind ... kwb-profile-worker`); wrapper[0] must be a
  // path, not a name to look up.
  WorkerProcess(const std::filesystem::path& worker_exe, std::chrono::milliseconds timeout,
                const std::vector<std::string>& wrapper = {});
  ~WorkerProcess();  // kills and reaps: a worker never outlives its owner
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return m_pid; }
  bool alive() const { return m_pid > 0 && !m_death; }
  const std::optional<WorkerDeath>& death() const { return m_death; }

  LoadOutcome load(const std::filesystem::path& artifact, BackendKind backend, int threads, const std::string& task,
                   const WorkerLimits& limits = {}, const DeviceOptions& device = {});
  // Maps buffers into the worker. Returns false when the worker died (see death()).
  bool map(int id, const SharedBuffer& buffer);
  // Puts `buffer` (same layout) behind the addresses where buffer `id` is mapped, pages populated. False when the
  // worker died.
  bool replace(int id, const SharedBuffer& buffer);
  bool unmap(const std::vector<int>& ids);
  // One call, timed by this process through the control page (worker/protocol.h).
  RunOutcome run(const RunRequest& request, const RunHooks& hooks = {});

  // The worker's CPU time so far (every thread, living or gone); -1 if unreadable. Read through a perf task-clock
  // counter that follows every thread of the worker, which the kernel brings up to date on each read even while the
  // worker runs on another CPU; where perf_event_open is refused, through the process CPU clock, which the kernel
  // updates only when a thread sleeps or at a tick (exact only while every thread sleeps).
  int64_t cpu_time_ns() const;
  bool cpu_clock_exact() const { return m_task_clock.valid(); }
  // Which clock, and why the exact one is missing, for the evidence.
  const std::string& cpu_clock_note() const { return m_cpu_clock_note; }
  // Threads the worker has right now (/proc/PID/stat); -1 if unreadable.
  int thread_count() const;

  // Last bytes the worker (or the implementation) wrote to stdout/stderr.
  std::string output_tail(size_t max_bytes = 2000) const;
  // Polite exit, then kill if it does not go. True when the worker said goodbye having counted every run request
  // the parent made; false (see death()) when it was already gone, or its count disagrees: an answer was forged
  // or a request lost, so the run's records are incomplete.
  bool shutdown();

  // Stops every process in the worker's group (SIGSTOP cannot be caught or ignored) and waits until the stop has
  // taken hold, so that nothing of this worker runs while another worker's call is timed (docs/timing.md,
  // "Interleaved calls"). False when the worker died or did not stop before `deadline`; death() then says why.
  bool freeze(std::chrono::steady_clock::time_point deadline);
  // Lets a frozen worker run again. run() and shutdown() thaw a frozen worker first.
  void thaw();
  bool frozen() const { return m_frozen; }

private:
  struct Region {
    int id;
    bool writable;
    uint64_t region_begin, region_end, data_begin, data_end;
  };

  friend std::string probe_backend(const std::filesystem::path& worker_exe, BackendKind backend);
  std::optional<nlohmann::json> request(const nlohmann::json& message, std::span<const int> fds = {});
  // Waits until the control page holds `word`: false (and death() set) when the worker died, timed out, or sent a
  // message instead. `spin` keeps this thread busy (the short windows); otherwise it sleeps on the futex.
  std::optional<nlohmann::json> request_reply(std::chrono::steady_clock::time_point deadline);
  void parse_ran(const nlohmann::json& reply, RunOutcome& out);
  // run's steps, one timed call: the clocks it reads, its request sent, a device worker's outputs read back, the
  // figures the clocks give, and the worker's answer. false (and death() set) when the worker failed.
  struct CallClocks {
    timespec woke{}, seen_ready{}, t0{}, t1{};
    int64_t cpu_a = -1, cpu_b = -1, cpu_1 = -1, cpu_read = -1, cpu_2 = -1;
    int64_t stalled_ns = 0, read_wall_ns = 0;
  };
  bool send_run(uint64_t call, const RunRequest& req);
  bool read_back(uint64_t call, std::chrono::steady_clock::time_point deadline, CallClocks& c);
  void call_figures(const CallClocks& c, RunOutcome& out);
  bool answer(uint64_t call, std::chrono::steady_clock::time_point deadline, int64_t cpu_a, RunOutcome& out);
  bool await_state(uint32_t word, std::chrono::steady_clock::time_point deadline, bool spin,
                   int64_t* stalled_ns = nullptr, const timespec* since = nullptr);
  // A pause longer than this between two looks at the control page means this process was not running.
  static constexpr int64_t k_stall_ns = 5'000;
  // Ends the worker for a candidate-caused protocol violation (a forged, malformed or out-of-order message).
  void fail_protocol(const std::string& detail);
  void place_on_cpus(bool apart);
  bool map_buffer(int id, const SharedBuffer& buffer, bool replace);
  // Classifies how the worker ended and reaps it. Throws Interrupted instead when kwb is being interrupted: the
  // death is then kwb's own doing (util/interrupt.h), never the candidate's.
  void record_death(Channel::Status status, const std::string& malformed_detail = "");
  // record_death's steps: the worker reaped (killed when it lingers), its wait status; a death by `signal` named.
  int reap_dead_worker();
  void classify_signal(int signal, WorkerDeath& d) const;
  // Reaps the worker if it has exited (its wait status), without blocking; nullopt while it runs. Reaping ends
  // whatever it left in its process group, unregisters the group (util/interrupt.h) and tidies the runtime cache.
  std::optional<int> try_reap();
  // Kills the worker's process group and reaps it: its wait status.
  int kill_and_reap();
  // `access`: "read", "write" or "" (the worker could not tell). Fills d's fault_buffer and fault_where.
  FailureReason classify_fault(uint64_t address, const std::string& access, WorkerDeath& d) const;

  std::chrono::milliseconds m_timeout;
  bool m_profile_worker = false;  // kwb-profile-worker: its load carries its seccomp program
  bool m_device_backend = false;  // the loaded backend keeps tensors in device memory: answers carry device fields
  // cpu backend: the parent spins until done (exact t1); device backends: it sleeps on the futex, leaving every CPU
  // to the runtime's threads (t1 then includes a futex wake-up, the same for both arms).
  bool m_spin_for_done = true;
  bool m_own_cpu = false;  // placed apart from the worker (place_on_cpus): the parent may spin while it waits
  // The parent's own stalls while it waits for ready are taken off the call's CPU before go (the worker spins for go
  // while the parent is not running) only where nothing of the worker can cause them: the parent has a CPU of its
  // own and the worker one thread that may not move onto it (no threads, so no sched_setaffinity). Elsewhere a stall
  // may be the worker's doing: a device runtime's threads share the parent's CPUs, and on a 2-vCPU machine the work a
  // hook did in the runtime's upload while the parent had yielded read as the parent's stall and was taken off.
  bool m_discount_stalls = false;
  pid_t m_pid = -1;
  Channel m_channel;
  UniqueFd m_output;  // memfd holding the worker's stdout+stderr
  std::vector<Region> m_regions;
  std::optional<WorkerDeath> m_death;
  bool m_frozen = false;
  std::optional<nlohmann::json> m_fault;
  uint64_t m_calls = 0;
  protocol::ControlBlock* m_control = nullptr;  // the control page, shared with the worker
  UniqueFd m_control_fd;
  UniqueFd m_task_clock;  // perf task-clock of the worker, inherited by its threads
  std::string m_cpu_clock_note;
  std::string m_runtime_cache_dir;    // the directory the worker's runtime writes, tidied when the worker is gone
  std::string m_canonical_cache_dir;  // when that is a private copy (kwb is root): the identity's cache it came from
  // The directory the worker's runtime gets for the canonical cache `canonical` (DeviceOptions::runtime_cache_dir):
  // itself, or when kwb is root a private copy owned by the worker's user (worker_user_of).
  std::string use_runtime_cache(const std::string& canonical);
  // The worker is gone: its runtime's leftovers tidied, or its private copy returned and removed.
  void end_runtime_cache() noexcept;
  int64_t m_last_capture_cpu = -1;  // the worker's CPU clock when the last call's outputs had been captured
  clockid_t m_cpu_clock = -1;
  bool m_has_cpu_clock = false;
};

}  // namespace kwb
