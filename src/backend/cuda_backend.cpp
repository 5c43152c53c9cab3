// cuda: one device (KWB_CUDA_DEVICE, an ordinal, default 0), its primary context and one non-blocking stream, all
// created before the implementation is loaded. Tensors are device buffers (cudaMalloc) mirroring the parent's host
// buffers: uploaded before every call and read back after it, outside the timer. A call's time is the host clock
// from before a start event on the call's stream to after cudaDeviceSynchronize, so work the implementation put on
// any other stream of the device is finished inside it; the events also give the device's own time for the call.
// In trace mode CUPTI's activity API lists every kernel, copy and fill the call ran, and on which stream.
// docs/backends.md.
//
// Neither the CUDA runtime nor CUPTI is linked (cuda_api.h); the trace's buffers are cuda_trace.h's.
#include "backend/backend.h"
#include "backend/cuda_api.h"
#include "backend/cuda_trace.h"
#include "util/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>

#ifdef KWB_CUDA_BACKEND
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <utility>
#include <vector>
#endif

namespace kwb {

#ifdef KWB_CUDA_BACKEND

namespace {

using cuda::cuda_runtime;
using cuda::cuda_version_text;
using cuda::CudaRuntime;
using cuda::Cupti;
using cuda::cupti_library;
using cuda::k_cuda_version;
using cuda::k_traced_kinds;
using cuda::kernel_name;
using cuda::on_buffer_completed;
using cuda::on_buffer_requested;
using cuda::Owned;
using cuda::throw_cuda_error;
using cuda::throw_cupti_error;
using cuda::trace_sink;
using cuda::TracedCommand;
using cuda::TraceSink;

// "580.95.05" from /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX ... Kernel Module  580.95.05  ..."):
// the kernel driver's own version, which cudaDriverGetVersion (the CUDA version it supports) does not give.
std::string kernel_driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  std::istringstream words(line);
  for (std::string w; words >> w;) {
    if (w.find('.') != std::string::npos && w.find_first_not_of("0123456789.") == std::string::npos) return w;
  }
  return "";
}

// Why cudaGetDeviceCount found nothing, and what to do about it.
std::string no_device_hint(cudaError_t rc) {
  switch (rc) {
    case cudaErrorNoDevice:
      return "no NVIDIA GPU is visible to this process: check nvidia-smi, and CUDA_VISIBLE_DEVICES if it is set";
    case cudaErrorInsufficientDriver:
      return fmt::format(
          "no driver or no GPU on this machine: the NVIDIA driver (libcuda.so.1) is missing or is "
          "older than CUDA {} needs (install or update it; nvidia-smi shows the installed driver)",
          k_cuda_version);
    default:
      return "check that the NVIDIA driver is loaded (nvidia-smi) and that /dev/nvidia* can be opened";
  }
}

// The ordinal in KWB_CUDA_DEVICE (default 0), checked against the devices this process can see.
int device_ordinal(int devices) {
  const char* v = std::getenv("KWB_CUDA_DEVICE");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || errno != 0 || n < 0 || n > INT_MAX) {
    throw UsageError(fmt::format("KWB_CUDA_DEVICE='{}': expected a device ordinal such as 0", v));
  }
  if (n >= devices) {
    // A selection the machine cannot satisfy is the user's to fix (64), as on opencl; "no device at all" is 69.
    throw UsageError(
        fmt::format("KWB_CUDA_DEVICE={}, but this process sees {} CUDA device(s), 0 to {} (nvidia-smi "
                    "lists them; CUDA_VISIBLE_DEVICES renumbers them)",
                    n, devices, devices - 1));
  }
  return static_cast<int>(n);
}

// ---- the backend --------------------------------------------------------------------------------------------------

