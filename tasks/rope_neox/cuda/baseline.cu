// RoPE (rotate-half pairs), baseline cuda implementation: the eager-framework formulation of cpu/baseline.cpp
// (HF transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb), one kernel per tensor operation, on the call's
// stream (the same passes as opencl/baseline.cpp):
//
//   1. rope_inv_freq            inv_freq = 1 / powf(base, 2i / head_dim)     [head_dim / 2]
//   2. rope_angles              angles = pos (outer) inv_freq                [n_tokens, head_dim / 2]
//   3. rope_cat                 emb = cat(angles, angles)                    [n_tokens, head_dim]
//   4. rope_cos                 cos_t = cosf(emb)                            [n_tokens, head_dim]: every angle twice
//   5. rope_sin                 sin_t = sinf(emb)                            [n_tokens, head_dim]
//   then for q, and again for k:
//   6. rope_rotate_half         rot = cat(-x[h:], x[:h]) per head, h = d/2   [like x]
//   7. rope_mul_table           x_cos = x * cos_t, broadcast over heads      [like x]
//   8. rope_mul_table           rot_sin = rot * sin_t                        [like x]
//   9. rope_add                 out = x_cos + rot_sin                        (into the output)
//
// Deliberately unfused: eight kernels in thirteen launches, each a full sweep over its operand, so a profiler sees
// every temporary written and read back, and cos/sin evaluated on the duplicated table. The scratch buffers are
// allocated on the first call that needs them and kept (grown, never shrunk) for later calls, as a framework's
// caching allocator would: cudaMalloc and cudaFree synchronize the device and would cost more than the kernels. The
// q temporaries are reused for k (one stream, in order). It is the "before" that the fused reference
// (cuda/fused.cu) is measured against. The arithmetic of each output is that of the definition:
// fl(fl(x_i c) + fl(-x_(i+h) s)), with the float32 angle (float)pos * inv_freq and CUDA's accurate powf, cosf and sinf
// (no fast math).
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

KWB_CANDIDATE_ABI

namespace {

// Threads per block of every kernel.
constexpr int k_threads = 256;

}  // namespace

// Every kernel takes its element count n: the grid is rounded up to whole blocks, so the last block has threads
// past the end. Kernels are at global scope with external linkage, so that profilers and kwb's trace name them
// plainly.
__global__ void rope_inv_freq(float* __restrict__ inv_freq, int64_t half_dim, int64_t head_dim, float base) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < half_dim) inv_freq[i] = 1.0f / powf(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
}

__global__ void rope_angles(const int32_t* __restrict__ pos, const float* __restrict__ inv_freq,
                            float* __restrict__ angles, int64_t half_dim, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) angles[j] = static_cast<float>(pos[j / half_dim]) * inv_freq[j % half_dim];
}

__global__ void rope_cat(const float* __restrict__ angles, float* __restrict__ emb, int64_t half_dim, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) emb[j] = angles[j / (2 * half_dim) * half_dim + j % half_dim];
}

__global__ void rope_cos(const float* __restrict__ emb, float* __restrict__ out, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) out[j] = cosf(emb[j]);
}

__global__ void rope_sin(const float* __restrict__ emb, float* __restrict__ out, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) out[j] = sinf(emb[j]);
}

__global__ void rope_rotate_half(const float* __restrict__ x, float* __restrict__ rot, int64_t half_dim, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) rot[j] = (j % (2 * half_dim) < half_dim) ? -x[j + half_dim] : x[j - half_dim];
}

// y[t, h, c] = x[t, h, c] * table[t, c]: the per-token table broadcast over the heads.
__global__ void rope_mul_table(const float* __restrict__ x, const float* __restrict__ table, float* __restrict__ y,
                               int64_t heads, int64_t head_dim, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) y[j] = x[j] * table[j / (heads * head_dim) * head_dim + j % head_dim];
}

__global__ void rope_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) y[j] = a[j] + b[j];
}

namespace {

// Device memory that grows to the largest size a call has asked for and is kept for later calls.
struct Scratch {
  float* data = nullptr;
  size_t floats = 0;

  // false when the device has no memory left for it.
  bool reserve(size_t n) {
    if (n <= floats) return true;
    cudaFree(data);  // waits for the kernels of earlier calls that may still read it
    data = nullptr;
    floats = 0;
    if (cudaMalloc(&data, (n > 0 ? n : 1) * sizeof(float)) != cudaSuccess) {
      data = nullptr;
      return false;
    }
    floats = n;
    return true;
  }

