// opencl: one platform and device (KWB_OPENCL_PLATFORM / KWB_OPENCL_DEVICE, indices, default 0 and 0), one
// context and one in-order, profiling-enabled queue, created before the implementation is loaded. Tensors are
// cl_mem buffers mirroring the parent's host buffers: uploaded before every call and read back after it, outside
// the timer. A call's time is the host clock from before a start marker to after clFinish of the call's queue and
// of every queue the implementation created; the markers also give the device's own time for the call.
// docs/backends.md.
#include "backend/backend.h"
#include "backend/opencl_api.h"
#include "backend/opencl_intercept.h"
#include "util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace kwb {

namespace {

using opencl::Api;
using opencl::error_name;

#define KWB_CL(call)                                                                                                \
  do {                                                                                                              \
    const cl_int kwb_cl_rc_ = (call);                                                                               \
    if (kwb_cl_rc_ != CL_SUCCESS) {                                                                                 \
      throw InternalError(fmt::format("{} failed: {} ({}:{})", #call, error_name(kwb_cl_rc_), __FILE__, __LINE__)); \
    }                                                                                                               \
  } while (0)

std::string platform_string(const Api& a, cl_platform_id p, cl_platform_info what) {
  char buf[512] = {};
  if (a.GetPlatformInfo(p, what, sizeof buf - 1, buf, nullptr) != CL_SUCCESS) return "?";
  return buf;
}

std::string device_string(const Api& a, cl_device_id d, cl_device_info what) {
  char buf[512] = {};
  if (a.GetDeviceInfo(d, what, sizeof buf - 1, buf, nullptr) != CL_SUCCESS) return "?";
  return buf;
}

unsigned env_index(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  if (*end != '\0' || n > 64) throw UsageError(fmt::format("{}='{}': expected a small index such as 0", name, v));
  return static_cast<unsigned>(n);
}

class OpenClBackend final : public Backend {
public:
  explicit OpenClBackend(const BackendOptions& options) : m_options(options) {
    // PoCL compiles each kernel for its launch configuration at the first launch and keeps the result in its
    // cache; the parent gives every implementation identity a cache directory of its own (never shared with
    // another implementation's workers), and the sandbox lets the runtime write there and nowhere else.
    if (!options.runtime_cache_dir.empty()) ::setenv("POCL_CACHE_DIR", options.runtime_cache_dir.c_str(), 1);
    std::string why;
    if (opencl::api(&why) == nullptr) throw Error(ExitCode::unavailable, "opencl backend unavailable: " + why);
    const Api& a = cl();

    cl_uint platforms = 0;
    cl_int rc = a.GetPlatformIDs(0, nullptr, &platforms);
    if (rc != CL_SUCCESS || platforms == 0) {
      throw Error(ExitCode::unavailable,
                  fmt::format("opencl backend unavailable: no OpenCL platform ({}; the ICD loader found no driver "
                              "in /etc/OpenCL/vendors: install one, e.g. pocl-opencl-icd)",
                              rc == CL_SUCCESS ? "0 platforms" : error_name(rc)));
    }
    const unsigned pi = env_index("KWB_OPENCL_PLATFORM");
    if (pi >= platforms) {
      throw UsageError(fmt::format("KWB_OPENCL_PLATFORM={}: there are {} platform(s)", pi, platforms));
    }
    std::vector<cl_platform_id> ids(platforms);
    KWB_CL(a.GetPlatformIDs(platforms, ids.data(), nullptr));
    const cl_platform_id platform = ids[pi];
    cl_uint devices = 0;
    rc = a.GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &devices);
    if (rc != CL_SUCCESS || devices == 0) {
      throw Error(ExitCode::unavailable, fmt::format("opencl backend unavailable: platform {} has no device", pi));
    }
    const unsigned di = env_index("KWB_OPENCL_DEVICE");
    if (di >= devices) {
      throw UsageError(fmt::format("KWB_OPENCL_DEVICE={}: the platform has {} device(s)", di, devices));
    }
    std::vector<cl_device_id> dev_ids(devices);
    KWB_CL(a.GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, devices, dev_ids.data(), nullptr));
    m_device = dev_ids[di];
    m_description =
        fmt::format("{} / {} / {} / driver {}", platform_string(a, platform, CL_PLATFORM_NAME),
                    device_string(a, m_device, CL_DEVICE_NAME), device_string(a, m_device, CL_DEVICE_VERSION),
                    device_string(a, m_device, CL_DRIVER_VERSION));

    m_context = a.CreateContext(nullptr, 1, &m_device, nullptr, nullptr, &rc);
    if (m_context == nullptr) throw Error(ExitCode::unavailable, "clCreateContext failed: " + error_name(rc));
    // Profiling on the call's queue gives the start/end markers device timestamps. It is on in every mode, so
    // check, profile and timed calls see the same queue.
    const cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    m_queue = a.CreateCommandQueueWithProperties(m_context, m_device, props, &rc);
    if (m_queue == nullptr) {
      throw Error(ExitCode::unavailable, "clCreateCommandQueueWithProperties failed: " + error_name(rc));
    }
    adopt_driver(platform);
    m_inputs_in_place = device_reads_host_memory_in_place();
    auto& s = opencl::intercept_state();
    s.call_queue = m_queue;
    s.trace = options.trace;
  }

  ~OpenClBackend() override {
    // The worker exits with _exit after teardown; releasing here matters only for a backend destroyed early.
    const Api& a = cl();
    for (auto& [id, b] : m_buffers) {
      a.ReleaseMemObject(b.view);
      if (b.whole != nullptr) a.ReleaseMemObject(b.whole);
    }
    if (m_flush != nullptr) a.ReleaseMemObject(m_flush);
    if (m_queue != nullptr) a.ReleaseCommandQueue(m_queue);
    if (m_context != nullptr) a.ReleaseContext(m_context);
  }
  OpenClBackend(const OpenClBackend&) = delete;  // owns the context, the queue and the buffers
  OpenClBackend& operator=(const OpenClBackend&) = delete;

  BackendKind id() const override { return BackendKind::opencl; }
  CallPath call_path() override { return bind_call_path(this); }
  kwb_backend kind() const override { return KWB_BACKEND_OPENCL; }
  DLDevice device() const override { return DLDevice{kDLOpenCL, 0}; }
  std::string description() const override { return m_description; }
  void* stream() const override { return m_queue; }
  void fill_context(kwb_context& ctx) const override {
    ctx.backend = KWB_BACKEND_OPENCL;
    ctx.device_context = m_context;
    ctx.device = m_device;
    ctx.stream = m_queue;
  }

  RuntimeSandboxNeeds sandbox_needs() const override {
    RuntimeSandboxNeeds n;
    // PoCL compiles a kernel for each launch configuration at its first launch, inside kwb_run: clang runs in
    // process, then the system linker is started to make a shared object, which PoCL dlopens (mapped executable).
    n.strict_run_filter = false;
    // PoCL starts its worker threads with the context, before the sandbox; it needs none later (the spawn of the
    // linker is a vfork-style clone, not a thread). So the task's thread limit holds for the implementation.
    n.threads = false;
    n.spawn = true;
    // The linker and the dynamic loader it runs under (rules follow symlinks to the files); nothing else can be
    // executed. PoCL read /proc and /sys when the context was created, before the sandbox; later it needs neither.
    n.read_paths = {"/usr", "/lib", "/lib64", "/etc"};
    n.exec_paths = {"/usr/bin/ld", "/lib64/ld-linux-x86-64.so.2"};
    if (!m_options.runtime_cache_dir.empty()) n.write_paths = {m_options.runtime_cache_dir};
    n.device_paths = {"/dev/null"};
    return n;
  }

  bool host_memory() const override { return false; }

  // Each tensor is a sub-buffer in the middle of a larger buffer: guard bytes before and after it hold a random
  // pattern, checked after every call (guards_intact).
  void* create_buffer(int id, size_t nbytes) override {
    release_buffer(id);
    if (m_guard.empty()) make_guard_pattern();
    const size_t size = std::max<size_t>(nbytes, 1);
    cl_int rc = CL_SUCCESS;
    DeviceBuffer b;
    b.nbytes = nbytes;
    b.whole = cl().CreateBuffer(m_context, CL_MEM_READ_WRITE, size + 2 * m_guard.size(), nullptr, &rc);
    if (b.whole == nullptr) {
      throw InternalError(fmt::format("clCreateBuffer({} bytes) failed: {}", nbytes, error_name(rc)));
    }
    const cl_buffer_region region{m_guard.size(), size};
    b.view = cl().CreateSubBuffer(b.whole, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &rc);
    if (b.view == nullptr) {
      cl().ReleaseMemObject(b.whole);
      throw InternalError(fmt::format("clCreateSubBuffer({} bytes) failed: {}", nbytes, error_name(rc)));
    }
    m_buffers[id] = b;
    write_guards(b);
    return b.view;
  }

  // On a device that computes in host memory (PoCL's CPU device: probed at start, device_reads_host_memory_in_place),
  // an input's buffer is the worker's fenced, read-only mapping itself (CL_MEM_USE_HOST_PTR), where the mapping is
  // aligned to k_in_place_alignment (every input in check and in timing: device backends get no data offsets): an
  // over-read faults on the PROT_NONE pages after it, a write faults on the mapping. Elsewhere, or at an address less
  // aligned, a guarded mirror as for outputs.
  void* create_input_buffer(int id, void* host, size_t nbytes) override {
    if (!m_inputs_in_place || nbytes == 0 || reinterpret_cast<uintptr_t>(host) % k_in_place_alignment != 0) {
      return create_buffer(id, nbytes);
    }
    release_buffer(id);
    cl_int rc = CL_SUCCESS;
    DeviceBuffer b;
    b.nbytes = nbytes;
    b.in_place = true;
    b.view = cl().CreateBuffer(m_context, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, nbytes, host, &rc);
    if (b.view == nullptr) return create_buffer(id, nbytes);
    m_buffers[id] = b;
    return b.view;
  }

  void release_buffer(int id) override {
    if (auto it = m_buffers.find(id); it != m_buffers.end()) {
      cl().ReleaseMemObject(it->second.view);
      if (it->second.whole != nullptr) cl().ReleaseMemObject(it->second.whole);
      m_buffers.erase(it);
    }
  }

  // Not blocking: the parent's buffer stays put until prepare_call finishes the queue, and one wait for all of a
  // call's uploads is less of kwb's own time (and noise) before go than one per tensor. An input used in place holds
  // the bytes already: `host` is its own memory.
  void upload(int id, const void* host, size_t nbytes) override {
    if (nbytes == 0) return;
    const DeviceBuffer& b = buffer(id);
    if (b.in_place) return;
    KWB_CL(cl().EnqueueWriteBuffer(m_queue, b.view, CL_FALSE, 0, nbytes, host, 0, nullptr, nullptr));
  }

  void download(int id, void* host, size_t nbytes) override {
    if (nbytes == 0) return;
    KWB_CL(cl().EnqueueReadBuffer(m_queue, buffer(id).view, CL_TRUE, 0, nbytes, host, 0, nullptr, nullptr));
  }

  bool guards_intact(int id) override {
    const DeviceBuffer& b = buffer(id);
    if (b.in_place) return true;  // fenced by the mapping's PROT_NONE pages instead: a stray access faults
    const size_t g = m_guard.size();
    m_scratch.resize(2 * g);
    KWB_CL(cl().EnqueueReadBuffer(m_queue, b.whole, CL_TRUE, 0, g, m_scratch.data(), 0, nullptr, nullptr));
    KWB_CL(cl().EnqueueReadBuffer(m_queue, b.whole, CL_TRUE, g + std::max<size_t>(b.nbytes, 1), g, m_scratch.data() + g,
                                  0, nullptr, nullptr));
    const bool intact = std::memcmp(m_scratch.data(), m_guard.data(), g) == 0 &&
                        std::memcmp(m_scratch.data() + g, m_guard.data(), g) == 0;
    if (!intact) write_guards(b);
    return intact;
  }

  bool matches(int id, const void* host, size_t nbytes) override {
    // An input used in place is the read-only mapping: a write to it faulted during the call (input_modified).
    if (buffer(id).in_place) return true;
    m_scratch.resize(nbytes);
    download(id, m_scratch.data(), nbytes);
    return nbytes == 0 || std::memcmp(m_scratch.data(), host, nbytes) == 0;
  }

  void prepare_call() override {
    note_table_changes();
    if (m_options.cold) flush_caches();
    // Uploads done: nothing of kwb's is still queued when the timer starts. Every queue the implementation created
    // is finished too, so device work it launched before go is waited for here, in the wall time charged beyond the
    // other arm's (util/cpu_watch.h), not carried into the window half done.
    KWB_CL(cl().Finish(m_queue));
    finish_created_queues();
    auto& s = opencl::intercept_state();
    s.calls_started = true;
    s.armed = true;
  }

  void begin_call() override { KWB_CL(cl().EnqueueMarkerWithWaitList(m_queue, 0, nullptr, &m_begin)); }

  void finish_call() override {
    // kwb_run has returned: from here on, anything the implementation enqueues is work between calls.
    auto& s = opencl::intercept_state();
    s.armed = false;
    KWB_CL(cl().EnqueueMarkerWithWaitList(m_queue, 0, nullptr, &m_end));
    KWB_CL(cl().Finish(m_queue));
    finish_created_queues();
  }

  CallDeviceInfo collect_call() override {
    CallDeviceInfo info;
    note_table_changes();
    info.runtime_tampered = std::exchange(m_table_changes, std::string());
    cl_ulong begin = 0, end = 0;
    if (cl().GetEventProfilingInfo(m_begin, CL_PROFILING_COMMAND_START, sizeof begin, &begin, nullptr) == CL_SUCCESS &&
        cl().GetEventProfilingInfo(m_end, CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr) == CL_SUCCESS &&
        end >= begin) {
      info.device_ns = static_cast<int64_t>(end - begin);
    }
    release(m_begin);
    release(m_end);
    auto& s = opencl::intercept_state();
    std::vector<opencl::Command> commands;
    uint64_t off_queue = 0, between_calls = 0;
    {
      std::lock_guard lock(s.mutex);
      commands.swap(s.commands);
      off_queue = std::exchange(s.off_queue, 0);
      between_calls = std::exchange(s.between_calls, 0);
    }
    info.traced = m_options.trace;
    info.off_stream_commands = off_queue + between_calls;
    std::vector<std::string> off_names;
    for (opencl::Command& c : commands) {
      KernelRecord k;
      k.name = c.name;
      k.on_call_stream = c.queue == m_queue;
      if (c.event != nullptr) {
        cl_ulong t0 = 0, t1 = 0;
        if (cl().GetEventProfilingInfo(c.event, CL_PROFILING_COMMAND_START, sizeof t0, &t0, nullptr) == CL_SUCCESS &&
            cl().GetEventProfilingInfo(c.event, CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr) == CL_SUCCESS &&
            t1 >= t0) {
          k.device_ns = static_cast<int64_t>(t1 - t0);
        }
        cl().ReleaseEvent(c.event);
      }
      if (!k.on_call_stream) off_names.push_back(k.name);
      info.kernels.push_back(std::move(k));
    }
    std::vector<std::string> problems;
    if (!off_names.empty()) {
      problems.push_back(fmt::format("{} command(s) enqueued on a queue other than the call's: {}", off_names.size(),
                                     fmt::join(off_names, ", ")));
    }
    if (between_calls > 0) {
      problems.push_back(
          fmt::format("{} command(s) enqueued while no call was running (after a kwb_run had "
                      "returned)",
                      between_calls));
    }
    info.off_stream_detail = fmt::format("{}", fmt::join(problems, "; "));
    if (!m_options.trace) {
      // Without tracing only off-queue commands were recorded: the list is not the call's complete trace.
      info.kernels.clear();
    }
    return info;
  }

private:
  // The driver's dispatch table: the first word of every object of an ICD driver (cl_icd.h). From here on kwb calls
  // the driver's functions from it, never the loader, and the table's queue and enqueue entries lead to the
  // worker's wrappers (opencl_intercept.h). A driver whose platform, device, context and queue do not share one
  // table is one whose queues kwb could not all see: refused.
  void adopt_driver(cl_platform_id platform) {
    auto table_of = [](const void* object) { return *static_cast<cl_icd_dispatch* const*>(object); };
    cl_icd_dispatch* table = table_of(platform);
    if (table == nullptr || table_of(m_device) != table || table_of(m_context) != table || table_of(m_queue) != table) {
      throw Error(ExitCode::unavailable,
                  "opencl backend unavailable: the driver's platform, device, context and queue do not share one ICD "
                  "dispatch table, so kwb cannot see every queue an implementation creates (docs/backends.md)");
    }
    opencl::adopt_driver_table(*table);
    opencl::install_dispatch_wrappers(*table);
  }

  // A rewrite of the dispatch table, found before or after a call, is reported with the next collect_call.
  void note_table_changes() {
    std::string changes = opencl::dispatch_table_changes();
    if (!changes.empty() && m_table_changes.empty()) m_table_changes = std::move(changes);
  }

  // Always through the sealed table's fixed address (opencl_api.cpp), never a pointer kept in this object.
  static const Api& cl() { return *opencl::api(); }

  struct DeviceBuffer {
    cl_mem whole = nullptr;  // guard + tensor + guard; null for an input used in place
    cl_mem view = nullptr;   // the tensor: what the implementation gets
    size_t nbytes = 0;
    bool in_place = false;  // an input whose buffer is the worker's fenced mapping (create_input_buffer)
  };

  // The alignment an input's mapping needs to be used in place: a cache line, the most any x86 load asks for
  // (AVX-512), and what check's placement of an input flush with its last page keeps.
  static constexpr uintptr_t k_in_place_alignment = 64;

  // Whether a CL_MEM_USE_HOST_PTR buffer is the host memory itself, not a copy the runtime made: a CPU device that
  // shares memory with the host, and a probe that changes the host bytes after the buffer is made and reads the buffer
  // back. (PoCL's CPU device: the driver's allocation is mem_host_ptr.) A copying runtime reads the old bytes.
  bool device_reads_host_memory_in_place() const {
    cl_device_type type = 0;
    cl_bool unified = CL_FALSE;
    if (cl().GetDeviceInfo(m_device, CL_DEVICE_TYPE, sizeof type, &type, nullptr) != CL_SUCCESS ||
        (type & CL_DEVICE_TYPE_CPU) == 0) {
      return false;
    }
    if (cl().GetDeviceInfo(m_device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, nullptr) != CL_SUCCESS ||
        unified != CL_TRUE) {
      return false;
    }
    // At an address aligned to k_in_place_alignment and no more (the device's base alignment is larger, 128 bytes).
    alignas(2 * k_in_place_alignment) std::array<unsigned char, 3 * k_in_place_alignment> memory{};
    const std::span<unsigned char> host(memory.data() + k_in_place_alignment, k_in_place_alignment);
    std::fill(host.begin(), host.end(), 0x11);
    cl_int rc = CL_SUCCESS;
    cl_mem probe = cl().CreateBuffer(m_context, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, host.size(), host.data(), &rc);
    if (probe == nullptr) return false;
    std::fill(host.begin(), host.end(), 0x22);
    std::array<unsigned char, k_in_place_alignment> back{};
    rc = cl().EnqueueReadBuffer(m_queue, probe, CL_TRUE, 0, back.size(), back.data(), 0, nullptr, nullptr);
    cl().ReleaseMemObject(probe);
    return rc == CL_SUCCESS && std::equal(back.begin(), back.end(), host.begin());
  }

  const DeviceBuffer& buffer(int id) const {
    auto it = m_buffers.find(id);
    if (it == m_buffers.end()) throw InternalError(fmt::format("opencl: no device buffer {}", id));
    return it->second;
  }

  // One page of random bytes per worker, at least the device's sub-buffer alignment (CL_DEVICE_MEM_BASE_ADDR_ALIGN,
  // in bits), so that the tensor's sub-buffer starts on an address the device accepts.
  void make_guard_pattern() {
    cl_uint align_bits = 0;
    (void)cl().GetDeviceInfo(m_device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, nullptr);
    m_guard.resize(std::max<size_t>(4096, align_bits / 8));
    std::random_device rd;
    for (unsigned char& c : m_guard) c = static_cast<unsigned char>(rd());
  }

  void write_guards(const DeviceBuffer& b) {
    const size_t g = m_guard.size();
    KWB_CL(cl().EnqueueWriteBuffer(m_queue, b.whole, CL_TRUE, 0, g, m_guard.data(), 0, nullptr, nullptr));
    KWB_CL(cl().EnqueueWriteBuffer(m_queue, b.whole, CL_TRUE, g + std::max<size_t>(b.nbytes, 1), g, m_guard.data(), 0,
                                   nullptr, nullptr));
  }

  // OpenCL has no device-wide synchronization: every queue the implementation created, finished.
  void finish_created_queues() {
    auto& s = opencl::intercept_state();
    std::vector<cl_command_queue> created;
    {
      std::lock_guard lock(s.mutex);
      created = s.created;
    }
    for (cl_command_queue q : created) KWB_CL(cl().Finish(q));
  }

  void release(cl_event& ev) {
    if (ev != nullptr) cl().ReleaseEvent(ev);
    ev = nullptr;
  }

  // Twice the device's global memory cache, written by a fill on the call's queue and finished before the call. The
  // pattern is the largest OpenCL allows (128 bytes): PoCL fills pattern by pattern, and with a 4-byte one a 600 MiB
  // flush (2 x a 300 MiB L3) took 0.25 s per call instead of 0.17 s.
  void flush_caches() {
    if (m_flush == nullptr) {
      cl_ulong cache = 0;
      (void)cl().GetDeviceInfo(m_device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, nullptr);
      m_flush_bytes = cache > 0 ? 2 * static_cast<size_t>(cache) : size_t{64} << 20;
      cl_int rc = CL_SUCCESS;
      m_flush = cl().CreateBuffer(m_context, CL_MEM_READ_WRITE, m_flush_bytes, nullptr, &rc);
      if (m_flush == nullptr) throw InternalError("clCreateBuffer(cache flush buffer) failed: " + error_name(rc));
    }
    ++m_flush_value;
    std::array<cl_uint, 32> pattern{};
    pattern.fill(m_flush_value);
    KWB_CL(cl().EnqueueFillBuffer(m_queue, m_flush, pattern.data(), sizeof pattern, 0, m_flush_bytes, 0, nullptr,
                                  nullptr));
  }

  BackendOptions m_options;
  cl_device_id m_device = nullptr;
  cl_context m_context = nullptr;
  cl_command_queue m_queue = nullptr;
  std::string m_description;
  std::map<int, DeviceBuffer> m_buffers;
  bool m_inputs_in_place = false;  // device_reads_host_memory_in_place, probed once at start
  std::vector<unsigned char> m_guard;
  std::vector<unsigned char> m_scratch;
  cl_event m_begin = nullptr;
  cl_event m_end = nullptr;
  cl_mem m_flush = nullptr;
  size_t m_flush_bytes = 0;
  cl_uint m_flush_value = 0;
  std::string m_table_changes;  // not yet reported
};

}  // namespace

std::unique_ptr<Backend> make_opencl_backend(const BackendOptions& options) {
  return std::make_unique<OpenClBackend>(options);
}

}  // namespace kwb