class CudaBackend final : public Backend {
public:
  explicit CudaBackend(const BackendOptions& options) : m_options(options) {
    init_runtime();
    int devices = 0;
    const cudaError_t counted = cuda().cudaGetDeviceCount(&devices);
    if (counted != cudaSuccess || devices == 0) {
      throw Error(
          ExitCode::unavailable,
          counted != cudaSuccess
              ? fmt::format("no CUDA device: cudaGetDeviceCount returned {} ({}); {}", cuda().cudaGetErrorName(counted),
                            cuda().cudaGetErrorString(counted), no_device_hint(counted))
              : "no CUDA device: cudaGetDeviceCount found 0 devices; " + no_device_hint(cudaErrorNoDevice));
    }
    m_ordinal = device_ordinal(devices);

    // Before the context exists, so that CUPTI sees it being created and every launch in it.
    if (m_options.trace) start_tracing();

    // Creates the device's primary context (CUDA 12 and later): the context the implementation's runtime calls
    // use too, since they go through this same library.
    if (const cudaError_t rc = cuda().cudaSetDevice(m_ordinal); rc != cudaSuccess) {
      throw Error(ExitCode::unavailable,
                  fmt::format("CUDA device {} cannot be used: cudaSetDevice returned {} ({}) (nvidia-smi shows "
                              "whether it is in an exclusive compute mode, busy or faulty)",
                              m_ordinal, cuda().cudaGetErrorName(rc), cuda().cudaGetErrorString(rc)));
    }
    m_description = describe();

    // Non-blocking: the call's stream does not wait for, nor make wait, the legacy default stream, which an
    // implementation might use on its own (it then shows as off-stream work in the trace).
    cudaStream_t stream = nullptr;
    KWB_CUDA(cuda().cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    m_stream = Owned<cudaStream_t>(stream, cuda().cudaStreamDestroy);
    // Default flags: timing enabled (cudaEventDisableTiming would make cudaEventElapsedTime fail).
    for (Owned<cudaEvent_t>* event : {&m_start, &m_stop}) {
      cudaEvent_t e = nullptr;
      KWB_CUDA(cuda().cudaEventCreate(&e));
      *event = Owned<cudaEvent_t>(e, cuda().cudaEventDestroy);
    }
    if (m_options.trace) {
      const Cupti& cupti = cupti_library();
      KWB_CUPTI(cupti.cuptiGetStreamIdEx(nullptr, m_stream.get(), 0, &m_trace_stream));
      KWB_CUPTI(cupti.cuptiGetDeviceId(nullptr, &m_trace_device));
    }
    if (m_options.cold) {
      // Twice the L2, as nvbench's l2flush does: writing it evicts every line the previous call left there.
      int l2 = 0;
      KWB_CUDA(cuda().cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, m_ordinal));
      m_flush_bytes = 2 * static_cast<size_t>(std::max(l2, 1));
      void* p = nullptr;
      KWB_CUDA(cuda().cudaMalloc(&p, m_flush_bytes));
      m_flush = Owned<void*>(p, cuda().cudaFree);
    }
  }

  ~CudaBackend() override {
    // The worker ends with _exit after teardown; this matters only for a backend closed early (a probe). Tracing
    // stops with it, and the buffers CUPTI still holds come back to the pool.
    if (m_options.trace) {
      const Cupti& cupti = cupti_library();
      for (CUpti_ActivityKind kind : k_traced_kinds) (void)cupti.cuptiActivityDisable(kind);
      (void)cupti.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
  }
  CudaBackend(const CudaBackend&) = delete;  // owns the stream, the events and the device buffers
  CudaBackend& operator=(const CudaBackend&) = delete;

  BackendKind id() const override { return BackendKind::cuda; }
  CallPath call_path() override { return bind_call_path(this); }
  kwb_backend kind() const override { return KWB_BACKEND_CUDA; }
  DLDevice device() const override { return DLDevice{kDLCUDA, m_ordinal}; }
  std::string description() const override { return m_description; }
  void* stream() const override { return m_stream.get(); }
  void fill_context(kwb_context& ctx) const override {
    ctx.backend = KWB_BACKEND_CUDA;
    ctx.device_context = nullptr;               // the primary context is current on the calling thread
    ctx.device = const_cast<int*>(&m_ordinal);  // read-only for the implementation; the ABI's field is void*
    ctx.stream = m_stream.get();
  }

  RuntimeSandboxNeeds sandbox_needs() const override {
    RuntimeSandboxNeeds n;
    // The run phase's allow-list was never exercised against the CUDA driver (ioctls on /dev/nvidia*, mmap of
    // device memory and doorbells, the driver's and CUPTI's threads); the load phase's deny-list stays in force.
    n.strict_run_filter = false;
    n.threads = true;
    n.spawn = false;
    // The driver reserves a unified address space of tens to hundreds of GiB when it starts, before the sandbox:
    // an RLIMIT_AS sized for the task would leave no room for any later mapping.
    n.unlimited_address_space = true;
    // The driver holds descriptors of /dev/nvidia* (and may open more as allocations grow); 64 is too tight a guess
    // for a driver nobody here has watched.
    n.open_files = 1024;
    // The driver's own nodes only (/dev/nvidiactl, /dev/nvidia<N>, /dev/nvidia-uvm[-tools], /dev/nvidia-modeset,
    // /dev/nvidia-caps/...), listed now, before the sandbox: granting all of /dev would let an implementation write
    // /dev/kmsg, or files in /dev/shm that outlive the worker.
    n.device_paths = {"/dev/null"};
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
      if (entry.path().filename().string().starts_with("nvidia")) n.device_paths.push_back(entry.path().string());
    }
    n.read_paths = {"/proc", "/sys", "/usr", "/lib", "/lib64", "/etc", "/dev/zero", "/dev/urandom"};
    for (const std::string& dir : {std::string(KWB_CUDA_LIBRARY_DIR), std::string(KWB_CUPTI_LIBRARY_DIR),
                                   cuda().directory, m_options.trace ? cupti_library().directory : std::string()}) {
      if (!dir.empty() && std::find(n.read_paths.begin(), n.read_paths.end(), dir) == n.read_paths.end()) {
        n.read_paths.push_back(dir);
      }
    }
    // Nothing to write: the JIT cache is off (init_runtime) and the fatbinaries kwb builds carry sm_90 SASS.
    return n;
  }

