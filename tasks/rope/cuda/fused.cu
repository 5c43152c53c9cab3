// RoPE (interleaved pairs), reference optimized cuda implementation: one kernel, one thread per (pair index, token),
// nothing else.
//
//   rope_fused  thread (i, t): f_i = powf(base, -2i / head_dim), theta = (float)pos[t] * f_i (the cpu reference's
//               float32 formula), c = cosf(theta), s = sinf(theta); then, for every q head and every k head of
//               token t, the pair (2i, 2i+1): out[2i] = x0 c - x1 s, out[2i+1] = x0 s + x1 c
//
// Compared with the baseline (cuda/baseline.cu: eight kernels, thirteen launches) it launches once, reads q and k
// once and writes q_out and k_out once, computes each angle's cos and sin once for all n_heads + n_kv_heads heads of
// its token (the baseline evaluates them on a duplicated table and writes eight temporaries), and never writes or
// re-reads a temporary. Neighbouring threads take neighbouring pairs, so a warp reads and writes a head's pairs as
// one contiguous run.
//
// Precision: the angle is the task's float32 angle (task.toml derives what it costs at 32k positions); powf, cosf
// and sinf are CUDA's accurate functions (kwb builds without fast math: cosf/sinf reduce large arguments exactly,
// Payne-Hanek beyond ~1e5 rad), never the __sinf/__cosf intrinsics, whose reduction is not accurate for angles of
// thousands of rad.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string_view>

KWB_CANDIDATE_ABI

namespace {

// Up to 256 pairs per block: a 128-dim head is one block of 64 threads (two warps) per token.
constexpr int k_max_threads = 256;
constexpr int k_warp = 32;

}  // namespace

// One pair (lo, hi) of one head rotated by the angle whose cosine and sine are c and s.
__device__ void rotate_pair(const float* __restrict__ x, float* __restrict__ y, int64_t lo, int64_t hi, float c,
                            float s) {
  const float x0 = x[lo];
  const float x1 = x[hi];
  y[lo] = x0 * c - x1 * s;
  y[hi] = x0 * s + x1 * c;
}

// blockIdx.x is the token, blockIdx.y * blockDim.x + threadIdx.x the pair index i (threads past head_dim / 2 return
// at once). The pair's two elements are at lo and hi of each head: lo = 2i, hi = 2i + 1 (the interleaved layout).
// Kernels are at global scope with external linkage, so that profilers and kwb's trace name them plainly.
__global__ void __launch_bounds__(k_max_threads)
    rope_fused(const float* __restrict__ q, const float* __restrict__ k, const int32_t* __restrict__ pos,
               float* __restrict__ q_out, float* __restrict__ k_out, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float base) {
  const int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const int64_t t = blockIdx.x;
  if (i >= head_dim / 2) return;
  const int64_t lo = 2 * i, hi = 2 * i + 1;

  const float freq = powf(base, -static_cast<float>(2 * i) / static_cast<float>(head_dim));
  const float theta = static_cast<float>(pos[t]) * freq;
  const float c = cosf(theta);
  const float s = sinf(theta);

  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t at = (t * n_heads + h) * head_dim;
    rotate_pair(q, q_out, at + lo, at + hi, c, s);
  }
  for (int64_t h = 0; h < n_kv_heads; ++h) {
    const int64_t at = (t * n_kv_heads + h) * head_dim;
    rotate_pair(k, k_out, at + lo, at + hi, c, s);
  }
}

namespace {

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
  // One block row per token (the grid's x extent is at most 2^31 - 1), at most 65535 blocks of pairs (its y extent).
  if (q->shape[0] > INT32_MAX || q->shape[2] / 2 > 65535LL * k_max_threads) return std::nullopt;
  const float base = static_cast<float>(kwb_scalar_or(&call, "base", 10000.0));
  return Rope{elements<const float>(*q), elements<const float>(*k), elements<const int32_t>(*pos),
              elements<float>(*q_out),   elements<float>(*k_out),   q->shape[0],
              q->shape[1],               k->shape[1],               q->shape[2],
              base};
}

// The smallest whole number of warps that covers a head's pairs, at most k_max_threads: head_dim 2 (one pair) gets
// one warp instead of 256 threads of which 255 idle.
int threads_for(int64_t pairs) {
  const int64_t warps = (pairs + k_warp - 1) / k_warp;
  return static_cast<int>(warps >= k_max_threads / k_warp ? k_max_threads : (warps < 1 ? 1 : warps) * k_warp);
}

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature, 3 when the launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rope> p = unpack(*call);
  if (!p) return 1;
  if (p->n_tokens == 0 || p->head_dim == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const int64_t pairs = p->head_dim / 2;
  const int threads = threads_for(pairs);
  const dim3 grid(static_cast<unsigned>(p->n_tokens), static_cast<unsigned>((pairs + threads - 1) / threads));
  // No synchronization: kwb waits for the device inside the timed region.
  rope_fused<<<grid, threads, 0, static_cast<cudaStream_t>(call->stream)>>>(
      p->q, p->k, p->pos, p->q_out, p->k_out, p->n_heads, p->n_kv_heads, p->head_dim, p->base);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
