// LayerNorm, baseline opencl implementation: the textbook composition of element-wise and reduction kernels, the way
// an eager framework runs `m = x.mean(-1, keepdim=True); t = x - m; v = (t * t).mean(-1, keepdim=True);
// y = t * (v + eps).rsqrt() * w + b` on a device.
//
//   1. ln_row_mean   m = mean(x, last axis)       (rows scratch buffer; one work-group per row, tree in local memory)
//   2. ln_center     t = x - m, m broadcast        (rows*cols scratch buffer)
//   3. ln_square     s = t * t                     (rows*cols scratch buffer)
//   4. ln_row_mean   v = mean(s, last axis)        (rows scratch buffer; the same kernel as step 1)
//   5. ln_rstd       v = 1 / sqrt(v + eps)         (in place)
//   6. ln_normalize  y = t * v, v broadcast        (into the output)
//   7. ln_affine     y = y * weight + bias         (in place, in the output)
//
// Deliberately unfused: seven launches on the call's queue, each a full sweep over its operand, so a profiler sees
// seven kernels, the rows*cols temporaries t and s written and read back, y written and read back, and x read twice.
// The scratch buffers are created on the first call of a shape and kept (grown, never shrunk) for later calls, as a
// framework's caching allocator would. It is the "before" that the fused reference is measured against.
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

// Element-wise kernels take the element count n: their global size is rounded up to a whole number of work-groups,
// so the last group has work-items past the end. ln_row_mean is a power-of-two local size, partial holding one
// float per work-item; a work-item past the end of a short row adds 0 to the tree.
constexpr const char* k_source = R"CLC(
__kernel void ln_row_mean(__global const float* restrict a, __global float* restrict m, const uint cols,
                          __local float* partial) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t row = get_group_id(0);
  const size_t base = row * cols;

  float sum = 0.0f;
  for (uint c = lid; c < cols; c += lsize) sum += a[base + c];
  partial[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active) partial[lid] += partial[lid + active];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) m[row] = partial[0] / (float)cols;
}

__kernel void ln_center(__global const float* restrict x, __global const float* restrict m,
                        __global float* restrict t, const uint cols, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) t[i] = x[i] - m[i / cols];
}

__kernel void ln_square(__global const float* restrict t, __global float* restrict s, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) s[i] = t[i] * t[i];
}

__kernel void ln_rstd(__global float* v, const float eps, const uint rows) {
  const size_t r = get_global_id(0);
  if (r < rows) v[r] = rsqrt(v[r] + eps);
}

__kernel void ln_normalize(__global const float* restrict t, __global const float* restrict v,
                           __global float* restrict y, const uint cols, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) y[i] = t[i] * v[i / cols];
}

__kernel void ln_affine(__global float* restrict y, __global const float* restrict weight,
                        __global const float* restrict bias, const uint cols, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) y[i] = y[i] * weight[i % cols] + bias[i % cols];
}
)CLC";

// The six kernels (ln_row_mean runs twice).
enum Kernel { k_row_mean, k_center, k_square, k_rstd, k_normalize, k_affine, k_kernels };
constexpr const char* k_names[k_kernels] = {"ln_row_mean", "ln_center",    "ln_square",
                                            "ln_rstd",     "ln_normalize", "ln_affine"};

// The reduction's width: wide enough for a 4096-element row to give each work-item 16 elements, narrow enough for
// any OpenCL device. The element-wise kernels use the same size.
constexpr size_t k_max_local = 256;

// What kwb_setup prepares, plus the scratch buffers the calls grow.
struct Scratch {
  cl_mem buffer = nullptr;
  size_t bytes = 0;
};
struct State {
  cl_context context = nullptr;
  cl_program program = nullptr;
  cl_kernel kernels[k_kernels] = {};
  size_t max_local[k_kernels] = {};  // per kernel: largest power of two <= k_max_local it may use on this device
  Scratch t;                         // x - mean, rows*cols floats
  Scratch s;                         // (x - mean)^2, rows*cols floats
  Scratch m;                         // per row: the mean
  Scratch v;                         // per row: the variance, then 1 / sqrt(variance + eps)
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

// `scratch` holding at least `bytes`: kept when it is big enough, replaced otherwise. False when OpenCL refuses.
bool ensure_scratch(Scratch& scratch, size_t bytes) {
  if (scratch.buffer != nullptr && scratch.bytes >= bytes) return true;
  if (scratch.buffer != nullptr) clReleaseMemObject(scratch.buffer);  // commands using it keep it alive until done
  cl_int err = CL_SUCCESS;
  scratch.buffer = clCreateBuffer(g_state.context, CL_MEM_READ_WRITE, bytes, nullptr, &err);
  scratch.bytes = err == CL_SUCCESS ? bytes : 0;
  if (err != CL_SUCCESS) scratch.buffer = nullptr;
  return err == CL_SUCCESS;
}

// Enqueues `kernel` over `items` work-items (rounded up to whole work-groups of `local`) on `queue`.
bool launch(cl_command_queue queue, Kernel kernel, size_t items, size_t local) {
  const size_t global = (items + local - 1) / local * local;
  return clEnqueueNDRangeKernel(queue, g_state.kernels[kernel], 1, nullptr, &global, &local, 0, nullptr, nullptr) ==
         CL_SUCCESS;
}

// The row reduction over `a` into `out`: its arguments are set at each launch, since steps 1 and 4 share it.
bool launch_row_mean(cl_command_queue queue, cl_mem a, cl_mem out, cl_uint cols, size_t rows, size_t local) {
  cl_kernel k = g_state.kernels[k_row_mean];
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &a);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &out);
  err |= clSetKernelArg(k, 2, sizeof cols, &cols);
  err |= clSetKernelArg(k, 3, local * sizeof(float), nullptr);
  return err == CL_SUCCESS && launch(queue, k_row_mean, rows * local, local);
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
  for (int kernel = 0; kernel < k_kernels; ++kernel) {
    cl_int err = CL_SUCCESS;
    g_state.kernels[kernel] = clCreateKernel(g_state.program, k_names[kernel], &err);
    if (err != CL_SUCCESS) return 3;
    const std::optional<size_t> max_local = max_local_size(g_state.kernels[kernel], device);
    if (!max_local) return 3;
    g_state.max_local[kernel] = *max_local;
  }
  return 0;
}

