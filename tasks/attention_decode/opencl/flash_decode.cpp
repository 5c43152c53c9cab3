// Decode attention, reference optimized opencl implementation: one kernel, one work-group per query head, an online
// softmax over the context, in the manner of flash-decoding (Dao et al., "Flash-Decoding for long-context
// inference", 2023) and of Milakov & Gimelshein's online normalizer ("Online normalizer calculation for softmax",
// 2018). No score matrix, no scratch buffer, one launch.
//
//   attn_flash_decode  the work-group of head h (kv head g = h / group) copies q[h, :] into local memory, then walks
//                      the context in blocks of as many tokens as it has work-items:
//                        s_j  = scale * (q . k_j)               (work-item j, one token each)
//                        m'   = max(m, max_j s_j)               (tree in local memory; fmax skips NaN)
//                        c    = exp(m - m')                     (0 on the first block, where m = -inf)
//                        p_j  = exp(s_j - m')                   (in local memory; a missing token of a short last
//                                                                block scores -inf and weighs exp(-inf) = 0)
//                        l    = l c + sum_j p_j                 (every work-item keeps the same l)
//                        acc  = acc c + sum_j p_j v_j           (acc in local memory, each element owned by one
//                                                                work-item, v's rows read coalesced)
//                      and at the end out[h, :] = acc / l.
//
// Compared with the eight-kernel baseline it launches once instead of eight times, reads k and v once each and
// writes out once; the scores, weights and running state never leave local memory and registers. l and acc are
// rescaled by the same rounded c, so c's error cancels in the ratio; every sum stays in float and each is at most
// as long as the baseline's sequential ones, so the tolerance's bound holds.
//
// NaN follows IEEE: a NaN score is skipped by the max (fmax), but exp(NaN - m') is NaN, which poisons l and acc, so
// the head's output is NaN, as the oracle's; a NaN in q makes every score of the head NaN, m' stays -inf and
// c = exp(-inf - -inf) is NaN.
//
// Layout: q and out [n_heads, head_dim], k and v [n_ctx, n_kv_heads, head_dim] (token-major), f32, compact
// row-major; n_heads = n_kv_heads * group.
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

// The local size is a power of two (the max's tree halves it at each step). q_l and acc hold head_dim floats each,
// part one float per work-item (the block's scores for the max, then its weights).
constexpr const char* k_source = R"CLC(
// Row (token t, kv head g) of a [n_ctx, n_kv, d] cache.
size_t kv_offset(const uint t, const uint g, const uint n_kv, const uint n_ctx, const uint d) {
  return ((size_t)t * n_kv + g) * d;
}