  void release() {
    cudaFree(data);
    data = nullptr;
    floats = 0;
  }
};

Scratch g_inv_freq;  // [head_dim / 2]
Scratch g_angles;    // [n_tokens, head_dim / 2]
Scratch g_emb;       // [n_tokens, head_dim]: every angle twice
Scratch g_cos;       // cos(emb)
Scratch g_sin;       // sin(emb)
Scratch g_rot;       // [n_tokens, max(n_heads, n_kv_heads), head_dim] each, for q and then for k
Scratch g_x_cos;
Scratch g_rot_sin;

// The call's tensors, found by name and checked against the task signature: q [n_tokens, n_heads, head_dim] and
// k [n_tokens, n_kv_heads, head_dim] f32, pos [n_tokens] i32 in; q_out, k_out shaped like q and k out; compact
// row-major, CUDA device memory. Anything else is refused rather than guessed at.
struct Rope {
  const float* q;
  const float* k;
  const int32_t* pos;
  float* q_out;
  float* k_out;
  int64_t n_tokens, n_heads, n_kv_heads, head_dim;
  float base;
};

bool is_compact_cuda(const DLTensor& t, int32_t ndim, uint8_t code) {
  if (t.device.device_type != kDLCUDA || t.ndim != ndim) return false;
  if (t.dtype.code != code || t.dtype.bits != 32 || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0) return false;
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

template <typename T>
T* elements(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
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
  if (!is_compact_cuda(*q, 3, kDLFloat) || !is_compact_cuda(*k, 3, kDLFloat) || !is_compact_cuda(*pos, 1, kDLInt) ||
      !is_compact_cuda(*q_out, 3, kDLFloat) || !is_compact_cuda(*k_out, 3, kDLFloat)) {
    return std::nullopt;
  }
  if (!same_shape(*q, *q_out) || !same_shape(*k, *k_out) || k->shape[0] != q->shape[0] ||
      pos->shape[0] != q->shape[0] || k->shape[2] != q->shape[2] || q->shape[2] % 2 != 0) {
    return std::nullopt;
  }
  // One thread per element: every grid must fit in 2^31 - 1 blocks.
  const int64_t heads = q->shape[1] > k->shape[1] ? q->shape[1] : k->shape[1];
  if (q->shape[0] * heads * q->shape[2] / k_threads >= INT32_MAX) return std::nullopt;
  const float base = static_cast<float>(kwb_scalar_or(&call, "base", 10000.0));
  return Rope{elements<const float>(*q), elements<const float>(*k), elements<const int32_t>(*pos),
              elements<float>(*q_out),   elements<float>(*k_out),   q->shape[0],
              q->shape[1],               k->shape[1],               q->shape[2],
              base};
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + k_threads - 1) / k_threads); }

// out = x * cos_t + rot(x) * sin_t for one of q, k (`heads` heads per token): four launches. False when one fails.
bool apply(cudaStream_t stream, const float* x, float* out, int64_t n_tokens, int64_t heads, int64_t head_dim) {
  const int64_t n = n_tokens * heads * head_dim;
  if (n == 0) return true;  // CUDA refuses an empty grid
  rope_rotate_half<<<blocks_for(n), k_threads, 0, stream>>>(x, g_rot.data, head_dim / 2, n);
  if (cudaGetLastError() != cudaSuccess) return false;
  rope_mul_table<<<blocks_for(n), k_threads, 0, stream>>>(x, g_cos.data, g_x_cos.data, heads, head_dim, n);
  if (cudaGetLastError() != cudaSuccess) return false;
  rope_mul_table<<<blocks_for(n), k_threads, 0, stream>>>(g_rot.data, g_sin.data, g_rot_sin.data, heads, head_dim, n);
  if (cudaGetLastError() != cudaSuccess) return false;
  rope_add<<<blocks_for(n), k_threads, 0, stream>>>(g_x_cos.data, g_rot_sin.data, out, n);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature, 2 when a scratch buffer cannot be allocated, 3 when a
// launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rope> p = unpack(*call);
  if (!p) return 1;
  if (p->n_tokens == 0 || p->head_dim == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const int64_t half_dim = p->head_dim / 2;
  const int64_t n_angles = p->n_tokens * half_dim;
  const int64_t n_table = p->n_tokens * p->head_dim;
  const int64_t per_tensor = n_table * (p->n_heads > p->n_kv_heads ? p->n_heads : p->n_kv_heads);
  if (!g_inv_freq.reserve(static_cast<size_t>(half_dim)) || !g_angles.reserve(static_cast<size_t>(n_angles)) ||
      !g_emb.reserve(static_cast<size_t>(n_table)) || !g_cos.reserve(static_cast<size_t>(n_table)) ||
      !g_sin.reserve(static_cast<size_t>(n_table)) || !g_rot.reserve(static_cast<size_t>(per_tensor)) ||
      !g_x_cos.reserve(static_cast<size_t>(per_tensor)) || !g_rot_sin.reserve(static_cast<size_t>(per_tensor))) {
    return 2;
  }
  const auto stream = static_cast<cudaStream_t>(call->stream);

  // No synchronization: kwb waits for the device inside the timed region.
  rope_inv_freq<<<blocks_for(half_dim), k_threads, 0, stream>>>(g_inv_freq.data, half_dim, p->head_dim, p->base);
  if (cudaGetLastError() != cudaSuccess) return 3;
  rope_angles<<<blocks_for(n_angles), k_threads, 0, stream>>>(p->pos, g_inv_freq.data, g_angles.data, half_dim,
                                                              n_angles);
  if (cudaGetLastError() != cudaSuccess) return 3;
  rope_cat<<<blocks_for(n_table), k_threads, 0, stream>>>(g_angles.data, g_emb.data, half_dim, n_table);
  if (cudaGetLastError() != cudaSuccess) return 3;
  rope_cos<<<blocks_for(n_table), k_threads, 0, stream>>>(g_emb.data, g_cos.data, n_table);
  if (cudaGetLastError() != cudaSuccess) return 3;
  rope_sin<<<blocks_for(n_table), k_threads, 0, stream>>>(g_emb.data, g_sin.data, n_table);
  if (cudaGetLastError() != cudaSuccess) return 3;
  if (!apply(stream, p->q, p->q_out, p->n_tokens, p->n_heads, p->head_dim)) return 3;
  if (!apply(stream, p->k, p->k_out, p->n_tokens, p->n_kv_heads, p->head_dim)) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (Scratch* s : {&g_inv_freq, &g_angles, &g_emb, &g_cos, &g_sin, &g_rot, &g_x_cos, &g_rot_sin}) s->release();
}
