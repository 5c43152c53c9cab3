// The exported OpenCL wrappers (opencl_intercept.h). Linked into the worker executables only, exported with
// --export-dynamic-symbol (src/CMakeLists.txt). Without tracing and on the call's own queue, a wrapper costs one
// relaxed check of two fields before the real call.
#include "backend/opencl_intercept.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace kwb::opencl {

InterceptState& intercept_state() {
  static InterceptState state;
  return state;
}

namespace {

const Api& real() {
  // The wrappers can only be reached by an implementation the worker loaded after opening the loader, so the
  // table exists; failing here would be a bug in the worker.
  const Api* a = api();
  if (a == nullptr) std::abort();
  return *a;
}

std::string kernel_name(cl_kernel kernel) {
  char name[256] = {};
  size_t size = 0;
  if (real().GetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof name - 1, name, &size) != CL_SUCCESS) {
    return "(unnamed kernel)";
  }
  return name;
}

// Whether this enqueue must be recorded, and into which event the real call reports. `user_event` is the caller's
// event slot (may be null); with tracing a private event is created when the caller asked for none.
struct Recording {
  bool active = false;
  cl_event own = nullptr;
  cl_event* slot = nullptr;
};

Recording begin_record(cl_command_queue queue, cl_event* user_event) {
  InterceptState& s = intercept_state();
  Recording r;
  r.slot = user_event;
  if (!s.armed) {
    // Setup (and teardown) may enqueue; once calls have started, nothing may run between them. kwb's own transfers
    // use the real functions and never come here.
    if (s.calls_started) {
      std::lock_guard lock(s.mutex);
      ++s.between_calls;
    }
    return r;
  }
  if (!s.trace && queue == s.call_queue) return r;
  r.active = true;
  if (s.trace && r.slot == nullptr) r.slot = &r.own;
  return r;
}

void end_record(Recording& r, cl_int rc, cl_command_queue queue, std::string name) {
  if (!r.active || rc != CL_SUCCESS) return;
  InterceptState& s = intercept_state();
  cl_event ev = nullptr;
  if (r.slot != nullptr && *r.slot != nullptr) {
    ev = *r.slot;
    if (r.slot != &r.own) real().RetainEvent(ev);  // the caller owns its event and may release it
  }
  std::lock_guard lock(s.mutex);
  if (queue != s.call_queue) ++s.off_queue;
  s.commands.push_back({std::move(name), queue, ev});
}

// A queue the implementation created: retained, so that it stays valid for finish_call whatever the
// implementation releases.
cl_command_queue remember(cl_command_queue q) {
  if (q == nullptr) return q;
  InterceptState& s = intercept_state();
  real().RetainCommandQueue(q);
  std::lock_guard lock(s.mutex);
  s.created.push_back(q);
  return q;
}

}  // namespace

}  // namespace kwb::opencl

using kwb::opencl::begin_record;
using kwb::opencl::end_record;
using kwb::opencl::real;

