// Parent side of one kwb-worker process: spawn, feed, time out, kill, and explain how it ended. Nothing the
// worker says is trusted beyond raw facts (return code, nanoseconds, fault address); outputs are read by the
// parent from shared memory and validated there.
#pragma once

#include "worker/channel.h"
#include "worker/shared_buffer.h"

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

// How a worker stopped answering. `reason` is a failure reason code (crashed, aborted, exited, timeout,
// input_modified, out_of_bounds_write, sandbox_violation, resource_limit, protocol...).
struct WorkerDeath {
  std::string reason;
  std::string detail;
  int signal = 0;
  int exit_code = -1;
  std::optional<uint64_t> fault_address;
};

// An answer from the worker, or how it died instead.
struct LoadOutcome {
  bool ok = false;
  std::string reason;  // load_failed, missing_symbol, abi_mismatch, setup_failed, forbidden_symbol, or a death reason
  std::string detail;
  std::vector<std::string> sandbox;  // what the worker reports in force (worker/sandbox.h), for the record
  std::string device;                // the backend's description of its device (backend/backend.h)
};

// How the worker's backend is set up for one worker (backend/backend.h, BackendOptions).
struct DeviceOptions {
  bool trace = false;              // per-call kernel trace (check, profile); never for timed calls
  bool cold = false;               // flush device caches before each call, outside the timer
  std::string runtime_cache_dir;   // where the device runtime may keep compiled kernels; empty: nowhere
};

// The resource limits a worker confines itself to before loading (worker/sandbox.h). 0: not limited.
struct WorkerLimits {
  uint64_t address_space_bytes = 0;
  uint64_t cpu_seconds = 0;
};

struct TensorArg {
  std::string name;
  int buffer = -1;
  std::string dtype;
  std::vector<int64_t> shape;
};

struct RunRequest {
  std::vector<TensorArg> inputs;
  std::vector<TensorArg> outputs;
  std::vector<std::pair<std::string, double>> scalars;
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
  int64_t ns = 0;
  // The parent's own measurements around the request, to cross-check `ns` (which the worker reports): wall time
  // from just before sending the request to just after the answer, and the worker's CPU time over the same span
  // (all its threads; read from outside through its CPU clock). cpu_ns < 0 when the clock could not be read.
  int64_t parent_ns = 0;
  int64_t cpu_ns = -1;
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
  std::optional<std::vector<DeviceCommand>> kernels;  // only when traced
};

// Starts a worker that opens `backend` and loads nothing: the device's description, or Error(unavailable) with
// the worker's explanation (no driver, no device, a kwb built without the backend).
std::string probe_backend(const std::filesystem::path& worker_exe, const std::string& backend);

// The environment a worker starts with (documented in docs/worker-protocol.md).
std::vector<std::string> worker_environment();

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

  LoadOutcome load(const std::filesystem::path& artifact, const std::string& backend, int threads,
                   const std::string& task, const WorkerLimits& limits = {}, const DeviceOptions& device = {});
  // Maps buffers into the worker. Returns false when the worker died (see death()).
  bool map(int id, const SharedBuffer& buffer);
  // Puts `buffer` (same layout) behind the addresses where buffer `id` is mapped, pages populated. False when the
  // worker died.
  bool replace(int id, const SharedBuffer& buffer);
  bool unmap(const std::vector<int>& ids);
  // Cold mode on a host-memory backend: evict the caches before the next run request (backend.h). False when the
  // worker died.
  bool flush();
  RunOutcome run(const RunRequest& request);

  // The worker's CPU time so far (every thread, living or gone), read through its CPU clock; -1 if unreadable.
  int64_t cpu_time_ns() const;
  // Threads the worker has right now (/proc/PID/stat); -1 if unreadable.
  int thread_count() const;

  // Last bytes the worker (or the implementation) wrote to stdout/stderr.
  std::string output_tail(size_t max_bytes = 2000) const;
  // Polite exit, then kill if it does not go. True when the worker said goodbye having counted every run request
  // the parent made; false (see death()) when it was already gone, or its count disagrees: an answer was forged
  // or a request lost, so the run's records are incomplete.
  bool shutdown();

private:
  struct Region {
    int id;
    bool writable;
    uint64_t region_begin, region_end, data_begin, data_end;
  };

  friend std::string probe_backend(const std::filesystem::path& worker_exe, const std::string& backend);
  std::optional<nlohmann::json> request(const nlohmann::json& message, std::span<const int> fds = {});
  bool map_buffer(int id, const SharedBuffer& buffer, bool replace);
  void record_death(Channel::Status status, const std::string& malformed_detail = "");
  std::string classify_fault(uint64_t address) const;

  std::chrono::milliseconds m_timeout;
  pid_t m_pid = -1;
  Channel m_channel;
  UniqueFd m_output;  // memfd holding the worker's stdout+stderr
  std::vector<Region> m_regions;
  std::optional<WorkerDeath> m_death;
  std::optional<nlohmann::json> m_fault;
  uint64_t m_calls = 0;
  clockid_t m_cpu_clock = -1;
  bool m_has_cpu_clock = false;
};

}  // namespace kwb