  bool host_memory() const override { return false; }

  // Each tensor sits between two guard regions of a random pattern inside one allocation (a zero-byte tensor still
  // gets an address); guards_intact reads them back after every call. 4 KiB keeps the tensor 256-byte aligned,
  // as cudaMalloc's own pointers are.
  void* create_buffer(int id, size_t nbytes) override {
    m_buffers.erase(id);
    if (m_guard.empty()) {
      m_guard.resize(4096);
      std::random_device rd;
      for (unsigned char& c : m_guard) c = static_cast<unsigned char>(rd());
    }
    void* p = nullptr;
    KWB_CUDA(cuda().cudaMalloc(&p, std::max<size_t>(nbytes, 1) + 2 * m_guard.size()));
    DeviceBuffer b{Owned<void*>(p, cuda().cudaFree), nbytes};
    write_guards(b);
    void* tensor = b.tensor(m_guard.size());
    m_buffers.emplace(id, std::move(b));
    return tensor;
  }

  void release_buffer(int id) override { m_buffers.erase(id); }

  bool guards_intact(int id) override {
    const DeviceBuffer& b = device_buffer(id);
    const size_t g = m_guard.size();
    m_scratch.resize(2 * g);
    auto* base = static_cast<unsigned char*>(b.whole.get());
    KWB_CUDA(cuda().cudaMemcpyAsync(m_scratch.data(), base, g, cudaMemcpyDeviceToHost, m_stream.get()));
    KWB_CUDA(cuda().cudaMemcpyAsync(m_scratch.data() + g, base + g + std::max<size_t>(b.nbytes, 1), g,
                                    cudaMemcpyDeviceToHost, m_stream.get()));
    KWB_CUDA(cuda().cudaStreamSynchronize(m_stream.get()));
    const bool intact = std::memcmp(m_scratch.data(), m_guard.data(), g) == 0 &&
                        std::memcmp(m_scratch.data() + g, m_guard.data(), g) == 0;
    if (!intact) write_guards(b);
    return intact;
  }

  // Copies on the call's stream, finished before returning. Not cudaMemcpy: from pageable memory it may return
  // before the DMA has landed, and it is ordered on the legacy stream, which the non-blocking call stream ignores.
  void upload(int id, const void* host, size_t nbytes) override {
    if (nbytes == 0) return;
    KWB_CUDA(cuda().cudaMemcpyAsync(buffer(id), host, nbytes, cudaMemcpyHostToDevice, m_stream.get()));
    KWB_CUDA(cuda().cudaStreamSynchronize(m_stream.get()));
  }

