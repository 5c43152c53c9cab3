// Softmax, baseline opencl implementation: the textbook composition of five element-wise and reduction kernels, the
// way an eager framework runs `e = (x - x.amax(-1, keepdim=True)).exp(); y = e / e.sum(-1, keepdim=True)` on a
// device (the same five passes as cpu/baseline.cpp).
//
//   1. sm_row_max   m = max(x, last axis)       (rows scratch buffer; one work-group per row, tree in local memory)
//   2. sm_sub_max   t = x - m, m broadcast      (rows*cols scratch buffer)
//   3. sm_exp       e = exp(t)                  (rows*cols scratch buffer)
//   4. sm_row_sum   s = sum(e, last axis)       (rows scratch buffer; one work-group per row, tree in local memory)
//   5. sm_divide    y = e / s, s broadcast      (into the output)
//
// Deliberately unfused: five launches on the call's queue, each a full sweep over its operand, so a profiler sees
// five kernels and two rows*cols temporaries written and read back. The scratch buffers are created on the first
// call of a shape and kept (grown, never shrunk) for later calls, as a framework's caching allocator would. It is
// the "before" that the fused reference (opencl/fused.cpp) is measured against.
//
// Accuracy: OpenCL C's exp is within 3 ulp (full profile), one more than the ~2 u per term the tolerance allows for
// expf; each term's error is still dominated by the rounding of x - m (up to 104 u), and the sum is a strided
// sequence plus a pairwise tree, whose bound is below the sequential one task.toml derives rtol from.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// Element-wise kernels take the element count n: their global size is rounded up to a whole number of work-groups,
// so the last group has work-items past the end. The two row reductions use a power-of-two local size, partial
// holding one float per work-item; a work-item past the row's end contributes the operation's identity.
constexpr const char* k_source = R"CLC(
__kernel void sm_row_max(__global const float* restrict x, __global float* restrict m, const uint cols,
                         __local float* partial) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t row = get_group_id(0);
  const size_t base = row * cols;

  float v = -INFINITY;
  for (uint c = lid; c < cols; c += lsize) v = x[base + c] > v ? x[base + c] : v;
  partial[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active && partial[lid + active] > partial[lid]) partial[lid] = partial[lid + active];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) m[row] = partial[0];
}

__kernel void sm_sub_max(__global const float* restrict x, __global const float* restrict m,
                         __global float* restrict t, const uint cols, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) t[i] = x[i] - m[i / cols];
}

__kernel void sm_exp(__global const float* restrict t, __global float* restrict e, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) e[i] = exp(t[i]);
}

__kernel void sm_row_sum(__global const float* restrict e, __global float* restrict s, const uint cols,
                         __local float* partial) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t row = get_group_id(0);
  const size_t base = row * cols;

  float sum = 0.0f;
  for (uint c = lid; c < cols; c += lsize) sum += e[base + c];
  partial[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active) partial[lid] += partial[lid + active];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) s[row] = partial[0];
}

__kernel void sm_divide(__global const float* restrict e, __global const float* restrict s,
                        __global float* restrict y, const uint cols, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) y[i] = e[i] / s[i / cols];
}
)CLC";

// The five kernels, in launch order.
enum Step { k_row_max, k_sub_max, k_exp, k_row_sum, k_divide, k_steps };
constexpr const char* k_names[k_steps] = {"sm_row_max", "sm_sub_max", "sm_exp", "sm_row_sum", "sm_divide"};

// The reductions' width: wide enough for a 4096-element row to give each work-item 16 elements, narrow enough for
// any OpenCL device. The element-wise kernels use the same size.
constexpr size_t k_max_local = 256;