extern "C" {

CL_API_ENTRY cl_command_queue CL_API_CALL clCreateCommandQueueWithProperties(cl_context context, cl_device_id device,
                                                                             const cl_queue_properties* properties,
                                                                             cl_int* errcode_ret) {
  return kwb::opencl::remember(real().CreateCommandQueueWithProperties(context, device, properties, errcode_ret));
}

CL_API_ENTRY cl_command_queue CL_API_CALL clCreateCommandQueue(cl_context context, cl_device_id device,
                                                               cl_command_queue_properties properties,
                                                               cl_int* errcode_ret) {
  return kwb::opencl::remember(real().CreateCommandQueue(context, device, properties, errcode_ret));
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueNDRangeKernel(cl_command_queue queue, cl_kernel kernel, cl_uint work_dim,
                                                       const size_t* offset, const size_t* global, const size_t* local,
                                                       cl_uint num_events, const cl_event* wait_list, cl_event* event) {
  auto r = begin_record(queue, event);
  const cl_int rc =
      real().EnqueueNDRangeKernel(queue, kernel, work_dim, offset, global, local, num_events, wait_list, r.slot);
  if (r.active) end_record(r, rc, queue, kwb::opencl::kernel_name(kernel));
  return rc;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueTask(cl_command_queue queue, cl_kernel kernel, cl_uint num_events,
                                              const cl_event* wait_list, cl_event* event) {
  auto r = begin_record(queue, event);
  const cl_int rc = real().EnqueueTask(queue, kernel, num_events, wait_list, r.slot);
  if (r.active) end_record(r, rc, queue, kwb::opencl::kernel_name(kernel));
  return rc;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueCopyBuffer(cl_command_queue queue, cl_mem src, cl_mem dst, size_t src_offset,
                                                    size_t dst_offset, size_t size, cl_uint num_events,
                                                    const cl_event* wait_list, cl_event* event) {
  auto r = begin_record(queue, event);
  const cl_int rc =
      real().EnqueueCopyBuffer(queue, src, dst, src_offset, dst_offset, size, num_events, wait_list, r.slot);
  if (r.active) end_record(r, rc, queue, "copy");
  return rc;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueFillBuffer(cl_command_queue queue, cl_mem buffer, const void* pattern,
                                                    size_t pattern_size, size_t offset, size_t size, cl_uint num_events,
                                                    const cl_event* wait_list, cl_event* event) {
  auto r = begin_record(queue, event);
  const cl_int rc =
      real().EnqueueFillBuffer(queue, buffer, pattern, pattern_size, offset, size, num_events, wait_list, r.slot);
  if (r.active) end_record(r, rc, queue, "fill");
  return rc;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueWriteBuffer(cl_command_queue queue, cl_mem buffer, cl_bool blocking,
                                                     size_t offset, size_t size, const void* ptr, cl_uint num_events,
                                                     const cl_event* wait_list, cl_event* event) {
  auto r = begin_record(queue, event);
  const cl_int rc =
      real().EnqueueWriteBuffer(queue, buffer, blocking, offset, size, ptr, num_events, wait_list, r.slot);
  if (r.active) end_record(r, rc, queue, "write");
  return rc;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueReadBuffer(cl_command_queue queue, cl_mem buffer, cl_bool blocking,
                                                    size_t offset, size_t size, void* ptr, cl_uint num_events,
                                                    const cl_event* wait_list, cl_event* event) {
  auto r = begin_record(queue, event);
  const cl_int rc = real().EnqueueReadBuffer(queue, buffer, blocking, offset, size, ptr, num_events, wait_list, r.slot);
  if (r.active) end_record(r, rc, queue, "read");
  return rc;
}

}  // extern "C"

namespace kwb::opencl {

namespace {

// The entries kwb names when one changes: the functions its own work and the wrappers rely on.
struct NamedEntry {
  size_t offset;
  const char* name;
};
#define KWB_ENTRY(f) \
  NamedEntry { offsetof(cl_icd_dispatch, f), #f }
constexpr NamedEntry k_named_entries[] = {
    KWB_ENTRY(clCreateCommandQueue),
    KWB_ENTRY(clCreateCommandQueueWithProperties),
    KWB_ENTRY(clEnqueueNDRangeKernel),
    KWB_ENTRY(clEnqueueTask),
    KWB_ENTRY(clEnqueueCopyBuffer),
    KWB_ENTRY(clEnqueueFillBuffer),
    KWB_ENTRY(clEnqueueWriteBuffer),
    KWB_ENTRY(clEnqueueReadBuffer),
    KWB_ENTRY(clEnqueueMarkerWithWaitList),
    KWB_ENTRY(clFinish),
    KWB_ENTRY(clFlush),
    KWB_ENTRY(clGetEventProfilingInfo),
    KWB_ENTRY(clWaitForEvents),
    KWB_ENTRY(clGetPlatformIDs),
};
#undef KWB_ENTRY

template <typename Entry, typename Fn>
void point(Entry& entry, Fn wrapper) {
  entry = reinterpret_cast<Entry>(reinterpret_cast<void*>(wrapper));
}

}  // namespace

void install_dispatch_wrappers(cl_icd_dispatch& driver) {
  point(driver.clCreateCommandQueue, &::clCreateCommandQueue);
  point(driver.clCreateCommandQueueWithProperties, &::clCreateCommandQueueWithProperties);
  point(driver.clEnqueueNDRangeKernel, &::clEnqueueNDRangeKernel);
  point(driver.clEnqueueTask, &::clEnqueueTask);
  point(driver.clEnqueueCopyBuffer, &::clEnqueueCopyBuffer);
  point(driver.clEnqueueFillBuffer, &::clEnqueueFillBuffer);
  point(driver.clEnqueueWriteBuffer, &::clEnqueueWriteBuffer);
  point(driver.clEnqueueReadBuffer, &::clEnqueueReadBuffer);
  InterceptState& s = intercept_state();
  s.table = &driver;
  std::memcpy(&s.expected, &driver, sizeof driver);
}

std::string dispatch_table_changes() {
  InterceptState& s = intercept_state();
  if (s.table == nullptr || std::memcmp(s.table, &s.expected, sizeof s.expected) == 0) return "";
  const auto* now = reinterpret_cast<const unsigned char*>(s.table);
  const auto* was = reinterpret_cast<const unsigned char*>(&s.expected);
  std::vector<std::string> named;
  size_t changed = 0;
  for (size_t off = 0; off + sizeof(void*) <= sizeof s.expected; off += sizeof(void*)) {
    if (std::memcmp(now + off, was + off, sizeof(void*)) == 0) continue;
    ++changed;
    for (const NamedEntry& e : k_named_entries) {
      if (e.offset == off) named.push_back(e.name);
    }
  }
  std::memcpy(s.table, &s.expected, sizeof s.expected);
  return fmt::format(
      "{} entr{} of the OpenCL driver's dispatch table (which every cl_* object points to) were "
      "rewritten by the implementation{}{}",
      changed, changed == 1 ? "y" : "ies", named.empty() ? "" : ", among them ", fmt::join(named, ", "));
}

}  // namespace kwb::opencl
