// Top-k, reference optimized cuda implementation: a selection, not a sort. One kernel, one thread block per row:
//
//   topk_select  1. radix select: the key of the row's k-th ranked entry, T, found 8 bits at a time from the top in
//                   four sweeps of the row, each a 256-bin histogram in shared memory (atomicAdd) of the entries
//                   whose key matches the bits found so far; with it, how many entries equal to T the answer keeps
//                   (take_eq >= 1; all entries above T are kept, k - take_eq of them).
//                2. gather: one more sweep in tiles of one entry per thread. An entry above T takes the next free
//                   slot (a shared atomic counter; their order does not matter yet). Entries equal to T are
//                   numbered in index order by a prefix sum over the tile, and the first take_eq of them are kept,
//                   the lowest-indexed ones, as the tie rule says; once they are found the prefix sums stop.
//                3. rank: each of the k survivors counts the survivors that rank before it (larger key, or the same
//                   key and a smaller index) and writes itself to that position of the outputs.
//
// Compared with the sorting baseline it launches once instead of up to 155 times, reads each row five times and
// writes only the k outputs, keeps no scratch buffer (the survivors, the histogram and the prefix sums are in shared
// memory), and does O(n + k^2 / threads) work per thread instead of a full sort's O(n log^2 n) in total.
//
// Keys: each float's bits mapped to an unsigned integer that orders as the float does, so the comparisons are
// integer ones, which no flush-to-zero mode can change: subnormals order as they should. The values written are x's
// own bits, copied, never recomputed. The task's inputs hold no NaN.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string_view>

KWB_CANDIDATE_ABI

namespace {

// Threads per row: 256 gives a 32000-entry row 125 entries per thread and sweep.
constexpr int k_max_threads = 256;
constexpr int k_warp = 32;
// The dynamic shared memory a block may use without opting in.
constexpr size_t k_max_shared = 48 * 1024;

}  // namespace

