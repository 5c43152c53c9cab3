// LayerNorm, reference optimized opencl implementation: one kernel, one work-group per row, nothing else.
//
//   layernorm_fused  each work-item sums a strided slice of its row, the work-group adds the partial sums in a tree
//                    in local memory: the mean. The same again for the squared deviations from it: the variance
//                    (the two-pass form, never E[x^2] - E[x]^2). Then each work-item writes its slice of
//                    y[r, :] = (x[r, :] - mean) * (1 / sqrt(var + eps)) * weight + bias
//
// Compared with the seven-launch baseline it launches once, reads x three times (the second and third reads hit the
// cache the first one filled) and writes y once, and never writes or re-reads a temporary. Every sum stays in float:
// a work-item adds at most ceil(cols / local size) terms and the tree adds the partial sums pairwise, so the rounding
// error is smaller than that of the sequential sums the tolerance is derived from.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string_view>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// The local size is a power of two (the tree halves it at each step) and partial holds one float per work-item.
// A row shorter than the local size leaves some work-items without elements; they add 0 to the tree. group_sum
// ends with a barrier, so partial can be reused for the next sum.
constexpr const char* k_source = R"CLC(
float group_sum(float v, __local float* partial, const uint lid, const uint lsize) {
  partial[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active) partial[lid] += partial[lid + active];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float total = partial[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}

__kernel void layernorm_fused(__global const float* restrict x, __global const float* restrict weight,
                              __global const float* restrict bias, __global float* restrict y, const uint cols,
                              const float eps, __local float* partial) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t base = get_group_id(0) * (size_t)cols;

  float sum = 0.0f;
  for (uint c = lid; c < cols; c += lsize) sum += x[base + c];
  const float mean = group_sum(sum, partial, lid, lsize) / (float)cols;

  float sq = 0.0f;
  for (uint c = lid; c < cols; c += lsize) sq += (x[base + c] - mean) * (x[base + c] - mean);
  const float var = group_sum(sq, partial, lid, lsize) / (float)cols;

  const float inv_std = rsqrt(var + eps);
  for (uint c = lid; c < cols; c += lsize) y[base + c] = (x[base + c] - mean) * inv_std * weight[c] + bias[c];
}
)CLC";

// Wide enough for a 4096-element row to give each work-item 16 elements, narrow enough for any OpenCL device.
constexpr size_t k_max_local = 256;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;  // largest power of two <= k_max_local that the kernel may use on this device
};
State g_state;

// The OpenCL C source built for `device`; on failure the build log goes to stderr and the result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "layernorm: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "layernorm: clBuildProgram failed (%d):\n%s\n", err, log.data());
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

// The smallest power of two that covers a row, capped at the device limit: short rows (700 x 5) get small
// work-groups instead of 256 work-items of which 251 idle.
size_t local_size_for(int64_t cols, size_t max_local) {
  size_t local = 1;
  while (local < max_local && static_cast<int64_t>(local) < cols) local *= 2;
  return local;
}

// The call's tensors, found by name and checked against the task signature: x [rows, cols], weight [cols] and
// bias [cols] in, y [rows, cols] out, all f32, compact row-major, OpenCL buffers. Anything else is refused rather
// than guessed at.
struct Layernorm {
  cl_mem x;
  cl_mem weight;
  cl_mem bias;
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

std::optional<Layernorm> unpack(const kwb_call& call) {
  const DLTensor* x = find(call.inputs, call.input_names, call.num_inputs, "x");
  const DLTensor* weight = find(call.inputs, call.input_names, call.num_inputs, "weight");
  const DLTensor* bias = find(call.inputs, call.input_names, call.num_inputs, "bias");
  const DLTensor* y = find(call.outputs, call.output_names, call.num_outputs, "y");
  if (x == nullptr || weight == nullptr || bias == nullptr || y == nullptr) return std::nullopt;
  if (!is_compact_opencl_f32(*x, 2) || !is_compact_opencl_f32(*weight, 1) || !is_compact_opencl_f32(*bias, 1) ||
      !is_compact_opencl_f32(*y, 2)) {
    return std::nullopt;
  }
  if (weight->shape[0] != x->shape[1] || bias->shape[0] != x->shape[1] || y->shape[0] != x->shape[0] ||
      y->shape[1] != x->shape[1]) {
    return std::nullopt;
  }
  const float eps = static_cast<float>(kwb_scalar_or(&call, "eps", 1e-5));
  return Layernorm{static_cast<cl_mem>(x->data), static_cast<cl_mem>(weight->data), static_cast<cl_mem>(bias->data),
                   static_cast<cl_mem>(y->data), x->shape[0], x->shape[1], eps};
}

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
  g_state.kernel = clCreateKernel(g_state.program, "layernorm_fused", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  return 0;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Layernorm> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0 || p->cols == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uint cols = static_cast<cl_uint>(p->cols);
  const size_t local = local_size_for(p->cols, g_state.max_local);
  const size_t global = static_cast<size_t>(p->rows) * local;
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->weight);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->bias);
  err |= clSetKernelArg(k, 3, sizeof(cl_mem), &p->y);
  err |= clSetKernelArg(k, 4, sizeof cols, &cols);
  err |= clSetKernelArg(k, 5, sizeof p->eps, &p->eps);
  err |= clSetKernelArg(k, 6, local * sizeof(float), nullptr);
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
