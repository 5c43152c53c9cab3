// Top-k, baseline cuda implementation: what an eager framework's fallback does on a GPU, a full sort of every row
// followed by a slice, `order = argsort(x, descending, stable); values = x[order[:k]]; indices = order[:k]`:
//
//   1. topk_make_pairs     (key, index) for every element of x, each row padded to a power of two n_pad
//                          (two rows*n_pad scratch buffers)
//   2. topk_bitonic_step   one compare-exchange stage of a bitonic sorting network over each row, launched
//                          log2(n_pad) (log2(n_pad) + 1) / 2 times: value descending, ties by ascending index
//   3. topk_copy_values    values[r, j]  = x[r, index[r, j]], j < k
//   4. topk_copy_indices   indices[r, j] = index[r, j], j < k
//
// Deliberately wasteful: all n elements of a row are sorted (n log^2 n compare-exchanges, most of them deciding the
// order of entries that are then thrown away) where only k are wanted, in 153 launches for a 128256-entry row, and
// the pairs are written and read back at every stage. The scratch buffers are allocated on the first call of a shape
// and kept (grown, never shrunk), as a framework's caching allocator would. It is the "before" that the selection
// reference (cuda/select.cu) is measured against.
//
// Keys: each float's bits mapped to an unsigned integer that orders as the float does, so the comparisons are
// integer ones, which no flush-to-zero mode can change: subnormals order as they should. Padding entries get key 0,
// below every real key (-inf's is 0x007fffff), and indices past n, so they sort last. The values written are x's
// own bits, copied, never recomputed.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string_view>

KWB_CANDIDATE_ABI

namespace {

// Threads per block of the element-wise kernels.
constexpr int k_threads = 256;

}  // namespace

// x's bits as an unsigned integer that orders as the float does: negative values' bits inverted, positive values'
// sign bit set; -0 first made +0, so that -0 and +0 tie as the task's order says.
__device__ uint32_t order_key(uint32_t bits) {
  const uint32_t b = (bits << 1) == 0u ? 0u : bits;  // -0 ranks as +0: a tie
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Kernels are at global scope with external linkage, so that profilers and kwb's trace name them plainly.
__global__ void topk_make_pairs(const uint32_t* __restrict__ x, uint32_t* __restrict__ keys,
                                uint32_t* __restrict__ ids, int64_t n, int64_t n_pad, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / n_pad;
  const int64_t c = i % n_pad;
  keys[i] = c < n ? order_key(x[r * n + c]) : 0u;
  ids[i] = static_cast<uint32_t>(c);
}

// One stage (block size `size`, distance `dist`) of the bitonic network over each row of n_pad pairs. Within a
// block whose bit `size` is clear the pair ends in the task's order (the one ranking first at the lower position),
// otherwise in the reverse order; the last pass (size = n_pad) leaves every row in the task's order.
__global__ void topk_bitonic_step(uint32_t* __restrict__ keys, uint32_t* __restrict__ ids, int64_t n_pad,
                                  int64_t size, int64_t dist, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t row = i / n_pad;
  const int64_t c = i % n_pad;
  const int64_t partner = c ^ dist;
  if (partner <= c) return;
  const int64_t a = row * n_pad + c;
  const int64_t b = row * n_pad + partner;
  const uint32_t ka = keys[a], kb = keys[b], ia = ids[a], ib = ids[b];
  const bool b_first = kb > ka || (kb == ka && ib < ia);
  const bool want_task_order = (c & size) == 0;
  if (b_first == want_task_order) {
    keys[a] = kb;
    keys[b] = ka;
    ids[a] = ib;
    ids[b] = ia;
  }
}

__global__ void topk_copy_values(const uint32_t* __restrict__ x, const uint32_t* __restrict__ ids,
                                 uint32_t* __restrict__ values, int64_t n, int64_t n_pad, int64_t k, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / k;
  const int64_t j = i % k;
  values[i] = x[r * n + ids[r * n_pad + j]];
}

__global__ void topk_copy_indices(const uint32_t* __restrict__ ids, int64_t* __restrict__ indices, int64_t n_pad,
                                  int64_t k, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / k;
  const int64_t j = i % k;
  indices[i] = static_cast<int64_t>(ids[r * n_pad + j]);
}

namespace {

// Device memory that grows to the largest size a call has asked for and is kept for later calls.
struct Scratch {
  uint32_t* data = nullptr;
  size_t words = 0;

  // false when the device has no memory left for it.
  bool reserve(size_t n) {
    if (n <= words) return true;
    cudaFree(data);  // waits for the kernels of earlier calls that may still read it
    data = nullptr;
    words = 0;
    if (cudaMalloc(&data, n * sizeof(uint32_t)) != cudaSuccess) {
      data = nullptr;
      return false;
    }
    words = n;
    return true;
  }

  void release() {
    cudaFree(data);
    data = nullptr;
    words = 0;
  }
};

Scratch g_keys;  // rows*n_pad order keys
Scratch g_ids;   // rows*n_pad column indices

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

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + k_threads - 1) / k_threads); }

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature (or k is outside 1..n), 2 when a scratch buffer cannot
// be allocated, 3 when a launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<TopK> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  int64_t n_pad = 1;
  while (n_pad < p->n) n_pad *= 2;
  const int64_t total = p->rows * n_pad;
  const int64_t total_out = p->rows * p->k;
  if (total / k_threads >= INT32_MAX) return 1;
  if (!g_keys.reserve(static_cast<size_t>(total)) || !g_ids.reserve(static_cast<size_t>(total))) return 2;
  const auto stream = static_cast<cudaStream_t>(call->stream);
  uint32_t* keys = g_keys.data;
  uint32_t* ids = g_ids.data;

  // No synchronization: kwb waits for the device inside the timed region.
  topk_make_pairs<<<blocks_for(total), k_threads, 0, stream>>>(p->x, keys, ids, p->n, n_pad, total);
  if (cudaGetLastError() != cudaSuccess) return 3;
  for (int64_t size = 2; size <= n_pad; size *= 2) {
    for (int64_t dist = size / 2; dist > 0; dist /= 2) {
      topk_bitonic_step<<<blocks_for(total), k_threads, 0, stream>>>(keys, ids, n_pad, size, dist, total);
      if (cudaGetLastError() != cudaSuccess) return 3;
    }
  }
  topk_copy_values<<<blocks_for(total_out), k_threads, 0, stream>>>(p->x, ids, p->values, p->n, n_pad, p->k,
                                                                    total_out);
  if (cudaGetLastError() != cudaSuccess) return 3;
  topk_copy_indices<<<blocks_for(total_out), k_threads, 0, stream>>>(ids, p->indices, n_pad, p->k, total_out);
  if (cudaGetLastError() != cudaSuccess) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  g_keys.release();
  g_ids.release();
}
