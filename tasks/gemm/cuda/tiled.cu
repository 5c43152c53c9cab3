// GEMM, reference optimized cuda implementation: C = A B tiled in shared memory, each thread computing four outputs.
//
//   gemm_tiled  a block of 32 x 8 threads owns a 32 x 32 tile of C. For each depth step of 32 it copies a 32 x 32
//               tile of A and one of B into shared memory (each thread four elements of each, a warp reading 32
//               adjacent floats: coalesced), waits at __syncthreads, and then each thread adds 32 products to each of
//               its four accumulators (rows ty, ty + 8, ty + 16, ty + 24 of the tile, column tx), reading one B value
//               from shared memory for four multiply-adds. A warp is one row ty: its reads of a_tile are broadcasts
//               and its reads of b_tile 32 consecutive words, so there are no bank conflicts.
//
// Compared with the naive baseline each element of A and B is read from global memory once per block instead of
// once per thread: 32 times fewer global reads. Elements outside A or B (the edge tiles of 67 x 129 x 45, or a k no
// tile divides) are loaded as 0, whose products add exactly 0, and only in-range outputs are stored. Each c[i, j]
// is still one float accumulator summed over p in order (a zero product changes no sum; nvcc's FMA contraction only
// removes roundings), so the recursive-summation bound the tolerance is derived from applies unchanged.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

constexpr int k_tile = 32;                           // C, A and B tiles are k_tile x k_tile
constexpr int k_rows_per_thread = 4;                 // outputs per thread, one column, rows k_items_y apart
constexpr int k_items_y = k_tile / k_rows_per_thread;  // threads per block in y

}  // namespace

// One block per 32 x 32 tile of C: blockIdx.x over column tiles, blockIdx.y over row tiles. Kernels are at global
// scope with external linkage, so that profilers and kwb's trace name them plainly.
__global__ void __launch_bounds__(k_tile * k_items_y)
    gemm_tiled(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int64_t m,
               int64_t k, int64_t n) {
  __shared__ float a_tile[k_tile][k_tile];
  __shared__ float b_tile[k_tile][k_tile];
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * k_tile;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * k_tile + tx;

  float acc[k_rows_per_thread];
#pragma unroll
  for (int r = 0; r < k_rows_per_thread; ++r) acc[r] = 0.0f;

  for (int64_t p0 = 0; p0 < k; p0 += k_tile) {
#pragma unroll
    for (int r = 0; r < k_rows_per_thread; ++r) {
      const int lr = ty + r * k_items_y;
      const int64_t a_row = row0 + lr, a_col = p0 + tx;
      a_tile[lr][tx] = (a_row < m && a_col < k) ? a[a_row * k + a_col] : 0.0f;
      const int64_t b_row = p0 + lr;
      b_tile[lr][tx] = (b_row < k && col < n) ? b[b_row * n + col] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int q = 0; q < k_tile; ++q) {
      const float bv = b_tile[q][tx];
#pragma unroll
      for (int r = 0; r < k_rows_per_thread; ++r) acc[r] += a_tile[ty + r * k_items_y][q] * bv;
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < k_rows_per_thread; ++r) {
    const int64_t c_row = row0 + ty + r * k_items_y;
    if (c_row < m && col < n) c[c_row * n + col] = acc[r];
  }
}

namespace {

// The call's tensors, checked against the task signature: a [m, k] and b [k, n] in, c [m, n] out, all f32,
// compact row-major, CUDA device memory. Anything else is refused rather than guessed at.
struct Gemm {
  const float* a;
  const float* b;
  float* c;
  int64_t m;
  int64_t k;
  int64_t n;
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

template <typename T>
T* elements(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

std::optional<Gemm> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& a = call.inputs[0];
  const DLTensor& b = call.inputs[1];
  const DLTensor& c = call.outputs[0];
  if (!is_compact_cuda_f32(a, 2) || !is_compact_cuda_f32(b, 2) || !is_compact_cuda_f32(c, 2)) return std::nullopt;
  if (b.shape[0] != a.shape[1] || c.shape[0] != a.shape[0] || c.shape[1] != b.shape[1]) return std::nullopt;
  // The grid's y extent is at most 65535 blocks; its x extent 2^31 - 1.
  if ((a.shape[0] + k_tile - 1) / k_tile > 65535 || (b.shape[1] + k_tile - 1) / k_tile > INT32_MAX) {
    return std::nullopt;
  }
  return Gemm{elements<const float>(a), elements<const float>(b), elements<float>(c), a.shape[0], a.shape[1],
              b.shape[1]};
}

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature, 3 when the launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Gemm> p = unpack(*call);
  if (!p) return 1;
  if (p->m == 0 || p->n == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const auto stream = static_cast<cudaStream_t>(call->stream);
  const unsigned tiles_x = static_cast<unsigned>((p->n + k_tile - 1) / k_tile);
  const unsigned tiles_y = static_cast<unsigned>((p->m + k_tile - 1) / k_tile);
  // No synchronization: kwb waits for the device inside the timed region.
  gemm_tiled<<<dim3(tiles_x, tiles_y), dim3(k_tile, k_items_y), 0, stream>>>(p->a, p->b, p->c, p->m, p->k, p->n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  return 0;
}
