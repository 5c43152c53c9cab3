// Adversarial candidate. Class: work off the timed queue, finished before return.
// Cheat: the same private-queue RMSNorm as other_queue.cpp, but kwb_run calls clFinish on its own queue before
// returning, so every result has landed when kwb reads y and the kernel's time is inside kwb_run, hence timed. It
// is still not allowed: the rule is one queue, call->stream, with no exception for work that happens to be finished
// (the same code one clFinish away is the unfinished cheat, and commands on a queue of its own are not ordered with
// anything kwb or a caller enqueues on call->stream).
// Defense: as for other_queue.cpp, the worker's OpenCL bookkeeping sees an enqueue during kwb_run on a queue other
// than call->stream; the outputs, which are correct, do not matter.
// Expected reason: work_off_queue (kwb check, opencl backend).
#include <CL/cl.h>
#include <kwb/kernel.h>

#include "rmsnorm_opencl_common.h"

#include <cstddef>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

using namespace corpus_cl;

// What kwb_setup prepares for every call, including the private queue the cheat runs on.
struct State {
  cl_command_queue own_queue = nullptr;
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;  // largest power of two <= k_max_local that the kernel may use on this device
};
State g_state;

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// private queue or the kernel cannot be created, or the kernel cannot be queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  cl_int err = CL_SUCCESS;
  g_state.own_queue = clCreateCommandQueueWithProperties(context, device, nullptr, &err);  // in order, like kwb's
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
  // The private queue, not call->stream, and a wait for it: the result has landed before kwb_run returns.
  if (clEnqueueNDRangeKernel(g_state.own_queue, k, 1, nullptr, &global, &local, 0, nullptr, nullptr) != CL_SUCCESS) {
    return 3;
  }
  return clFinish(g_state.own_queue) == CL_SUCCESS ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  if (g_state.own_queue != nullptr) clReleaseCommandQueue(g_state.own_queue);
  g_state = State{};
}
