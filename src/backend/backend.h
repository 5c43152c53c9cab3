// The device side of a worker: which device, what the candidate's tensors and stream are, how inputs reach the
// device and outputs come back, and when a call is finished. One implementation per file (cpu_backend.cpp,
// opencl_backend.cpp, cuda_backend.cpp); the worker owns exactly one backend for its lifetime. docs/backends.md.
//
// One timed call, as the worker drives it (worker/worker_main.cpp):
//
//   upload(inputs), upload(outputs: the parent's fresh poison)   untimed
//   prepare_call()                                               untimed: cold-cache flush, trace armed
//   ready ... go                                                 the parent takes t0 (worker/protocol.h)
//   begin_call()                                                 start event on the call's stream/queue
//   kwb_run(...)
//   finish_call()                                                end event; device-wide synchronization
//   done                                                         the parent takes t1
//   download(outputs); matches(inputs); guards_intact(all)       untimed: the parent validates what came back
//   collect_call()                                               untimed: event time, kernel trace, and work
//                                                                enqueued after the timer stopped
//
// Work the candidate starts anywhere on the device (another stream, another queue) is finished before t1, so it
// cannot escape the timer; the trace (or the queue bookkeeping) also says that it happened.
#pragma once

#include "kwb/kernel.h"
#include "util/backend_kind.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace kwb {

struct BackendOptions {
  // Record every kernel a call launches, with its name and device time. check and profile only: tracing costs
  // time (events per launch, CUPTI buffers), so timed calls never run with it.
  bool trace = false;
  // Flush the device's caches before every call, outside the timer (cold-cache timing).
  bool cold = false;
  // A directory the device runtime may write its compiled kernels to (PoCL's kernel cache); private to one
  // implementation's identity. Empty: none is needed or granted.
  std::string runtime_cache_dir;
};

// One kernel (or other device command) a call started.
struct KernelRecord {
  std::string name;            // the kernel's function name; "copy", "fill", ... for other commands
  bool on_call_stream = true;  // false: enqueued on a queue/stream other than the one kwb handed to the call
  int64_t device_ns = -1;      // start-to-end on the device; -1 when the runtime gave no timestamps
};

struct CallDeviceInfo {
  int64_t device_ns = -1;  // between the begin and end events of the call's stream; -1: no events
  bool traced = false;     // `kernels` is the complete list (trace mode)
  std::vector<KernelRecord> kernels;
  uint64_t off_stream_commands = 0;  // commands seen on other queues/streams (in every mode where detectable)
  std::string off_stream_detail;
  // Not empty: the implementation rewrote the device runtime's own state that the worker relies on (the OpenCL
  // driver's dispatch table), before or during this call; what was changed.
  std::string runtime_tampered;
};

// What the device runtime itself needs from the sandbox after the implementation is loaded (worker/sandbox.h).
struct RuntimeSandboxNeeds {
  // false: the runtime does, inside kwb_run, things the run phase's allow-list forbids (PoCL compiles, links and
  // dlopens kernels lazily at their first launch), so the load phase's deny-list stays in force instead.
  bool strict_run_filter = true;
  bool threads = false;                   // the runtime runs threads of its own (PoCL's workers, CUDA's)
  bool spawn = false;                     // the runtime starts helper programs (PoCL runs the linker)
  std::vector<std::string> read_paths;    // readable (and mappable) for the runtime
  std::vector<std::string> exec_paths;    // executable, with spawn
  std::vector<std::string> write_paths;   // writable (created, renamed, removed within)
  std::vector<std::string> device_paths;  // device nodes the runtime opens and ioctl()s
  // The runtime reserves address space far beyond the task's memory (CUDA's unified address space): no RLIMIT_AS.
  bool unlimited_address_space = false;
  // RLIMIT_NOFILE for a runtime that keeps many descriptors (the CUDA driver: device nodes per context and
  // allocation class); 0 keeps the worker's default of 64.
  uint64_t open_files = 0;
};

class Backend;

