// Decode attention, baseline cuda implementation: the textbook composition of eight kernels, the way an eager
// framework runs `s = (q @ k.T) * scale; p = softmax(s); out = p @ v` for one token on a GPU:
//
//   1. attn_qk         raw[h, t] = sum_i q[h, i] * k[t, g, i]   (one thread per score; g = h / group)
//   2. attn_scale      s = raw * scale
//   3. attn_row_max    m[h] = max_t s[h, t]                     (one block per head, tree in shared memory)
//   4. attn_sub_max    z = s - m, m broadcast
//   5. attn_exp        e = exp(z)
//   6. attn_row_sum    l[h] = sum_t e[h, t]                     (one block per head, tree in shared memory)
//   7. attn_normalize  p = e / l, l broadcast
//   8. attn_weighted   out[h, i] = sum_t p[h, t] * v[t, g, i]   (one thread per output, sequential over t)
//
// Deliberately unfused: eight launches on the call's stream, each a full sweep over its operand, so a profiler sees
// eight kernels and the n_heads*n_ctx score matrix written and read back five times. The scratch buffers (two
// n_heads*n_ctx ping-pong buffers and two per-head ones) are allocated on the first call of a shape and kept
// (grown, never shrunk) for later calls, as a framework's caching allocator would. It is the "before" that the fused
// flash-decoding reference (cuda/flash_decode.cu) is measured against. expf is CUDA's accurate one (kwb builds
// without fast math).
//
// Layout: q and out [n_heads, head_dim], k and v [n_ctx, n_kv_heads, head_dim] (token-major), f32, compact
// row-major; n_heads = n_kv_heads * group. NaN: a NaN score is skipped by the max, but exp(NaN - m) is NaN and
// poisons the head's sum, so the whole head comes out NaN, as the oracle's.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

KWB_CANDIDATE_ABI

namespace {

// Threads per block, for the element-wise kernels and the row reductions alike.
constexpr int k_threads = 256;

}  // namespace

// Kernels are at global scope with external linkage, so that profilers and kwb's trace name them plainly.
__global__ void attn_qk(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ raw,
                        int64_t n_heads, int64_t n_kv, int64_t n_ctx, int64_t d, int64_t group) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_heads * n_ctx) return;
  const int64_t h = i / n_ctx;
  const int64_t t = i % n_ctx;
  const int64_t g = h / group;
  const float* qh = q + h * d;
  const float* kt = k + (t * n_kv + g) * d;
  float sum = 0.0f;
  for (int64_t c = 0; c < d; ++c) sum += qh[c] * kt[c];
  raw[i] = sum;
}

__global__ void attn_scale(const float* __restrict__ raw, float* __restrict__ s, float scale, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) s[i] = raw[i] * scale;
}

__global__ void attn_row_max(const float* __restrict__ s, float* __restrict__ m, int64_t n_ctx) {
  __shared__ float partial[k_threads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * n_ctx;
  float best = -INFINITY;
  for (int64_t c = threadIdx.x; c < n_ctx; c += blockDim.x) best = s[base + c] > best ? s[base + c] : best;
  partial[threadIdx.x] = best;
  __syncthreads();
  for (unsigned active = blockDim.x / 2; active > 0; active /= 2) {
    if (threadIdx.x < active) {
      const float other = partial[threadIdx.x + active];
      partial[threadIdx.x] = other > partial[threadIdx.x] ? other : partial[threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) m[blockIdx.x] = partial[0];
}

__global__ void attn_sub_max(const float* __restrict__ s, const float* __restrict__ m, float* __restrict__ z,
                             int64_t n_ctx, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) z[i] = s[i] - m[i / n_ctx];
}

__global__ void attn_exp(const float* __restrict__ z, float* __restrict__ e, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) e[i] = expf(z[i]);
}

__global__ void attn_row_sum(const float* __restrict__ e, float* __restrict__ l, int64_t n_ctx) {
  __shared__ float partial[k_threads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * n_ctx;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < n_ctx; c += blockDim.x) sum += e[base + c];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned active = blockDim.x / 2; active > 0; active /= 2) {
    if (threadIdx.x < active) partial[threadIdx.x] += partial[threadIdx.x + active];
    __syncthreads();
  }
  if (threadIdx.x == 0) l[blockIdx.x] = partial[0];
}

