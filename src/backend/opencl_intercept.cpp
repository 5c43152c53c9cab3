// The exported OpenCL wrappers (opencl_intercept.h). Linked into the worker executables only, exported with
// --export-dynamic-symbol (src/CMakeLists.txt). Without tracing and on the call's own queue, a wrapper costs one
// relaxed check of two fields before the real call.
#include "backend/opencl_intercept.h"

#include <algorithm>

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
                                                    size_t pattern_size, size_t offset, size_t size,
                                                    cl_uint num_events, const cl_event* wait_list, cl_event* event) {
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
