// Decode attention, baseline opencl implementation: the textbook composition of eight kernels, the way an eager
// framework runs `s = (q @ k.T) * scale; p = softmax(s); out = p @ v` for one token on a device:
//
//   1. attn_qk         raw[h, t] = sum_i q[h, i] * k[t, g, i]   (one work-item per score; g = h / group)
//   2. attn_scale      s = raw * scale
//   3. attn_row_max    m[h] = max_t s[h, t]                     (one work-group per head, tree in local memory)
//   4. attn_sub_max    z = s - m, m broadcast
//   5. attn_exp        e = exp(z)
//   6. attn_row_sum    l[h] = sum_t e[h, t]                     (one work-group per head, tree in local memory)
//   7. attn_normalize  p = e / l, l broadcast
//   8. attn_weighted   out[h, i] = sum_t p[h, t] * v[t, g, i]   (one work-item per output, sequential over t)
//
// Deliberately unfused: eight launches on the call's queue, each a full sweep over its operand, so a profiler sees
// eight kernels and the n_heads*n_ctx score matrix written and read back five times. The scratch buffers (two
// n_heads*n_ctx ping-pong buffers and two per-head ones) are created on the first call of a shape and kept (grown,
// never shrunk) for later calls, as a framework's caching allocator would. It is the "before" that the fused
// flash-decoding reference (opencl/flash_decode.cpp) is measured against.
//
// Layout: q and out [n_heads, head_dim], k and v [n_ctx, n_kv_heads, head_dim] (token-major), f32, compact
// row-major; n_heads = n_kv_heads * group. NaN: a NaN score is skipped by the max, but exp(NaN - m) is NaN and
// poisons the head's sum, so the whole head comes out NaN, as the oracle's.
#include <CL/cl.h>
#include <kwb/kernel.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

// Element-wise kernels take the element count n: their global size is rounded up to a whole number of work-groups,
// so the last group has work-items past the end. The two row reductions use a power-of-two local size, partial
// holding one float per work-item.
constexpr const char* k_source = R"CLC(
__kernel void attn_qk(__global const float* restrict q, __global const float* restrict k,
                      __global float* restrict raw, const uint n_heads, const uint n_kv, const uint n_ctx,
                      const uint d, const uint group) {
  const size_t i = get_global_id(0);
  if (i >= (size_t)n_heads * n_ctx) return;
  const uint h = (uint)(i / n_ctx);
  const uint t = (uint)(i % n_ctx);
  const uint g = h / group;
  __global const float* qh = q + (size_t)h * d;
  __global const float* kt = k + ((size_t)t * n_kv + g) * d;
  float sum = 0.0f;
  for (uint c = 0; c < d; ++c) sum += qh[c] * kt[c];
  raw[i] = sum;
}

__kernel void attn_scale(__global const float* restrict raw, __global float* restrict s, const float scale,
                         const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) s[i] = raw[i] * scale;
}

__kernel void attn_row_max(__global const float* restrict s, __global float* restrict m, const uint n_ctx,
                           __local float* partial) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t row = get_group_id(0);
  const size_t base = row * n_ctx;

  float best = -INFINITY;
  for (uint c = lid; c < n_ctx; c += lsize) best = s[base + c] > best ? s[base + c] : best;
  partial[lid] = best;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active) partial[lid] = partial[lid + active] > partial[lid] ? partial[lid + active] : partial[lid];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) m[row] = partial[0];
}

__kernel void attn_sub_max(__global const float* restrict s, __global const float* restrict m,
                           __global float* restrict z, const uint n_ctx, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) z[i] = s[i] - m[i / n_ctx];
}

__kernel void attn_exp(__global const float* restrict z, __global float* restrict e, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) e[i] = exp(z[i]);
}

__kernel void attn_row_sum(__global const float* restrict e, __global float* restrict l, const uint n_ctx,
                           __local float* partial) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const size_t row = get_group_id(0);
  const size_t base = row * n_ctx;

  float sum = 0.0f;
  for (uint c = lid; c < n_ctx; c += lsize) sum += e[base + c];
  partial[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint active = lsize / 2; active > 0; active /= 2) {
    if (lid < active) partial[lid] += partial[lid + active];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) l[row] = partial[0];
}

