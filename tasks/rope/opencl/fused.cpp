// RoPE (interleaved pairs), reference optimized opencl implementation: one kernel, one work-item per (token, pair
// index), nothing else.
//
//   rope_fused  work-item (i, t): f_i = pow(base, -2i / head_dim), theta = (float)pos[t] * f_i (the cpu
//               reference's float32 formula), c = cos(theta), s = sin(theta); then, for every q head and every
//               k head of token t, the pair (2i, 2i+1): out[2i] = x0 c - x1 s, out[2i+1] = x0 s + x1 c
//
// Compared with the baseline (opencl/baseline.cpp: eight kernels, thirteen launches) it launches once, reads q
// and k once and writes q_out and k_out once, computes each angle's cos and sin once for all n_heads + n_kv_heads
// heads of its token (the baseline evaluates them on a duplicated table and writes eight temporaries), and never
// writes or re-reads a temporary. Neighbouring work-items take neighbouring pairs, so a head's pairs are read and
// written as one contiguous run.
//
// Precision: the angle is the task's float32 angle (task.toml derives what it costs at 32k positions); cos and sin
// are OpenCL's full-precision built-ins (correct argument reduction over the whole float range, <= 4 ulp), never
// native_cos/native_sin or -cl-fast-relaxed-math, whose reduction is not accurate for angles of thousands of rad.
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

// Dimension 0 of the launch is the pair index i (rounded up to whole work-groups: work-items past head_dim / 2
// return at once), dimension 1 the token. rotate_pair is shared by the q and k loops. The pair's two elements are
// at lo and hi of each head: lo = 2i, hi = 2i + 1 (the interleaved layout).
constexpr const char* k_source = R"CLC(
void rotate_pair(__global const float* restrict x, __global float* restrict y, const size_t lo, const size_t hi,
                 const float c, const float s) {
  const float x0 = x[lo];
  const float x1 = x[hi];
  y[lo] = x0 * c - x1 * s;
  y[hi] = x0 * s + x1 * c;
}

__kernel void rope_fused(__global const float* restrict q, __global const float* restrict k,
                         __global const int* restrict pos, __global float* restrict q_out,
                         __global float* restrict k_out, const uint n_heads, const uint n_kv_heads,
                         const uint head_dim, const float base) {
  const uint i = get_global_id(0);
  const size_t t = get_global_id(1);
  if (i >= head_dim / 2) return;
  const uint lo = 2 * i, hi = 2 * i + 1;

  const float freq = pow(base, -(float)(2 * i) / (float)head_dim);
  const float theta = (float)pos[t] * freq;
  const float c = cos(theta);
  const float s = sin(theta);

  for (uint h = 0; h < n_heads; ++h) {
    const size_t at = (t * n_heads + h) * head_dim;
    rotate_pair(q, q_out, at + lo, at + hi, c, s);
  }
  for (uint h = 0; h < n_kv_heads; ++h) {
    const size_t at = (t * n_kv_heads + h) * head_dim;
    rotate_pair(k, k_out, at + lo, at + hi, c, s);
  }
}
)CLC";

