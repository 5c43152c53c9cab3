// Adversarial candidate. Class: work after return, from a thread of its own.
// Cheat: kwb_run starts a detached thread and returns at once; the thread enqueues the fused RMSNorm on
// call->stream a moment later, after the timer has stopped, hoping to land before the harness reads y back.
// Defense: the task allows one thread, and on OpenCL the worker's sandbox holds the implementation to it (PoCL's own
// threads start with the context, before the sandbox): the thread's clone is a denied system call. Were threads
// allowed, the enqueue would still be seen: the worker counts every command enqueued while no call is running.
// Expected reason: sandbox_violation (kwb check, opencl backend).
#include <CL/cl.h>
#include <kwb/kernel.h>

#include "rmsnorm_opencl_common.h"

#include <cstddef>
#include <chrono>
#include <thread>
#include <optional>

KWB_CANDIDATE_ABI

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
  // The launch leaves with a thread of its own, a moment after kwb_run has returned.
  std::thread([queue, k, global, local]() {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    clEnqueueNDRangeKernel(queue, k, 1, nullptr, &global, &local, 0, nullptr, nullptr);
  }).detach();
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  g_state = State{};
}