__kernel void attn_normalize(__global const float* restrict e, __global const float* restrict l,
                             __global float* restrict p, const uint n_ctx, const ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) p[i] = e[i] / l[i / n_ctx];
}

__kernel void attn_weighted(__global const float* restrict p, __global const float* restrict v,
                            __global float* restrict out, const uint n_heads, const uint n_kv, const uint n_ctx,
                            const uint d, const uint group) {
  const size_t i = get_global_id(0);
  if (i >= (size_t)n_heads * d) return;
  const uint h = (uint)(i / d);
  const uint c = (uint)(i % d);
  const uint g = h / group;
  __global const float* ph = p + (size_t)h * n_ctx;
  float sum = 0.0f;
  for (uint t = 0; t < n_ctx; ++t) sum += ph[t] * v[((size_t)t * n_kv + g) * d + c];
  out[i] = sum;
}
)CLC";

// The eight kernels, in launch order.
enum Step { k_qk, k_scale, k_row_max, k_sub_max, k_exp, k_row_sum, k_normalize, k_weighted, k_steps };
constexpr const char* k_names[k_steps] = {"attn_qk",  "attn_scale",   "attn_row_max",   "attn_sub_max",
                                          "attn_exp", "attn_row_sum", "attn_normalize", "attn_weighted"};

// The reductions' width, and the element-wise kernels' work-group size.
constexpr size_t k_max_local = 256;

// What kwb_setup prepares, plus the scratch buffers the calls grow.
struct State {
  cl_context context = nullptr;
  cl_program program = nullptr;
  cl_kernel kernels[k_steps] = {};
  size_t max_local[k_steps] = {};  // per kernel: largest power of two <= k_max_local it may use on this device
  cl_mem a = nullptr;              // n_heads*n_ctx floats: raw, then z, then p
  size_t a_bytes = 0;
  cl_mem b = nullptr;              // n_heads*n_ctx floats: s, then e
  size_t b_bytes = 0;
  cl_mem m = nullptr;              // n_heads floats: the row maxima
  size_t m_bytes = 0;
  cl_mem l = nullptr;              // n_heads floats: the row sums
  size_t l_bytes = 0;
};
State g_state;

// The OpenCL C source built for `device`; on failure the build log goes to stderr and the result is null.
cl_program build(cl_context context, cl_device_id device, const char* source) {
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "attention_decode: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "attention_decode: clBuildProgram failed (%d):\n%s\n", err, log.data());
    clReleaseProgram(program);
    return nullptr;
  }
  return program;
}

// The largest power of two <= k_max_local within both the kernel's and the device's work-group limits.
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

// The smallest power of two that covers a row of scores, capped at the device limit.
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

