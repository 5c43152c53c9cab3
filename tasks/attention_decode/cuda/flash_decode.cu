// Decode attention, reference optimized cuda implementation: one kernel, one thread block per query head, an online
// softmax over the context, in the manner of flash-decoding (Dao et al., "Flash-Decoding for long-context
// inference", 2023) and of Milakov & Gimelshein's online normalizer ("Online normalizer calculation for softmax",
// 2018). No score matrix, no scratch buffer, one launch.
//
//   attn_flash_decode  the block of head h (kv head g = h / group) copies q[h, :] into shared memory, then walks the
//                      context in blocks of as many tokens as it has threads:
//                        s_j  = scale * (q . k_j)               (thread j, one token each)
//                        m'   = max(m, max_j s_j)               (tree in shared memory; fmaxf skips NaN)
//                        c    = exp(m - m')                     (0 on the first block, where m = -inf)
//                        p_j  = exp(s_j - m')                   (in shared memory; a missing token of a short last
//                                                                block scores -inf and weighs exp(-inf) = 0)
//                        l    = l c + sum_j p_j                 (every thread keeps the same l)
//                        acc  = acc c + sum_j p_j v_j           (acc in shared memory, each element owned by one
//                                                                thread, v's rows read coalesced)
//                      and at the end out[h, :] = acc / l.
//
// Compared with the eight-kernel baseline it launches once instead of eight times, reads k and v once each and
// writes out once; the scores, weights and running state never leave shared memory and registers. l and acc are
// rescaled by the same rounded c, so c's error cancels in the ratio; every sum stays in float and each is at most
// as long as the baseline's sequential ones, so the tolerance's bound holds. expf is CUDA's accurate one (kwb builds
// without fast math), not the __expf intrinsic.
//
// NaN follows IEEE: a NaN score is skipped by the max (fmaxf), but exp(NaN - m') is NaN, which poisons l and acc, so
// the head's output is NaN, as the oracle's; a NaN in q makes every score of the head NaN, m' stays -inf and
// c = exp(-inf - -inf) is NaN.
//
// Layout: q and out [n_heads, head_dim], k and v [n_ctx, n_kv_heads, head_dim] (token-major), f32, compact
// row-major; n_heads = n_kv_heads * group.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

KWB_CANDIDATE_ABI

namespace {

// Tokens per block and threads per head: 128 gives each thread one dimension of a 128-wide head; at least one warp.
constexpr int k_max_threads = 128;
constexpr int k_warp = 32;
// The dynamic shared memory a block may use without opting in.
constexpr size_t k_max_shared = 48 * 1024;

}  // namespace

// Row (token t, kv head g) of a [n_ctx, n_kv, d] cache.
__device__ int64_t kv_offset(int64_t t, int64_t g, int64_t n_kv, int64_t n_ctx, int64_t d) {
  return (t * n_kv + g) * d;
}

// One block per query head; blockDim.x a power of two. Shared memory: q_l and acc (d floats each), then part (one
// float per thread).
__global__ void __launch_bounds__(k_max_threads)
    attn_flash_decode(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                      float* __restrict__ out, int64_t n_kv, int64_t n_ctx, int64_t d, int64_t group, float scale) {
  extern __shared__ float shared[];
  float* q_l = shared;
  float* acc = shared + d;
  float* part = shared + 2 * d;
  const int lid = static_cast<int>(threadIdx.x);
  const int lsize = static_cast<int>(blockDim.x);
  const int64_t h = blockIdx.x;
  const int64_t g = h / group;
  const int64_t q_base = h * d;

  for (int64_t i = lid; i < d; i += lsize) {
    q_l[i] = q[q_base + i];
    acc[i] = 0.0f;
  }
  __syncthreads();

  float m = -INFINITY;  // the running max, the same in every thread
  float l = 0.0f;       // the running sum of exp(s - m), the same in every thread
  for (int64_t t0 = 0; t0 < n_ctx; t0 += lsize) {
    const int nb = static_cast<int>(n_ctx - t0 < lsize ? n_ctx - t0 : lsize);
    // 1. This thread's token's score.
    float s = -INFINITY;
    if (lid < nb) {
      const float* kr = k + kv_offset(t0 + lid, g, n_kv, n_ctx, d);
      float dot = 0.0f;
      for (int64_t i = 0; i < d; ++i) dot += q_l[i] * kr[i];
      s = dot * scale;
    }
    // 2. The block's max, and the new running max.
    part[lid] = s;
    __syncthreads();
    for (int active = lsize / 2; active > 0; active /= 2) {
      if (lid < active) part[lid] = fmaxf(part[lid], part[lid + active]);
      __syncthreads();
    }
    const float m_new = fmaxf(m, part[0]);
    const float c = expf(m - m_new);
    __syncthreads();  // every thread has read part[0]
    // 3. The block's weights, their sum, and the accumulator.
    part[lid] = expf(s - m_new);
    __syncthreads();
    float block_sum = 0.0f;
    for (int j = 0; j < nb; ++j) block_sum += part[j];
    l = l * c + block_sum;
    for (int64_t i = lid; i < d; i += lsize) {
      float a = acc[i] * c;
      for (int j = 0; j < nb; ++j) a += part[j] * v[kv_offset(t0 + j, g, n_kv, n_ctx, d) + i];
      acc[i] = a;
    }
    m = m_new;
    __syncthreads();  // every thread is done with part before the next block rewrites it
  }
  const float inv_l = 1.0f / l;
  for (int64_t i = lid; i < d; i += lsize) out[q_base + i] = acc[i] * inv_l;
}