__global__ void attn_normalize(const float* __restrict__ e, const float* __restrict__ l, float* __restrict__ p,
                               int64_t n_ctx, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = e[i] / l[i / n_ctx];
}

__global__ void attn_weighted(const float* __restrict__ p, const float* __restrict__ v, float* __restrict__ out,
                              int64_t n_heads, int64_t n_kv, int64_t n_ctx, int64_t d, int64_t group) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_heads * d) return;
  const int64_t h = i / d;
  const int64_t c = i % d;
  const int64_t g = h / group;
  const float* ph = p + h * n_ctx;
  float sum = 0.0f;
  for (int64_t t = 0; t < n_ctx; ++t) sum += ph[t] * v[(t * n_kv + g) * d + c];
  out[i] = sum;
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
    if (cudaMalloc(&data, n * sizeof(float)) != cudaSuccess) {
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

Scratch g_a;  // n_heads*n_ctx floats: raw, then z, then p
Scratch g_b;  // n_heads*n_ctx floats: s, then e
Scratch g_m;  // n_heads floats: the row maxima
Scratch g_l;  // n_heads floats: the row sums

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

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + k_threads - 1) / k_threads); }

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature (or the context is empty), 2 when a scratch buffer
// cannot be allocated, 3 when a launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Attention> p = unpack(*call);
  if (!p) return 1;
  if (p->n_heads == 0 || p->d == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const int64_t n = p->n_heads * p->n_ctx;
  const int64_t n_out = p->n_heads * p->d;
  if (n / k_threads >= INT32_MAX || n_out / k_threads >= INT32_MAX) return 1;
  if (!g_a.reserve(static_cast<size_t>(n)) || !g_b.reserve(static_cast<size_t>(n)) ||
      !g_m.reserve(static_cast<size_t>(p->n_heads)) || !g_l.reserve(static_cast<size_t>(p->n_heads))) {
    return 2;
  }
  const auto stream = static_cast<cudaStream_t>(call->stream);
  const int64_t group = p->n_heads / p->n_kv;
  const unsigned heads = static_cast<unsigned>(p->n_heads);
  float* a = g_a.data;
  float* b = g_b.data;

  // No synchronization: kwb waits for the device inside the timed region.
  attn_qk<<<blocks_for(n), k_threads, 0, stream>>>(p->q, p->k, a, p->n_heads, p->n_kv, p->n_ctx, p->d, group);
  if (cudaGetLastError() != cudaSuccess) return 3;
  attn_scale<<<blocks_for(n), k_threads, 0, stream>>>(a, b, p->scale, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  attn_row_max<<<heads, k_threads, 0, stream>>>(b, g_m.data, p->n_ctx);
  if (cudaGetLastError() != cudaSuccess) return 3;
  attn_sub_max<<<blocks_for(n), k_threads, 0, stream>>>(b, g_m.data, a, p->n_ctx, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  attn_exp<<<blocks_for(n), k_threads, 0, stream>>>(a, b, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  attn_row_sum<<<heads, k_threads, 0, stream>>>(b, g_l.data, p->n_ctx);
  if (cudaGetLastError() != cudaSuccess) return 3;
  attn_normalize<<<blocks_for(n), k_threads, 0, stream>>>(b, g_l.data, a, p->n_ctx, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  attn_weighted<<<blocks_for(n_out), k_threads, 0, stream>>>(a, p->v, p->out, p->n_heads, p->n_kv, p->n_ctx, p->d,
                                                             group);
  if (cudaGetLastError() != cudaSuccess) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  g_a.release();
  g_b.release();
  g_m.release();
  g_l.release();
}
