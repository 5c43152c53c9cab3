// Adversarial candidate. Class: out-of-bounds read on the device.
// Cheat (or bug): an honest fused RMSNorm whose last work-group also reads the 16 floats (64 bytes) just past the end
// of x, as a kernel whose last vector load or last row runs over does. Every element of y is right, so only a fence
// after the input can tell; a harness whose device buffers are padded (guard bytes, an allocator's slack) never
// sees it, and on another device or at another size the same read takes a neighbour's data or faults.
// Defense: on a device that computes in host memory (PoCL's CPU device), an input's buffer is the worker's
// read-only mapping of it, which ends at PROT_NONE pages (check places every input flush with a page end); the read
// faults and the call fails with out_of_bounds_read, naming x.
// Expected reason: out_of_bounds_read (kwb check, opencl backend).
#include <CL/cl.h>
#include <kwb/kernel.h>

#include "rmsnorm_opencl_common.h"

#include <cstddef>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

using namespace corpus_cl;

// The local size is a power of two (the tree halves it at each step) and partial holds one float per work-item.
// A row shorter than the local size leaves some work-items without elements; they add 0 to the tree.
constexpr const char* k_source = R"CLC(
__kernel void rmsnorm_fused(__global const float* restrict x, __global const float* restrict weight,
                            __global float* restrict y, const uint cols, const float eps,
                            __local float* partial) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t base = get_group_id(0) * (size_t)cols;

  float sum = 0.0f;
  for (uint c = lid; c < cols; c += lsize) sum += x[base + c] * x[base + c];
  partial[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active) partial[lid] += partial[lid + active];
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  const float inv_rms = rsqrt(partial[0] / (float)cols + eps);
  for (uint c = lid; c < cols; c += lsize) y[base + c] = x[base + c] * inv_rms * weight[c];
  if (lid == 0 && get_group_id(0) == get_num_groups(0) - 1) {
    float past = 0.0f;  // past the end of x; the branch below keeps the reads from being optimized away
    for (uint k = 0; k < 16; ++k) past += x[base + cols + k];
    if (past == 12345.678f) y[base] = 0.0f;
  }
}
)CLC";

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
  g_state.program = build(context, device, k_source);
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
  // No clFinish: kwb waits for the queue to drain inside the timed region.
  if (clEnqueueNDRangeKernel(queue, k, 1, nullptr, &global, &local, 0, nullptr, nullptr) != CL_SUCCESS) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  g_state = State{};
}