// x's bits as an unsigned integer that orders as the float does: negative values' bits inverted, positive values'
// sign bit set; -0 first made +0, so that -0 and +0 tie as the task's order says.
__device__ uint32_t order_key(uint32_t bits) {
  const uint32_t b = (bits << 1) == 0u ? 0u : bits;  // -0 ranks as +0: a tie
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// One block per row; blockDim.x a power of two. Shared memory: hist (256 counters), scan (one per thread), then
// sel_key and sel_idx (k each).
__global__ void __launch_bounds__(k_max_threads)
    topk_select(const uint32_t* __restrict__ x, uint32_t* __restrict__ values, int64_t* __restrict__ indices,
                uint32_t n, uint32_t k) {
  extern __shared__ uint32_t shared[];
  __shared__ uint32_t state[3];  // the key bits found so far, how many entries of that prefix are still wanted, slots
  const uint32_t lid = threadIdx.x;
  const uint32_t lsize = blockDim.x;
  uint32_t* hist = shared;
  uint32_t* scan = shared + 256;
  uint32_t* sel_key = scan + lsize;
  uint32_t* sel_idx = sel_key + k;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * n;
  const int64_t out_base = static_cast<int64_t>(blockIdx.x) * k;

  // 1. Radix select, 8 bits at a time from the top. Invariant: at least state[1] entries match the prefix.
  if (lid == 0) {
    state[0] = 0u;
    state[1] = k;
    state[2] = 0u;
  }
  uint32_t mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint32_t b = lid; b < 256u; b += lsize) hist[b] = 0u;
    __syncthreads();
    const uint32_t prefix = state[0];
    for (uint32_t c = lid; c < n; c += lsize) {
      const uint32_t key = order_key(x[base + c]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (lid == 0) {
      uint32_t wanted = state[1];
      uint32_t digit = 255u;
      while (hist[digit] < wanted) {
        wanted -= hist[digit];
        --digit;
      }
      state[0] = prefix | (digit << shift);
      state[1] = wanted;
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  const uint32_t threshold = state[0];
  const uint32_t take_eq = state[1];
  const uint32_t n_gt = k - take_eq;

  // 2. Gather the survivors: above T in slots [0, n_gt), any order; the first take_eq equal to T in [n_gt, k), in
  //    index order. eq_seen is the same in every thread, so the branch around the prefix sum is uniform.
  uint32_t eq_seen = 0u;
  for (uint32_t t0 = 0; t0 < n; t0 += lsize) {
    const uint32_t c = t0 + lid;
    const uint32_t key = c < n ? order_key(x[base + c]) : 0u;
    if (c < n && key > threshold) {
      const uint32_t slot = atomicAdd(&state[2], 1u);
      sel_key[slot] = key;
      sel_idx[slot] = c;
    }
    if (eq_seen < take_eq) {
      const uint32_t is_eq = c < n && key == threshold ? 1u : 0u;
      scan[lid] = is_eq;
      __syncthreads();
      for (uint32_t off = 1; off < lsize; off *= 2) {
        const uint32_t add = lid >= off ? scan[lid - off] : 0u;
        __syncthreads();
        scan[lid] += add;
        __syncthreads();
      }
      const uint32_t eq_rank = eq_seen + scan[lid] - is_eq;
      if (is_eq != 0u && eq_rank < take_eq) {
        sel_key[n_gt + eq_rank] = key;
        sel_idx[n_gt + eq_rank] = c;
      }
      eq_seen += scan[lsize - 1];
      __syncthreads();  // every thread has read scan before the next tile rewrites it
    }
  }
  __syncthreads();

  // 3. Each survivor's position: the number of survivors that rank before it in the task's order.
  for (uint32_t s = lid; s < k; s += lsize) {
    const uint32_t key = sel_key[s];
    const uint32_t idx = sel_idx[s];
    uint32_t rank = 0u;
    for (uint32_t f = 0; f < k; ++f) rank += sel_key[f] > key || (sel_key[f] == key && sel_idx[f] < idx) ? 1u : 0u;
    const uint32_t pos = rank;
    values[out_base + pos] = x[base + idx];
    indices[out_base + pos] = static_cast<int64_t>(idx);
  }
}

namespace {

// The call's tensors, found by name and checked against the task signature: x [rows, n] f32 in; values [rows, k]
// f32 and indices [rows, k] i64 out, with 1 <= k <= n; compact row-major CUDA device memory. Anything else is refused
// rather than guessed at.
struct TopK {
  const uint32_t* x;  // x's bits
  uint32_t* values;   // values' bits
  int64_t* indices;
  int64_t rows;
  int64_t n;
  int64_t k;
};

bool is_compact_cuda(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLCUDA || t.ndim != ndim) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > INT32_MAX) return false;  // the kernels index a row with 32 bits
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

std::optional<TopK> unpack(const kwb_call& call) {
  const DLTensor* x = find(call.inputs, call.input_names, call.num_inputs, "x");
  const DLTensor* values = find(call.outputs, call.output_names, call.num_outputs, "values");
  const DLTensor* indices = find(call.outputs, call.output_names, call.num_outputs, "indices");
  if (x == nullptr || values == nullptr || indices == nullptr) return std::nullopt;
  if (!is_compact_cuda(*x, 2, kDLFloat, 32) || !is_compact_cuda(*values, 2, kDLFloat, 32) ||
      !is_compact_cuda(*indices, 2, kDLInt, 64)) {
    return std::nullopt;
  }
  const int64_t rows = x->shape[0], n = x->shape[1], k = values->shape[1];
  if (values->shape[0] != rows || indices->shape[0] != rows || indices->shape[1] != k || k < 1 || k > n) {
    return std::nullopt;
  }
  return TopK{elements<const uint32_t>(*x), elements<uint32_t>(*values), elements<int64_t>(*indices), rows, n, k};
}

// The smallest power of two that covers a row, at least one warp and at most k_max_threads: short rows (1000 x 11,
// 512 x 8) get one warp instead of 256 threads of which most idle.
int threads_for(int64_t n) {
  int threads = k_warp;
  while (threads < k_max_threads && threads < n) threads *= 2;
  return threads;
}

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature (or k is outside 1..n, or the k survivors do not fit in
// shared memory), 3 when the launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<TopK> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const int threads = threads_for(p->n);
  const size_t shared = (256 + static_cast<size_t>(threads) + 2 * static_cast<size_t>(p->k)) * sizeof(uint32_t);
  if (shared > k_max_shared) return 1;
  // No synchronization: kwb waits for the device inside the timed region.
  topk_select<<<static_cast<unsigned>(p->rows), threads, shared, static_cast<cudaStream_t>(call->stream)>>>(
      p->x, p->values, p->indices, static_cast<uint32_t>(p->n), static_cast<uint32_t>(p->k));
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