__kernel void attn_flash_decode(__global const float* restrict q, __global const float* restrict k,
                                __global const float* restrict v, __global float* restrict out, const uint n_kv,
                                const uint n_ctx, const uint d, const uint group, const float scale,
                                __local float* q_l, __local float* acc, __local float* part) {
  const uint lid = get_local_id(0);
  const uint lsize = get_local_size(0);
  const uint h = get_group_id(0);
  const uint g = h / group;
  const size_t q_base = (size_t)h * d;

  for (uint i = lid; i < d; i += lsize) {
    q_l[i] = q[q_base + i];
    acc[i] = 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  float m = -INFINITY;  // the running max, the same in every work-item
  float l = 0.0f;       // the running sum of exp(s - m), the same in every work-item
  for (uint t0 = 0; t0 < n_ctx; t0 += lsize) {
    const uint nb = min(lsize, n_ctx - t0);
    // 1. This work-item's token's score.
    float s = -INFINITY;
    if (lid < nb) {
      __global const float* kr = k + kv_offset(t0 + lid, g, n_kv, n_ctx, d);
      float dot = 0.0f;
      for (uint i = 0; i < d; ++i) dot += q_l[i] * kr[i];
      s = dot * scale;
    }
    // 2. The block's max, and the new running max.
    part[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint active = lsize / 2; active > 0; active /= 2) {
      if (lid < active) part[lid] = fmax(part[lid], part[lid + active]);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float m_new = fmax(m, part[0]);
    const float c = exp(m - m_new);
    barrier(CLK_LOCAL_MEM_FENCE);  // every work-item has read part[0]
    // 3. The block's weights, their sum, and the accumulator.
    part[lid] = exp(s - m_new);
    barrier(CLK_LOCAL_MEM_FENCE);
    float block_sum = 0.0f;
    for (uint j = 0; j < nb; ++j) block_sum += part[j];
    l = l * c + block_sum;
    for (uint i = lid; i < d; i += lsize) {
      float a = acc[i] * c;
      for (uint j = 0; j < nb; ++j) a += part[j] * v[kv_offset(t0 + j, g, n_kv, n_ctx, d) + i];
      acc[i] = a;
    }
    m = m_new;
    barrier(CLK_LOCAL_MEM_FENCE);  // every work-item is done with part before the next block rewrites it
  }
  const float inv_l = 1.0f / l;
  for (uint i = lid; i < d; i += lsize) out[q_base + i] = acc[i] * inv_l;
}
)CLC";

// Tokens per block and work-items per head: 128 gives each work-item one dimension of a 128-wide head.
constexpr size_t k_max_local = 128;

// What kwb_setup prepares for every call.
struct State {
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  size_t max_local = 1;  // largest power of two <= k_max_local that the kernel may use on this device
  cl_ulong local_mem = 0;  // the device's local memory, bytes
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

// The smallest power of two that covers `items`, capped at the device limit: a short context (7 tokens) with a
// short head gets a small work-group instead of 128 work-items of which most idle.
size_t local_size_for(int64_t cols, size_t max_local) {
  size_t local = 1;
  while (local < max_local && static_cast<int64_t>(local) < cols) local *= 2;
  return local;
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

// Returns 1 when the backend is not OpenCL, 2 when the program does not build (the log is on stderr), 3 when the
// kernel cannot be created or queried.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  const auto context = static_cast<cl_context>(ctx->device_context);
  const auto device = static_cast<cl_device_id>(ctx->device);
  g_state.program = build(context, device, k_source);
  if (g_state.program == nullptr) return 2;
  cl_int err = CL_SUCCESS;
  g_state.kernel = clCreateKernel(g_state.program, "attn_flash_decode", &err);
  if (err != CL_SUCCESS) return 3;
  const std::optional<size_t> max_local = max_local_size(g_state.kernel, device);
  if (!max_local) return 3;
  g_state.max_local = *max_local;
  if (clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof g_state.local_mem, &g_state.local_mem, nullptr) !=
      CL_SUCCESS) {
    return 3;
  }
  return 0;
}

// Returns 1 when the call does not match the task signature (or the context is empty, or q and the accumulator do
// not fit in local memory), 3 when OpenCL refuses an argument or the launch.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Attention> p = unpack(*call);
  if (!p) return 1;
  if (p->n_heads == 0 || p->d == 0) return 0;  // nothing to write, and OpenCL refuses an empty launch
  const auto queue = static_cast<cl_command_queue>(call->stream);
  const cl_uint n_kv = static_cast<cl_uint>(p->n_kv);
  const cl_uint n_ctx = static_cast<cl_uint>(p->n_ctx);
  const cl_uint d = static_cast<cl_uint>(p->d);
  const cl_uint group = static_cast<cl_uint>(p->n_heads / p->n_kv);
  const size_t local = local_size_for(p->n_ctx > p->d ? p->n_ctx : p->d, g_state.max_local);
  const size_t global = static_cast<size_t>(p->n_heads) * local;
  const size_t row_bytes = static_cast<size_t>(p->d) * sizeof(float);
  if (2 * row_bytes + local * sizeof(float) > g_state.local_mem) return 1;
  cl_kernel k = g_state.kernel;
  cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &p->q);
  err |= clSetKernelArg(k, 1, sizeof(cl_mem), &p->k);
  err |= clSetKernelArg(k, 2, sizeof(cl_mem), &p->v);
  err |= clSetKernelArg(k, 3, sizeof(cl_mem), &p->out);
  err |= clSetKernelArg(k, 4, sizeof n_kv, &n_kv);
  err |= clSetKernelArg(k, 5, sizeof n_ctx, &n_ctx);
  err |= clSetKernelArg(k, 6, sizeof d, &d);
  err |= clSetKernelArg(k, 7, sizeof group, &group);
  err |= clSetKernelArg(k, 8, sizeof p->scale, &p->scale);
  err |= clSetKernelArg(k, 9, row_bytes, nullptr);
  err |= clSetKernelArg(k, 10, row_bytes, nullptr);
  err |= clSetKernelArg(k, 11, local * sizeof(float), nullptr);
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