  void download(int id, void* host, size_t nbytes) override {
    if (nbytes == 0) return;
    KWB_CUDA(cuda().cudaMemcpyAsync(host, buffer(id), nbytes, cudaMemcpyDeviceToHost, m_stream.get()));
    KWB_CUDA(cuda().cudaStreamSynchronize(m_stream.get()));
  }

  bool matches(int id, const void* host, size_t nbytes) override {
    m_scratch.resize(nbytes);
    download(id, m_scratch.data(), nbytes);
    return nbytes == 0 || std::memcmp(m_scratch.data(), host, nbytes) == 0;
  }

  void prepare_call() override {
    if (m_options.cold) {
      ++m_flush_value;
      KWB_CUDA(cuda().cudaMemsetAsync(m_flush.get(), m_flush_value, m_flush_bytes, m_stream.get()));
    }
    // Nothing of kwb's (uploads, the flush) and nothing left from before (kwb_setup's work) runs when the timer
    // starts.
    KWB_CUDA(cuda().cudaDeviceSynchronize());
    if (m_options.trace) discard_trace();
  }

  void begin_call() override { KWB_CUDA(cuda().cudaEventRecord(m_start.get(), m_stream.get())); }

  void finish_call() override {
    KWB_CUDA(cuda().cudaEventRecord(m_stop.get(), m_stream.get()));
    // Device-wide, not the stream: kernels the implementation put on streams of its own finish inside the timer
    // too. A fault of the implementation's kernels (an illegal address, say) surfaces here.
    KWB_CUDA(cuda().cudaDeviceSynchronize());
    // The call's records are taken now, before kwb reads the outputs back (its own copies would join them
    // otherwise); tracing is never on in timed calls, so this costs no timed sample anything.
    if (m_options.trace) {
      m_call_commands.clear();
      take_trace(m_call_commands, m_call_lost);
    }
  }

  CallDeviceInfo collect_call() override {
    CallDeviceInfo info;
    // The call's stream only: work on other streams is inside the host time but may fall outside these events.
    float ms = 0.0f;
    KWB_CUDA(cuda().cudaEventElapsedTime(&ms, m_start.get(), m_stop.get()));
    info.device_ns = std::llround(static_cast<double>(ms) * 1e6);
    // Without tracing nothing sees which streams the call used: off-stream work is still finished inside the timer
    // (finish_call synchronizes the device), it just cannot be reported. traced = false says the list is absent.
    if (!m_options.trace) return info;

    std::vector<TracedCommand> commands;
    commands.swap(m_call_commands);
    const uint64_t lost = std::exchange(m_call_lost, 0);
    info.traced = lost == 0;  // a dropped record makes the list incomplete, and it must not pass for complete

    struct OffStream {
      uint32_t device = 0;
      uint32_t stream = 0;
      uint64_t count = 0;
      bool kernels_only = true;
      std::vector<std::string> names;
    };
    std::vector<OffStream> off;
    for (const TracedCommand& c : commands) {
      KernelRecord k;
      k.name = c.kernel ? kernel_name(c.name) : c.name;
      // Stream IDs are unique within a context only: work on another device is off-stream whatever its ID.
      k.on_call_stream = c.device == m_trace_device && c.stream == m_trace_stream;
      // start = end = 0: CUPTI could not time this command.
      if ((c.start != 0 || c.end != 0) && c.end >= c.start) k.device_ns = static_cast<int64_t>(c.end - c.start);
      if (!k.on_call_stream) {
        auto it = std::find_if(off.begin(), off.end(),
                               [&](const OffStream& o) { return o.device == c.device && o.stream == c.stream; });
        if (it == off.end()) {
          it = off.emplace(off.end());
          it->device = c.device;
          it->stream = c.stream;
        }
        ++it->count;
        it->kernels_only = it->kernels_only && c.kernel;
        if (std::find(it->names.begin(), it->names.end(), k.name) == it->names.end()) it->names.push_back(k.name);
        ++info.off_stream_commands;
      }
      info.kernels.push_back(std::move(k));
    }
    // "2 kernels on stream 13, not the call's stream 7: rmsnorm_fused"
    std::vector<std::string> parts;
    for (const OffStream& o : off) {
      const std::string where = o.device == m_trace_device ? fmt::format("stream {}", o.stream)
                                                           : fmt::format("stream {} of device {}", o.stream, o.device);
      parts.push_back(fmt::format("{} {}{} on {}, not the call's stream {}: {}", o.count,
                                  o.kernels_only ? "kernel" : "command", o.count == 1 ? "" : "s", where, m_trace_stream,
                                  fmt::join(o.names, ", ")));
    }
    // Anything recorded since finish_call took the call's records, other than kwb's own copies on the call's stream
    // (the read-back of outputs and guards, a guard rewrite), was started after kwb_run returned: a kernel or fill
    // from a thread the implementation left behind, say. (A late copy on the call's stream looks like kwb's own.)
    std::vector<TracedCommand> after;
    uint64_t lost_after = 0;
    take_trace(after, lost_after);
    std::vector<std::string> late;
    for (const TracedCommand& c : after) {
      const bool kwb_copy = !c.kernel && c.name == "memcpy" && c.device == m_trace_device && c.stream == m_trace_stream;
      if (!kwb_copy) late.push_back(c.kernel ? kernel_name(c.name) : c.name);
    }
    if (!late.empty()) {
      info.off_stream_commands += late.size();
      parts.push_back(
          fmt::format("{} command(s) started after kwb_run had returned: {}", late.size(), fmt::join(late, ", ")));
    }
    info.off_stream_detail = fmt::format("{}", fmt::join(parts, "; "));
    return info;
  }

private:
  // Always the sealed table at its fixed address, never a reference kept in this (writable) object.
  static const CudaRuntime& cuda() { return cuda_runtime(); }