// Returns 1 when the call does not match the task signature, 2 when a scratch buffer cannot be created, 3 when
// OpenCL refuses an argument or a launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Layernorm> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0 || p->cols == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const size_t rows = static_cast<size_t>(p->rows);
  const cl_ulong n = static_cast<cl_ulong>(p->rows * p->cols);
  const cl_uint rows_u = static_cast<cl_uint>(p->rows);
  const cl_uint cols_u = static_cast<cl_uint>(p->cols);
  if (!ensure_scratch(g_state.t, n * sizeof(float)) || !ensure_scratch(g_state.s, n * sizeof(float)) ||
      !ensure_scratch(g_state.m, rows * sizeof(float)) || !ensure_scratch(g_state.v, rows * sizeof(float))) {
    return 2;
  }
  const size_t row_local = local_size_for(p->cols, g_state.max_local[k_row_mean]);
  cl_kernel* k = g_state.kernels;

  cl_int err = clSetKernelArg(k[k_center], 0, sizeof(cl_mem), &p->x);
  err |= clSetKernelArg(k[k_center], 1, sizeof(cl_mem), &g_state.m.buffer);
  err |= clSetKernelArg(k[k_center], 2, sizeof(cl_mem), &g_state.t.buffer);
  err |= clSetKernelArg(k[k_center], 3, sizeof cols_u, &cols_u);
  err |= clSetKernelArg(k[k_center], 4, sizeof n, &n);

  err |= clSetKernelArg(k[k_square], 0, sizeof(cl_mem), &g_state.t.buffer);
  err |= clSetKernelArg(k[k_square], 1, sizeof(cl_mem), &g_state.s.buffer);
  err |= clSetKernelArg(k[k_square], 2, sizeof n, &n);

  err |= clSetKernelArg(k[k_rstd], 0, sizeof(cl_mem), &g_state.v.buffer);
  err |= clSetKernelArg(k[k_rstd], 1, sizeof p->eps, &p->eps);
  err |= clSetKernelArg(k[k_rstd], 2, sizeof rows_u, &rows_u);

  err |= clSetKernelArg(k[k_normalize], 0, sizeof(cl_mem), &g_state.t.buffer);
  err |= clSetKernelArg(k[k_normalize], 1, sizeof(cl_mem), &g_state.v.buffer);
  err |= clSetKernelArg(k[k_normalize], 2, sizeof(cl_mem), &p->y);
  err |= clSetKernelArg(k[k_normalize], 3, sizeof cols_u, &cols_u);
  err |= clSetKernelArg(k[k_normalize], 4, sizeof n, &n);

  err |= clSetKernelArg(k[k_affine], 0, sizeof(cl_mem), &p->y);
  err |= clSetKernelArg(k[k_affine], 1, sizeof(cl_mem), &p->weight);
  err |= clSetKernelArg(k[k_affine], 2, sizeof(cl_mem), &p->bias);
  err |= clSetKernelArg(k[k_affine], 3, sizeof cols_u, &cols_u);
  err |= clSetKernelArg(k[k_affine], 4, sizeof n, &n);
  if (err != CL_SUCCESS) return 3;

  // The queue is in order, so each step sees the previous one's writes. No clFinish: kwb waits for the queue to
  // drain inside the timed region.
  const bool ok = launch_row_mean(queue, p->x, g_state.m.buffer, cols_u, rows, row_local) &&
                  launch(queue, k_center, n, g_state.max_local[k_center]) &&
                  launch(queue, k_square, n, g_state.max_local[k_square]) &&
                  launch_row_mean(queue, g_state.s.buffer, g_state.v.buffer, cols_u, rows, row_local) &&
                  launch(queue, k_rstd, rows, g_state.max_local[k_rstd]) &&
                  launch(queue, k_normalize, n, g_state.max_local[k_normalize]) &&
                  launch(queue, k_affine, n, g_state.max_local[k_affine]);
  return ok ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (cl_kernel kernel : g_state.kernels) {
    if (kernel != nullptr) clReleaseKernel(kernel);
  }
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  for (Scratch* scratch : {&g_state.t, &g_state.s, &g_state.m, &g_state.v}) {
    if (scratch->buffer != nullptr) clReleaseMemObject(scratch->buffer);
  }
  g_state = State{};
}