// What kwb_setup prepares, plus the scratch buffers the calls grow.
struct State {
  cl_context context = nullptr;
  cl_program program = nullptr;
  cl_kernel kernels[k_steps] = {};
  size_t max_local[k_steps] = {};  // per kernel: largest power of two <= k_max_local it may use on this device
  cl_mem m = nullptr;              // per row: the maximum
  size_t m_bytes = 0;
  cl_mem t = nullptr;              // x - m, rows*cols floats
  size_t t_bytes = 0;
  cl_mem e = nullptr;              // exp(t), rows*cols floats
  size_t e_bytes = 0;
  cl_mem s = nullptr;              // per row: the sum of e
  size_t s_bytes = 0;
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

// `buffer` holding at least `bytes`: kept when it is big enough, replaced otherwise. False when OpenCL refuses.
bool ensure_scratch(cl_mem& buffer, size_t& capacity, size_t bytes) {
  if (buffer != nullptr && capacity >= bytes) return true;
  if (buffer != nullptr) clReleaseMemObject(buffer);  // commands still using it keep it alive until they finish
  cl_int err = CL_SUCCESS;
  buffer = clCreateBuffer(g_state.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
  capacity = err == CL_SUCCESS ? bytes : 0;
  if (err != CL_SUCCESS) buffer = nullptr;
  return err == CL_SUCCESS;
}

// Enqueues `step` over `items` work-items (rounded up to whole work-groups of `local`) on `queue`.
bool launch(cl_command_queue queue, Step step, size_t items, size_t local) {
  const size_t global = (items + local - 1) / local * local;
  return clEnqueueNDRangeKernel(queue, g_state.kernels[step], 1, nullptr, &global, &local, 0, nullptr, nullptr) ==
         CL_SUCCESS;
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
    if (t.shape[d] < 0 || t.shape[d] > UINT32_MAX) return false;  // the kernels take cols as uint
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

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when a
// kernel cannot be created or queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  g_state.context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(g_state.context, device, k_source);
  if (g_state.program == nullptr) return 2;
  for (int step = 0; step < k_steps; ++step) {
    cl_int err = CL_SUCCESS;
    g_state.kernels[step] = clCreateKernel(g_state.program, k_names[step], &err);
    if (err != CL_SUCCESS) return 3;
    const std::optional<size_t> max_local = max_local_size(g_state.kernels[step], device);
    if (!max_local) return 3;
    g_state.max_local[step] = *max_local;
  }
  return 0;
}

// Returns 1 when the call does not match the task signature (or a row is empty), 2 when a scratch buffer cannot be
// created, 3 when OpenCL refuses an argument or a launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  if (p->rows == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const size_t rows = static_cast<size_t>(p->rows);
  const cl_ulong n = static_cast<cl_ulong>(p->rows * p->cols);
  const cl_uint cols_u = static_cast<cl_uint>(p->cols);
  if (!ensure_scratch(g_state.m, g_state.m_bytes, rows * sizeof(float)) ||
      !ensure_scratch(g_state.t, g_state.t_bytes, n * sizeof(float)) ||
      !ensure_scratch(g_state.e, g_state.e_bytes, n * sizeof(float)) ||
      !ensure_scratch(g_state.s, g_state.s_bytes, rows * sizeof(float))) {
    return 2;
  }
  const size_t max_local = local_size_for(p->cols, g_state.max_local[k_row_max]);
  const size_t sum_local = local_size_for(p->cols, g_state.max_local[k_row_sum]);
  cl_kernel* k = g_state.kernels;

  cl_int err = clSetKernelArg(k[k_row_max], 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k[k_row_max], 1, sizeof(cl_mem), &g_state.m);
  err |= clSetKernelArg(k[k_row_max], 2, sizeof cols_u, &cols_u);
  err |= clSetKernelArg(k[k_row_max], 3, max_local * sizeof(float), nullptr);

  err |= clSetKernelArg(k[k_sub_max], 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k[k_sub_max], 1, sizeof(cl_mem), &g_state.m);
  err |= clSetKernelArg(k[k_sub_max], 2, sizeof(cl_mem), &g_state.t);
  err |= clSetKernelArg(k[k_sub_max], 3, sizeof cols_u, &cols_u);
  err |= clSetKernelArg(k[k_sub_max], 4, sizeof n, &n);

  err |= clSetKernelArg(k[k_exp], 0, sizeof(cl_mem), &g_state.t);
  err |= clSetKernelArg(k[k_exp], 1, sizeof(cl_mem), &g_state.e);
  err |= clSetKernelArg(k[k_exp], 2, sizeof n, &n);

  err |= clSetKernelArg(k[k_row_sum], 0, sizeof(cl_mem), &g_state.e);
  err |= clSetKernelArg(k[k_row_sum], 1, sizeof(cl_mem), &g_state.s);
  err |= clSetKernelArg(k[k_row_sum], 2, sizeof cols_u, &cols_u);
  err |= clSetKernelArg(k[k_row_sum], 3, sum_local * sizeof(float), nullptr);

  err |= clSetKernelArg(k[k_divide], 0, sizeof(cl_mem), &g_state.e);
  err |= clSetKernelArg(k[k_divide], 1, sizeof(cl_mem), &g_state.s);
  err |= clSetKernelArg(k[k_divide], 2, sizeof(cl_mem), &p->y);
  err |= clSetKernelArg(k[k_divide], 3, sizeof cols_u, &cols_u);
  err |= clSetKernelArg(k[k_divide], 4, sizeof n, &n);
  if (err != CL_SUCCESS) return 3;

  // The queue is in order, so each step sees the previous one's writes. No clFinish: kwb waits for the queue to
  // drain inside the timed region.
  const bool ok = launch(queue, k_row_max, rows * max_local, max_local) &&
                  launch(queue, k_sub_max, n, g_state.max_local[k_sub_max]) &&
                  launch(queue, k_exp, n, g_state.max_local[k_exp]) &&
                  launch(queue, k_row_sum, rows * sum_local, sum_local) &&
                  launch(queue, k_divide, n, g_state.max_local[k_divide]);
  return ok ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (cl_kernel kernel : g_state.kernels) {
    if (kernel != nullptr) clReleaseKernel(kernel);
  }
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  for (cl_mem buffer : {g_state.m, g_state.t, g_state.e, g_state.s}) {
    if (buffer != nullptr) clReleaseMemObject(buffer);
  }
  g_state = State{};
}