  // Runs before the first CUDA call of the process (the driver reads its environment once, at initialization).
  static const CudaRuntime& init_runtime() {
    // The JIT cache would be written under $HOME, which the sandbox does not grant. kwb builds every
    // implementation with SASS for the GPU (sm_90 on H100/H200), so nothing is JIT-compiled there; a newer GPU
    // would compile the embedded PTX in every process instead of caching it, which is slower but correct.
    ::setenv("CUDA_CACHE_DISABLE", "1", 1);
    // Modules load when the implementation's fatbinary registers (inside dlopen, untimed), not lazily at a kernel's
    // first launch inside kwb_run, where the loading's own copies would land in the first call's trace and time.
    ::setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    return cuda_runtime();
  }

  // Registers the buffer callbacks and enables the record kinds for the backend's lifetime. Records are never
  // switched on and off around a call: instead prepare_call discards everything recorded before it (kwb's uploads,
  // the cache flush, kwb_setup's work) and collect_call takes everything recorded since, so the window is exactly
  // the call, and kwb's downloads after it fall into the next discard. A correlation-ID filter would miss work the
  // implementation starts from a thread of its own.
  void start_tracing() {
    try {
      const Cupti& cupti = cupti_library();
      TraceSink& s = trace_sink();
      {
        std::lock_guard lock(s.mutex);
        while (s.storage.size() < TraceSink::k_buffers) {
          constexpr size_t words = TraceSink::k_buffer_bytes / sizeof(uint64_t);
          s.storage.push_back(std::make_unique_for_overwrite<uint64_t[]>(words));
          s.free_buffers.push_back(reinterpret_cast<uint8_t*>(s.storage.back().get()));
        }
      }
      if (!s.registered) {
        KWB_CUPTI(cupti.cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed));
        s.registered = true;
      }
      for (CUpti_ActivityKind kind : k_traced_kinds) KWB_CUPTI(cupti.cuptiActivityEnable(kind));
    } catch (const InternalError& e) {
      throw Error(ExitCode::unavailable,
                  fmt::format("kernel tracing (CUPTI) cannot start: {} (is a profiler such as nsys or ncu attached "
                              "to kwb? CUPTI serves one client per process)",
                              e.what()));
    }
  }

  // Forced flushes, here and in take_trace: a default flush (flag 0) keeps back every buffer that holds a record
  // CUPTI has not completed, and a kernel of the call would then silently be missing from its list; after the
  // device synchronization every command is finished, and a record CUPTI could not time shows as device_ns = -1.
  void discard_trace() {
    KWB_CUPTI(cupti_library().cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    TraceSink& s = trace_sink();
    std::lock_guard lock(s.mutex);
    s.commands.clear();
    s.lost = 0;
  }

  void take_trace(std::vector<TracedCommand>& commands, uint64_t& lost) {
    KWB_CUPTI(cupti_library().cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    TraceSink& s = trace_sink();
    std::lock_guard lock(s.mutex);
    commands.swap(s.commands);
    lost = std::exchange(s.lost, 0);
  }

  // "CUDA 13.0 / NVIDIA H200 (sm_90, 132 SMs, 60 MiB L2) / driver 580.95.05 (CUDA 13.0)"
  std::string describe() const {
    int runtime = 0, driver = 0, major = 0, minor = 0, sms = 0, l2 = 0;
    KWB_CUDA(cuda().cudaRuntimeGetVersion(&runtime));
    KWB_CUDA(cuda().cudaDriverGetVersion(&driver));
    KWB_CUDA(cuda().cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, m_ordinal));
    KWB_CUDA(cuda().cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, m_ordinal));
    KWB_CUDA(cuda().cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, m_ordinal));
    KWB_CUDA(cuda().cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, m_ordinal));
    cudaDeviceProp props{};
    KWB_CUDA(cuda().cudaGetDeviceProperties(&props, m_ordinal));
    const std::string module = kernel_driver_version();
    return fmt::format("CUDA {} / {} (sm_{}{}, {} SMs, {:g} MiB L2) / driver {}", cuda_version_text(runtime),
                       props.name, major, minor, sms, l2 / 1048576.0,
                       module.empty() ? "CUDA " + cuda_version_text(driver)
                                      : fmt::format("{} (CUDA {})", module, cuda_version_text(driver)));
  }

  struct DeviceBuffer {
    Owned<void*> whole;  // guard + tensor + guard
    size_t nbytes = 0;
    void* tensor(size_t guard) const { return static_cast<unsigned char*>(whole.get()) + guard; }
  };

  const DeviceBuffer& device_buffer(int id) const {
    auto it = m_buffers.find(id);
    if (it == m_buffers.end()) throw InternalError(fmt::format("cuda: no device buffer {}", id));
    return it->second;
  }

  void* buffer(int id) const { return device_buffer(id).tensor(m_guard.size()); }

  void write_guards(const DeviceBuffer& b) {
    const size_t g = m_guard.size();
    auto* base = static_cast<unsigned char*>(b.whole.get());
    KWB_CUDA(cuda().cudaMemcpyAsync(base, m_guard.data(), g, cudaMemcpyHostToDevice, m_stream.get()));
    KWB_CUDA(cuda().cudaMemcpyAsync(base + g + std::max<size_t>(b.nbytes, 1), m_guard.data(), g, cudaMemcpyHostToDevice,
                                    m_stream.get()));
    KWB_CUDA(cuda().cudaStreamSynchronize(m_stream.get()));
  }

  BackendOptions m_options;
  int m_ordinal = 0;
  std::string m_description;
  // Declared before the buffers, so destroyed after them.
  Owned<cudaStream_t> m_stream;
  Owned<cudaEvent_t> m_start;
  Owned<cudaEvent_t> m_stop;
  Owned<void*> m_flush;
  size_t m_flush_bytes = 0;
  int m_flush_value = 0;
  std::map<int, DeviceBuffer> m_buffers;
  std::vector<unsigned char> m_guard;
  std::vector<unsigned char> m_scratch;
  std::vector<TracedCommand> m_call_commands;  // the last call's records, taken in finish_call
  uint64_t m_call_lost = 0;
  uint32_t m_trace_stream = 0;  // CUPTI's ID of m_stream, as the records name streams
  uint32_t m_trace_device = 0;  // CUPTI's ID of the device
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

#else

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
#ifdef KWB_HAVE_CUDA
  throw Error(ExitCode::unavailable,
              fmt::format("this kwb was built against CUDA {}.{}, and its cuda backend needs CUDA 13 or later "
                          "(install a CUDA 13 toolkit and rebuild kwb)",
                          CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10));
#else
  throw Error(ExitCode::unavailable,
              "this kwb was built without the CUDA toolkit (install it, e.g. under /usr/local/cuda with nvcc on PATH, "
              "and rebuild: cmake --preset dev --fresh && cmake --build --preset dev)");
#endif
}

#endif

}  // namespace kwb
