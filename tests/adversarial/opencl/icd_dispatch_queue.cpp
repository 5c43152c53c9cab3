// Adversarial candidate. Class: work on a queue created through the ICD dispatch table (issue 15, class 11).
// Cheat: an honest fused RMSNorm, except that kwb_setup creates a command queue of its own without naming any
// OpenCL function: every cl_* object starts with a pointer to its driver's ICD dispatch table, and calling
// clCreateCommandQueueWithProperties from that table skips every exported name a harness could interpose. kwb_run
// enqueues a one-byte fill on call->stream (a legal command, traced like any other) and the kernel on the private
// queue, waiting on that fill, then returns without waiting. A harness that finishes only the queues it saw stops
// its timer when the fill is done; on PoCL with one thread the kernel then runs before the harness's read-back (same
// thread, queued earlier), so the outputs are complete and right and the kernel's time escapes the window.
// Defense: before the implementation is loaded, the worker points the driver's dispatch-table entries for queue
// creation and enqueues at its own wrappers (and takes its own functions from the table's original entries, so
// nothing the implementation writes there reaches kwb's synchronization). The queue is therefore seen, finished
// inside the timer, and the enqueue on it is reported.
// Expected reason: work_off_queue (kwb check, opencl backend).
#include <CL/cl.h>
#include <CL/cl_icd.h>
#include <kwb/kernel.h>

#include "rmsnorm_opencl_common.h"

#include <cstddef>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

using namespace corpus_cl;

// What kwb_setup prepares for every call, including the private queue the cheat runs on.
struct State {
  const cl_icd_dispatch* table = nullptr;
  cl_command_queue own_queue = nullptr;
  cl_mem scratch = nullptr;  // what the fill on call->stream writes
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;  // largest power of two <= k_max_local that the kernel may use on this device
};
State g_state;

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// private queue, the scratch buffer or the kernel cannot be created, or the kernel cannot be queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  cl_int err = CL_SUCCESS;
  // The driver's own table, reached through the context: no exported name is called.
  const cl_icd_dispatch* table = *reinterpret_cast<const cl_icd_dispatch* const*>(context);
  g_state.table = table;
  g_state.own_queue = table->clCreateCommandQueueWithProperties(context, device, nullptr, &err);
  if (err != CL_SUCCESS) return 3;
  g_state.scratch = clCreateBuffer(context, CL_MEM_READ_WRITE, 64, nullptr, &err);
  if (err != CL_SUCCESS) return 3;
  g_state.program = build(context, device, k_fused_source);
  if (g_state.program == nullptr) return 2;
  g_state.kernel = clCreateKernel(g_state.program, "rmsnorm_fused", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  return 0;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0 || p->cols == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const cl_uint cols = static_cast<cl_uint>(p->cols);
  const size_t local = local_size_for(p->cols, g_state.max_local);
  const size_t global = static_cast<size_t>(p->rows) * local;
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->weight);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->y);
  err |= clSetKernelArg(k, 3, sizeof cols, &cols);
  err |= clSetKernelArg(k, 4, sizeof p->eps, &p->eps);
  err |= clSetKernelArg(k, 5, local * sizeof(float), nullptr);
  if (err != CL_SUCCESS) return 3;
  // The cheat: a legal fill on call->stream, then the kernel on the private queue behind it, enqueued through the
  // table; nothing waits for the kernel.
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uchar zero = 0;
  cl_event filled = nullptr;
  if (clEnqueueFillBuffer(queue, g_state.scratch, &zero, 1, 0, 1, 0, nullptr, &filled) != CL_SUCCESS) return 3;
  const cl_int rc =
      g_state.table->clEnqueueNDRangeKernel(g_state.own_queue, k, 1, nullptr, &global, &local, 1, &filled, nullptr);
  clReleaseEvent(filled);
  if (rc != CL_SUCCESS) return 3;
  return g_state.table->clFlush(g_state.own_queue) == CL_SUCCESS ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  if (g_state.own_queue != nullptr) clReleaseCommandQueue(g_state.own_queue);
  if (g_state.scratch != nullptr) clReleaseMemObject(g_state.scratch);
  g_state = State{};
}
