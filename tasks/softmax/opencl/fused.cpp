// Softmax, reference optimized opencl implementation: one kernel, one work-group per row, nothing else.
//
//   softmax_fused  pass 1: each work-item runs the online normalizer of Milakov & Gimelshein ("Online normalizer
//                  calculation for softmax", 2018) over a strided slice of its row: a running max m and a running
//                  sum d of exp(x - m), d rescaled by exp(m_old - m_new) when an element raises m. The work-group
//                  combines the (m, d) pairs in a tree in local memory into the row's max M and D = sum exp(x - M).
//                  pass 2: each work-item writes its slice of y = exp(x - M) * (1 / D).
//
// Compared with the five-kernel baseline it launches once instead of five times, reads x twice and writes y once,
// and never writes or re-reads a temporary (the baseline sweeps two rows*cols scratch buffers). The second read of
// a row hits the cache the first read filled. Every sum stays in float: a work-item adds at most
// ceil(cols / local size) terms, each rescale and each tree step adds a few u, and the tree combines the partial
// sums pairwise, so the rounding error stays below that of the sequential sum the tolerance is derived from.
//
// -inf entries (masked logits) are skipped: they contribute exp(-inf) = 0, and a work-item whose slice has only
// -inf so far keeps m = -inf, d = 0 instead of computing exp(-inf - -inf) = NaN, the classic pitfall of the online
// form; the tree likewise gives a side with m = -inf no weight. A row that is entirely -inf gives NaN, as
// torch.softmax and the oracle do.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// The local size is a power of two (the tree halves it at each step); part_max and part_sum hold one float per
// work-item. A row shorter than the local size leaves some work-items without elements; they enter the tree as
// (m, d) = (-inf, 0), which carries no weight.
constexpr const char* k_source = R"CLC(
__kernel void softmax_fused(__global const float* restrict x, __global float* restrict y, const uint cols,
                            __local float* part_max, __local float* part_sum) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t base = get_group_id(0) * (size_t)cols;

  // Pass 1: online max and sum over this work-item's slice.
  float m = -INFINITY;
  float d = 0.0f;
  for (uint c = lid; c < cols; c += lsize) {
    const float v = x[base + c];
    if (v == -INFINITY) continue;  // a masked logit: exp(-inf) = 0, and m may still be -inf
    if (v > m) {
      d = d * exp(m - v) + 1.0f;
      m = v;
    } else {
      d += exp(v - m);
    }
  }
  part_max[lid] = m;
  part_sum[lid] = d;
  barrier(CLK_LOCAL_MEM_FENCE);

  // Tree: (m1, d1) + (m2, d2) = (M, d1 exp(m1 - M) + d2 exp(m2 - M)), M = max(m1, m2).
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active) {
      const float m1 = part_max[lid];
      const float m2 = part_max[lid + active];
      const float mx = fmax(m1, m2);
      const float d1 = m1 == -INFINITY ? 0.0f : part_sum[lid] * exp(m1 - mx);
      const float d2 = m2 == -INFINITY ? 0.0f : part_sum[lid + active] * exp(m2 - mx);
      part_max[lid] = mx;
      part_sum[lid] = d1 + d2;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float row_max = part_max[0];
  const float inv_sum = 1.0f / part_sum[0];

  // Pass 2: normalize the same slice.
  for (uint j = lid; j < cols; j += lsize) y[base + j] = exp(x[base + j] - row_max) * inv_sum;
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
    std::fprintf(stderr, "softmax: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "softmax: clBuildProgram failed (%d):\n%s\n", err, log.data());
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

// The call's tensors, checked against the task signature: x [rows, cols] in, y [rows, cols] out, both f32,
// compact row-major, OpenCL buffers. Anything else is refused rather than guessed at.
struct Softmax {
  cl_mem x;
  cl_mem y;
  int64_t rows;
  int64_t cols;
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

std::optional<Softmax> unpack(const kwb_call& call) {
  if (call.num_inputs != 1 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& y = call.outputs[0];
  if (!is_compact_opencl_f32(x, 2) || !is_compact_opencl_f32(y, 2)) return std::nullopt;
  if (y.shape[0] != x.shape[0] || y.shape[1] != x.shape[1]) return std::nullopt;
  return Softmax{static_cast<cl_mem>(x.data), static_cast<cl_mem>(y.data), x.shape[0], x.shape[1]};
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
  g_state.kernel = clCreateKernel(g_state.program, "softmax_fused", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  return 0;
}

// Returns 1 when the call does not match the task signature (or a row is empty), 3 when OpenCL refuses an argument
// or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  if (p->rows == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uint cols = static_cast<cl_uint>(p->cols);
  const size_t local = local_size_for(p->cols, g_state.max_local);
  const size_t global = static_cast<size_t>(p->rows) * local;
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->y);
  err |= clSetKernelArg(k, 2, sizeof cols, &cols);
  err |= clSetKernelArg(k, 3, local * sizeof(float), nullptr);
  err |= clSetKernelArg(k, 4, local * sizeof(float), nullptr);
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