// The backend calls the worker makes from a run request to the outputs' read-back, bound to their final overriders
// (every backend class is final, so these are direct calls) and kept by the worker on a page of its own, read-only
// and sealed before the implementation is loaded (worker_main.cpp). The path between the inputs' arrival and go
// then holds no indirection the implementation can rewrite: a vtable pointer or a unique_ptr it overwrites in the
// worker's memory changes nothing the worker calls (tests/adversarial/opencl/vtable_takeover.cpp).
struct CallPath {
  Backend* self = nullptr;
  bool host_memory = true;
  void (*upload)(Backend*, int id, const void* host, size_t nbytes) = nullptr;
  void (*download)(Backend*, int id, void* host, size_t nbytes) = nullptr;
  void (*prepare_call)(Backend*) = nullptr;
  void (*begin_call)(Backend*) = nullptr;
  void (*finish_call)(Backend*) = nullptr;
};

class Backend {
public:
  virtual ~Backend() = default;
  // This backend's CallPath (each backend: return bind_call_path(this)).
  virtual CallPath call_path() = 0;
  virtual BackendKind id() const = 0;  // kwb's own name for it (kind() is the ABI's)
  virtual kwb_backend kind() const = 0;
  virtual DLDevice device() const = 0;
  // Platform, device and driver, for the evidence ("PoCL 3.1 / pthread-skylake-avx512 / OpenCL 3.0").
  virtual std::string description() const = 0;
  virtual void fill_context(kwb_context& ctx) const = 0;
  virtual void* stream() const = 0;
  virtual RuntimeSandboxNeeds sandbox_needs() const { return {}; }

  // true: tensors are the parent's shared host mappings themselves and nothing below is called for buffers.
  virtual bool host_memory() const { return true; }
  // Device mirror of host buffer `id`; returns what goes into DLTensor::data (a cl_mem, a device pointer).
  virtual void* create_buffer(int id, size_t nbytes) = 0;
  // The device buffer of input `id`, whose bytes lie at `host`: the worker's read-only mapping of the input, fenced by
  // PROT_NONE pages after its data. A device that computes in host memory may use those bytes in place, so that a
  // kernel reading past the input's end faults on the fence (out_of_bounds_read) and one writing into it faults on
  // the read-only mapping (input_modified); such a buffer needs no upload and has no guards. By default, a mirror.
  virtual void* create_input_buffer(int id, void* host, size_t nbytes) {
    (void)host;
    return create_buffer(id, nbytes);
  }
  virtual void release_buffer(int id) = 0;
  virtual void upload(int id, const void* host, size_t nbytes) = 0;
  virtual void download(int id, void* host, size_t nbytes) = 0;
  // Whether the device copy of `id` still holds exactly `host` (an input the implementation must not modify).
  virtual bool matches(int id, const void* host, size_t nbytes) = 0;
  // Device buffers sit between guard bytes of a random pattern (the device's counterpart of the host canaries):
  // false when a guard of `id` changed since the last check, i.e. something wrote outside the tensor. The guards
  // are restored before returning.
  virtual bool guards_intact(int) { return true; }

  // Cold mode: on the cpu backend the parent itself evicts the tensors and the last-level cache before each call
  // (session/cold_flush.h), where the candidate cannot switch it off. Device backends flush their device's caches
  // in prepare_call, after their uploads (which warm the caches): in the worker, so trusted only as far as the
  // worker is (docs/threat-model.md).
  virtual void prepare_call() = 0;
  virtual void begin_call() = 0;
  // Inside the timed region after kwb_run returns: a call is finished only when all work it started is.
  virtual void finish_call() = 0;
  virtual CallDeviceInfo collect_call() = 0;
};

template <class B>
CallPath bind_call_path(B* backend) {
  static_assert(std::is_final_v<B>, "a backend class is final, so that its calls bind without a vtable");
  CallPath p;
  p.self = backend;
  p.host_memory = backend->host_memory();
  p.upload = [](Backend* b, int id, const void* host, size_t n) { static_cast<B*>(b)->upload(id, host, n); };
  p.download = [](Backend* b, int id, void* host, size_t n) { static_cast<B*>(b)->download(id, host, n); };
  p.prepare_call = [](Backend* b) { static_cast<B*>(b)->prepare_call(); };
  p.begin_call = [](Backend* b) { static_cast<B*>(b)->begin_call(); };
  p.finish_call = [](Backend* b) { static_cast<B*>(b)->finish_call(); };
  return p;
}

// Throws Error(ExitCode::unavailable) naming what is missing (no OpenCL platform, no CUDA device, a kwb built
// without the backend).
std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options);

// One per backend file; make_backend dispatches.
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options);
std::unique_ptr<Backend> make_opencl_backend(const BackendOptions& options);
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);

}  // namespace kwb
