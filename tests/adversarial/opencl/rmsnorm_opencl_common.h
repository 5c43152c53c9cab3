// Shared by the OpenCL corpus candidates (tests/adversarial/opencl/*.cpp): the honest fused RMSNorm kernel, its
// build, its work-group sizes and the call unpacked from its tensors, so that each candidate holds only its cheat.
// Header-only, in the candidates' own folder, which declares it in kwb.files (a build reads only declared files).
#pragma once

#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string_view>
#include <vector>

namespace corpus_cl {

// The local size is a power of two (the tree halves it at each step) and partial holds one float per work-item.
// A row shorter than the local size leaves some work-items without elements; they add 0 to the tree.
constexpr const char* k_fused_source = R"CLC(
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
}
)CLC";

// Wide enough for a 4096-element row to give each work-item 16 elements, narrow enough for any OpenCL device.
constexpr size_t k_max_local = 256;

// The OpenCL C source built for `device`; on failure the build log goes to stderr and the result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "rmsnorm: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "rmsnorm: clBuildProgram failed (%d):\n%s\n", err, log.data());
    clReleaseProgram(program);
    return nullptr;
  }
  return program;
}

// The largest power of two <= k_max_local within both the kernel's and the device's work-group limits (PoCL's
// CPU device allows 4096, a GPU typically 256 to 1024).
std::optional<size_t> max_local_size(cl_kernel kernel, cl_device_id device) {
  size_t kernel_limit = 0;
  if (clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kernel_limit, &kernel_limit,
                               nullptr) != CL_SUCCESS) {
    return std::nullopt;
  }
  size_t item_sizes[3] = {};
  if (clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof item_sizes, item_sizes, nullptr) !=
      CL_SUCCESS) {
    return std::nullopt;
  }
  size_t local = k_max_local;
  while (local > 1 && (local > kernel_limit || local > item_sizes[0])) local /= 2;
  return local;
}

// The smallest power of two that covers a row, capped at the device limit: short rows (612 x 7) get small
// work-groups instead of 256 work-items of which 249 idle.
size_t local_size_for(int64_t cols, size_t max_local) {
  size_t local = 1;
  while (local < max_local && static_cast<int64_t>(local) < cols) local *= 2;
  return local;
}

// The call's tensors, found by name and checked against the task signature: x [rows, cols] and weight [cols] in,
// y [rows, cols] out, all f32, compact row-major, OpenCL buffers. Anything else is refused rather than guessed at.
struct Rmsnorm {
  cl_mem x;
  cl_mem weight;
  cl_mem y;
  int64_t rows;
  int64_t cols;
  float eps;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl_f32(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > UINT32_MAX) return false;  // the kernel indexes a row with a uint
  }
  if (t.strides == nullptr) return true;  // DLPack: NULL strides mean compact row-major
  int64_t expected = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;  // a size-1 axis may have any stride
    expected *= t.shape[d];
  }
  return true;
}

const DLTensor* find(const DLTensor* tensors, const char* const* names, int32_t count, std::string_view name) {
  for (int32_t i = 0; i < count; ++i) {
    if (names[i] != nullptr && name == names[i]) return &tensors[i];
  }
  return nullptr;
}

std::optional<Rmsnorm> unpack(const kwb_call& call) {
  const DLTensor* x = find(call.inputs, call.input_names, call.num_inputs, "x");
  const DLTensor* weight = find(call.inputs, call.input_names, call.num_inputs, "weight");
  const DLTensor* y = find(call.outputs, call.output_names, call.num_outputs, "y");
  if (x == nullptr || weight == nullptr || y == nullptr) return std::nullopt;
  if (!is_compact_opencl_f32(*x, 2) || !is_compact_opencl_f32(*weight, 1) || !is_compact_opencl_f32(*y, 2)) {
    return std::nullopt;
  }
  if (weight->shape[0] != x->shape[1] || y->shape[0] != x->shape[0] || y->shape[1] != x->shape[1]) {
    return std::nullopt;
  }
  return Rmsnorm{static_cast<cl_mem>(x->data), static_cast<cl_mem>(weight->data), static_cast<cl_mem>(y->data),
                 x->shape[0], x->shape[1], static_cast<float>(kwb_scalar_or(&call, "eps", 1e-6))};
}

// The honest fused kernel, built once (kwb_setup) and launched per call (kwb_run), for candidates whose cheat lies
// elsewhere. setup returns kwb_setup's code: 1 not OpenCL, 2 the program does not build, 3 no kernel or limits.
struct Fused {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;

  int setup(const kwb_context* ctx) {
    if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
    const auto device = static_cast<cl_device_id>(ctx->device);
    program = build(static_cast<cl_context>(ctx->device_context), device, k_fused_source);
    if (program == nullptr) return 2;
    cl_int err = CL_SUCCESS;
    kernel = clCreateKernel(program, "rmsnorm_fused", &err);
    if (err != CL_SUCCESS) return 3;
    const std::optional<size_t> local = max_local_size(kernel, device);
    if (!local) return 3;
    max_local = *local;
    return 0;
  }

  // 0, or 3 when OpenCL refuses an argument or the launch.
  int launch(const Rmsnorm& p, cl_command_queue queue) {
    if (p.rows == 0 || p.cols == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
    const cl_uint cols = static_cast<cl_uint>(p.cols);
    const size_t local = local_size_for(p.cols, max_local);
    const size_t global = static_cast<size_t>(p.rows) * local;
    cl_int err = clSetKernelArg(kernel, 0, sizeof(cl_mem), &p.x);
    err |= clSetKernelArg(kernel, 1, sizeof(cl_mem), &p.weight);
    err |= clSetKernelArg(kernel, 2, sizeof(cl_mem), &p.y);
    err |= clSetKernelArg(kernel, 3, sizeof cols, &cols);
    err |= clSetKernelArg(kernel, 4, sizeof p.eps, &p.eps);
    err |= clSetKernelArg(kernel, 5, local * sizeof(float), nullptr);
    if (err != CL_SUCCESS) return 3;
    return clEnqueueNDRangeKernel(queue, kernel, 1, nullptr, &global, &local, 0, nullptr, nullptr) == CL_SUCCESS ? 0
                                                                                                                : 3;
  }

  void release() {
    if (kernel != nullptr) clReleaseKernel(kernel);
    if (program != nullptr) clReleaseProgram(program);
    *this = Fused{};
  }
};

}  // namespace corpus_cl