namespace {

// The call's tensors, found by name and checked against the task signature: q [n_heads, d], k and v
// [n_ctx, n_kv, d] in, out [n_heads, d] out, f32, compact row-major, CUDA device memory; n_heads a multiple of n_kv.
// Anything else is refused rather than guessed at.
struct Attention {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t n_heads;
  int64_t n_kv;
  int64_t n_ctx;
  int64_t d;
  float scale;
};

bool is_compact_cuda_f32(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLCUDA || t.ndim != ndim) return false;
  if (t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1) return false;
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

std::optional<Attention> unpack(const kwb_call& call) {
  const DLTensor* q = find(call.inputs, call.input_names, call.num_inputs, "q");
  const DLTensor* k = find(call.inputs, call.input_names, call.num_inputs, "k");
  const DLTensor* v = find(call.inputs, call.input_names, call.num_inputs, "v");
  const DLTensor* out = find(call.outputs, call.output_names, call.num_outputs, "out");
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr) return std::nullopt;
  if (!is_compact_cuda_f32(*q, 2) || !is_compact_cuda_f32(*k, 3) || !is_compact_cuda_f32(*v, 3) ||
      !is_compact_cuda_f32(*out, 2)) {
    return std::nullopt;
  }
  const int64_t n_heads = q->shape[0], d = q->shape[1], n_ctx = k->shape[0], n_kv = k->shape[1];
  if (k->shape[2] != d || v->shape[0] != n_ctx || v->shape[1] != n_kv || v->shape[2] != d ||
      out->shape[0] != n_heads || out->shape[1] != d) {
    return std::nullopt;
  }
  if (n_ctx < 1 || n_kv < 1 || n_heads % n_kv != 0) return std::nullopt;
  if (n_heads > INT32_MAX) return std::nullopt;  // one block per head: the grid's x extent is at most 2^31 - 1
  return Attention{elements<const float>(*q), elements<const float>(*k), elements<const float>(*v),
                   elements<float>(*out), n_heads, n_kv, n_ctx, d,
                   static_cast<float>(kwb_scalar_or(&call, "scale", 0.08838834764831845))};
}

// The smallest power of two covering both the context and the head, at least one warp and at most k_max_threads:
// a 7-token context with a 96-wide head gets 128 threads, one token's score or one dimension each.
int threads_for(int64_t items) {
  int threads = k_warp;
  while (threads < k_max_threads && threads < items) threads *= 2;
  return threads;
}

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature (or the context is empty, or q and the accumulator do
// not fit in shared memory), 3 when the launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Attention> p = unpack(*call);
  if (!p) return 1;
  if (p->n_heads == 0 || p->d == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const int threads = threads_for(p->n_ctx > p->d ? p->n_ctx : p->d);
  const size_t shared = (2 * static_cast<size_t>(p->d) + static_cast<size_t>(threads)) * sizeof(float);
  if (shared > k_max_shared) return 1;
  // No synchronization: kwb waits for the device inside the timed region.
  attn_flash_decode<<<static_cast<unsigned>(p->n_heads), threads, shared, static_cast<cudaStream_t>(call->stream)>>>(
      p->q, p->k, p->v, p->out, p->n_kv, p->n_ctx, p->d, p->n_heads / p->n_kv, p->scale);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