// At most 64 pairs per work-group: a 128-dim head is one group per token.
constexpr size_t k_max_local = 64;

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
    std::fprintf(stderr, "rope: clCreateProgramWithSource failed (%d)\n", err);
    return nullptr;
  }
  err = clBuildProgram(program, 1, &device, nullptr, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::vector<char> log(size + 1, '\0');
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    std::fprintf(stderr, "rope: clBuildProgram failed (%d):\n%s\n", err, log.data());
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

// The smallest power of two that covers a head's pairs, capped at the device limit: head_dim 2 (one pair) gets a
// work-group of 1 instead of 64 work-items of which 63 idle.
size_t local_size_for(int64_t pairs, size_t max_local) {
  size_t local = 1;
  while (local < max_local && static_cast<int64_t>(local) < pairs) local *= 2;
  return local;
}

// The call's tensors, found by name and checked against the task signature: q [n_tokens, n_heads, head_dim] and
// k [n_tokens, n_kv_heads, head_dim] f32, pos [n_tokens] i32 in; q_out, k_out shaped like q and k out; compact
// row-major, OpenCL buffers. Anything else is refused rather than guessed at.
struct Rope {
  cl_mem q;
  cl_mem k;
  cl_mem pos;
  cl_mem q_out;
  cl_mem k_out;
  int64_t n_tokens, n_heads, n_kv_heads, head_dim;
  float base;
};

// A cl_mem cannot be offset from the host, so a nonzero byte_offset is refused too (kwb passes 0).
bool is_compact_opencl(const DLTensor& t, int32_t ndim, uint8_t code) {
  if (t.device.device_type != kDLOpenCL || t.ndim != ndim || t.byte_offset != 0) return false;
  if (t.dtype.code != code || t.dtype.bits != 32 || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > UINT32_MAX) return false;  // the kernel takes the extents as uint
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

bool same_shape(const DLTensor& a, const DLTensor& b) {
  return a.shape[0] == b.shape[0] && a.shape[1] == b.shape[1] && a.shape[2] == b.shape[2];
}

std::optional<Rope> unpack(const kwb_call& call) {
  const DLTensor* q = find(call.inputs, call.input_names, call.num_inputs, "q");
  const DLTensor* k = find(call.inputs, call.input_names, call.num_inputs, "k");
  const DLTensor* pos = find(call.inputs, call.input_names, call.num_inputs, "pos");
  const DLTensor* q_out = find(call.outputs, call.output_names, call.num_outputs, "q_out");
  const DLTensor* k_out = find(call.outputs, call.output_names, call.num_outputs, "k_out");
  if (q == nullptr || k == nullptr || pos == nullptr || q_out == nullptr || k_out == nullptr) return std::nullopt;
  if (!is_compact_opencl(*q, 3, kDLFloat) || !is_compact_opencl(*k, 3, kDLFloat) ||
      !is_compact_opencl(*pos, 1, kDLInt) || !is_compact_opencl(*q_out, 3, kDLFloat) ||
      !is_compact_opencl(*k_out, 3, kDLFloat)) {
    return std::nullopt;
  }
  if (!same_shape(*q, *q_out) || !same_shape(*k, *k_out) || k->shape[0] != q->shape[0] ||
      pos->shape[0] != q->shape[0] || k->shape[2] != q->shape[2] || q->shape[2] % 2 != 0) {
    return std::nullopt;
  }
  const float base = static_cast<float>(kwb_scalar_or(&call, "base", 10000.0));
  return Rope{static_cast<cl_mem>(q->data),     static_cast<cl_mem>(k->data),     static_cast<cl_mem>(pos->data),
              static_cast<cl_mem>(q_out->data), static_cast<cl_mem>(k_out->data), q->shape[0],
              q->shape[1],                      k->shape[1],                      q->shape[2],
              base};
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
  g_state.kernel = clCreateKernel(g_state.program, "rope_fused", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  return 0;
}

// Returns 1 when the call does not match the task signature, 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rope> p = unpack(*call);
  if (!p) return 1;
  if (p->n_tokens == 0 || p->head_dim == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const int64_t pairs = p->head_dim / 2;
  const size_t local[2] = {local_size_for(pairs, g_state.max_local), 1};
  const size_t global[2] = {(static_cast<size_t>(pairs) + local[0] - 1) / local[0] * local[0],
                            static_cast<size_t>(p->n_tokens)};
  const cl_uint n_heads = static_cast<cl_uint>(p->n_heads);
  const cl_uint n_kv_heads = static_cast<cl_uint>(p->n_kv_heads);
  const cl_uint head_dim = static_cast<cl_uint>(p->head_dim);
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->q);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->k);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->pos);
  err |= clSetKernelArg(k, 3, sizeof(cl_mem), &p->q_out);
  err |= clSetKernelArg(k, 4, sizeof(cl_mem), &p->k_out);
  err |= clSetKernelArg(k, 5, sizeof n_heads, &n_heads);
  err |= clSetKernelArg(k, 6, sizeof n_kv_heads, &n_kv_heads);
  err |= clSetKernelArg(k, 7, sizeof head_dim, &head_dim);
  err |= clSetKernelArg(k, 8, sizeof p->base, &p->base);
  if (err != CL_SUCCESS) return 3;
  // No clFinish: kwb waits for the queue to drain inside the timed region.
  if (clEnqueueNDRangeKernel(queue, k, 2, nullptr, global, local, 0, nullptr, nullptr) != CL_SUCCESS) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_state.kernel != nullptr) clReleaseKernel(g_state.kernel);
  if (g_state.program != nullptr) clReleaseProgram(g_state.program);
  g_state = State{};
}