// The call's tensors, found by name and checked against the task signature: q [n_heads, d], k and v
// [n_ctx, n_kv, d] in, out [n_heads, d] out, f32, compact row-major, OpenCL buffers; n_heads a multiple of n_kv.
// Anything else is refused rather than guessed at.
struct Attention {
  cl_mem q;
  cl_mem k;
  cl_mem v;
  cl_mem out;
  int64_t n_heads;
  int64_t n_kv;
  int64_t n_ctx;
  int64_t d;
  float scale;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl_f32(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > UINT32_MAX) return false;  // the kernels take the dims as uint
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

std::optional<Attention> unpack(const kwb_call& call) {
  const DLTensor* q = find(call.inputs, call.input_names, call.num_inputs, "q");
  const DLTensor* k = find(call.inputs, call.input_names, call.num_inputs, "k");
  const DLTensor* v = find(call.inputs, call.input_names, call.num_inputs, "v");
  const DLTensor* out = find(call.outputs, call.output_names, call.num_outputs, "out");
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr) return std::nullopt;
  if (!is_compact_opencl_f32(*q, 2) || !is_compact_opencl_f32(*k, 3) || !is_compact_opencl_f32(*v, 3) ||
      !is_compact_opencl_f32(*out, 2)) {
    return std::nullopt;
  }
  const int64_t n_heads = q->shape[0], d = q->shape[1], n_ctx = k->shape[0], n_kv = k->shape[1];
  if (k->shape[2] != d || v->shape[0] != n_ctx || v->shape[1] != n_kv || v->shape[2] != d ||
      out->shape[0] != n_heads || out->shape[1] != d) {
    return std::nullopt;
  }
  if (n_ctx < 1 || n_kv < 1 || n_heads % n_kv != 0) return std::nullopt;
  return Attention{static_cast<cl_mem>(q->data), static_cast<cl_mem>(k->data), static_cast<cl_mem>(v->data),
                   static_cast<cl_mem>(out->data), n_heads, n_kv, n_ctx, d,
                   static_cast<float>(kwb_scalar_or(&call, "scale", 0.08838834764831845))};
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

// Returns 1 when the call does not match the task signature (or the context is empty), 2 when a scratch buffer
// cannot be created, 3 when OpenCL refuses an argument or a launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Attention> p = unpack(*call);
  if (!p) return 1;
  if (p->n_heads == 0 || p->d == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const size_t heads = static_cast<size_t>(p->n_heads);
  const cl_ulong n = static_cast<cl_ulong>(p->n_heads * p->n_ctx);
  const cl_ulong n_out = static_cast<cl_ulong>(p->n_heads * p->d);
  const cl_uint n_heads_u = static_cast<cl_uint>(p->n_heads);
  const cl_uint n_kv_u = static_cast<cl_uint>(p->n_kv);
  const cl_uint n_ctx_u = static_cast<cl_uint>(p->n_ctx);
  const cl_uint d_u = static_cast<cl_uint>(p->d);
  const cl_uint group_u = static_cast<cl_uint>(p->n_heads / p->n_kv);
  if (!ensure_scratch(g_state.a, g_state.a_bytes, n * sizeof(float)) ||
      !ensure_scratch(g_state.b, g_state.b_bytes, n * sizeof(float)) ||
      !ensure_scratch(g_state.m, g_state.m_bytes, heads * sizeof(float)) ||
      !ensure_scratch(g_state.l, g_state.l_bytes, heads * sizeof(float))) {
    return 2;
  }
  const size_t max_local = local_size_for(p->n_ctx, g_state.max_local[k_row_max]);
  const size_t sum_local = local_size_for(p->n_ctx, g_state.max_local[k_row_sum]);
  cl_kernel* k = g_state.kernels;
  cl_mem a = g_state.a, b = g_state.b, m = g_state.m, l = g_state.l;

  cl_int err = clSetKernelArg(k[k_qk], 0, sizeof(cl_mem), &p->q);
  err |= clSetKernelArg(k[k_qk], 1, sizeof(cl_mem), &p->k);
  err |= clSetKernelArg(k[k_qk], 2, sizeof(cl_mem), &a);
  err |= clSetKernelArg(k[k_qk], 3, sizeof n_heads_u, &n_heads_u);
  err |= clSetKernelArg(k[k_qk], 4, sizeof n_kv_u, &n_kv_u);
  err |= clSetKernelArg(k[k_qk], 5, sizeof n_ctx_u, &n_ctx_u);
  err |= clSetKernelArg(k[k_qk], 6, sizeof d_u, &d_u);
  err |= clSetKernelArg(k[k_qk], 7, sizeof group_u, &group_u);

  err |= clSetKernelArg(k[k_scale], 0, sizeof(cl_mem), &a);
  err |= clSetKernelArg(k[k_scale], 1, sizeof(cl_mem), &b);
  err |= clSetKernelArg(k[k_scale], 2, sizeof p->scale, &p->scale);
  err |= clSetKernelArg(k[k_scale], 3, sizeof n, &n);

  err |= clSetKernelArg(k[k_row_max], 0, sizeof(cl_mem), &b);
  err |= clSetKernelArg(k[k_row_max], 1, sizeof(cl_mem), &m);
  err |= clSetKernelArg(k[k_row_max], 2, sizeof n_ctx_u, &n_ctx_u);
  err |= clSetKernelArg(k[k_row_max], 3, max_local * sizeof(float), nullptr);

  err |= clSetKernelArg(k[k_sub_max], 0, sizeof(cl_mem), &b);
  err |= clSetKernelArg(k[k_sub_max], 1, sizeof(cl_mem), &m);
  err |= clSetKernelArg(k[k_sub_max], 2, sizeof(cl_mem), &a);
  err |= clSetKernelArg(k[k_sub_max], 3, sizeof n_ctx_u, &n_ctx_u);
  err |= clSetKernelArg(k[k_sub_max], 4, sizeof n, &n);

  err |= clSetKernelArg(k[k_exp], 0, sizeof(cl_mem), &a);
  err |= clSetKernelArg(k[k_exp], 1, sizeof(cl_mem), &b);
  err |= clSetKernelArg(k[k_exp], 2, sizeof n, &n);

  err |= clSetKernelArg(k[k_row_sum], 0, sizeof(cl_mem), &b);
  err |= clSetKernelArg(k[k_row_sum], 1, sizeof(cl_mem), &l);
  err |= clSetKernelArg(k[k_row_sum], 2, sizeof n_ctx_u, &n_ctx_u);
  err |= clSetKernelArg(k[k_row_sum], 3, sum_local * sizeof(float), nullptr);

  err |= clSetKernelArg(k[k_normalize], 0, sizeof(cl_mem), &b);
  err |= clSetKernelArg(k[k_normalize], 1, sizeof(cl_mem), &l);
  err |= clSetKernelArg(k[k_normalize], 2, sizeof(cl_mem), &a);
  err |= clSetKernelArg(k[k_normalize], 3, sizeof n_ctx_u, &n_ctx_u);
  err |= clSetKernelArg(k[k_normalize], 4, sizeof n, &n);

  err |= clSetKernelArg(k[k_weighted], 0, sizeof(cl_mem), &a);
  err |= clSetKernelArg(k[k_weighted], 1, sizeof(cl_mem), &p->v);
  err |= clSetKernelArg(k[k_weighted], 2, sizeof(cl_mem), &p->out);
  err |= clSetKernelArg(k[k_weighted], 3, sizeof n_heads_u, &n_heads_u);
  err |= clSetKernelArg(k[k_weighted], 4, sizeof n_kv_u, &n_kv_u);
  err |= clSetKernelArg(k[k_weighted], 5, sizeof n_ctx_u, &n_ctx_u);
  err |= clSetKernelArg(k[k_weighted], 6, sizeof d_u, &d_u);
  err |= clSetKernelArg(k[k_weighted], 7, sizeof group_u, &group_u);
  if (err != CL_SUCCESS) return 3;

  // The queue is in order, so each step sees the previous one's writes. No clFinish: kwb waits for the queue to
  // drain inside the timed region.
  const bool ok = launch(queue, k_qk, n, g_state.max_local[k_qk]) &&
                  launch(queue, k_scale, n, g_state.max_local[k_scale]) &&
                  launch(queue, k_row_max, heads * max_local, max_local) &&
                  launch(queue, k_sub_max, n, g_state.max_local[k_sub_max]) &&
                  launch(queue, k_exp, n, g_state.max_local[k_exp]) &&
                  launch(queue, k_row_sum, heads * sum_local, sum_local) &&
                  launch(queue, k_normalize, n, g_state.max_local[k_normalize]) &&
                  launch(queue, k_weighted, n_out, g_state.max_local[k_weighted]);
  return ok ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (cl_kernel kernel : g_state.kernels) {
    if (kernel != nullptr) clReleaseKernel(kernel);
  }
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  for (cl_mem buffer : {g_state.a, g_state.b, g_state.m, g_state.l}) {
    if (buffer != nullptr) clReleaseMemObject(buffer);
  }
  g_state = State{};
}
