// Adversarial candidate. Class: rewriting the OpenCL driver's ICD dispatch table (issue 15, class 11).
// Cheat: an honest fused RMSNorm whose kwb_setup rewrites two entries of the driver's dispatch table, which every
// cl_* object points to and which PoCL keeps in writable memory: clFinish becomes a function that waits for
// nothing, and clGetEventProfilingInfo one that reports every timestamp as 0. A harness whose OpenCL calls go through
// the ICD loader (which calls through that table) then stops its timer before the kernel has run, its blocking
// read-back still gets the right output, and the call's device time reads 0 ns, which contradicts nothing.
// Defense: the worker takes its own OpenCL functions from the driver's table before the implementation is loaded,
// keeps them on its sealed page and never calls through the loader or the table again, so the rewrite reaches only
// the implementation's own calls; and it compares the table with what it left there around every call, so the
// rewrite itself is reported.
// Expected reason: sandbox_violation (kwb check, opencl backend).
#include <CL/cl.h>
#include <CL/cl_icd.h>
#include <kwb/kernel.h>

#include "rmsnorm_opencl_common.h"

#include <cstddef>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The stand-ins: a clFinish that waits for nothing, and a profiling query whose every timestamp is 0 (so a call's
// device time is 0 ns, never longer than the host's window).
cl_int CL_API_CALL fake_finish(cl_command_queue) { return CL_SUCCESS; }
cl_int CL_API_CALL fake_profiling_info(cl_event, cl_profiling_info, size_t size, void* value, size_t* size_ret) {
  if (value != nullptr && size >= sizeof(cl_ulong)) *static_cast<cl_ulong*>(value) = 0;
  if (size_ret != nullptr) *size_ret = sizeof(cl_ulong);
  return CL_SUCCESS;
}

// The table every object of the driver points to, reached through the context.
void patch(cl_context context) {
  auto* table = *reinterpret_cast<cl_icd_dispatch* const*>(context);
  table->clFinish = &fake_finish;
  table->clGetEventProfilingInfo = &fake_profiling_info;
}

}  // namespace

namespace {

using namespace corpus_cl;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;  // largest power of two <= k_max_local that the kernel may use on this device
};
State g_state;

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// kernel cannot be created or queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(context, device, k_fused_source);
  if (g_state.program == nullptr) return 2;
  cl_int err = CL_SUCCESS;
  g_state.kernel = clCreateKernel(g_state.program, "rmsnorm_fused", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  patch(context);
  return 0;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0 || p->cols == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
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
  // No clFinish: kwb waits for the queue to drain inside the timed region.
  if (clEnqueueNDRangeKernel(queue, k, 1, nullptr, &global, &local, 0, nullptr, nullptr) != CL_SUCCESS) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  g_state = State{};
}
