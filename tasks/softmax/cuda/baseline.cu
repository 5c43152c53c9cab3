// Softmax, baseline cuda implementation: the textbook composition of five element-wise and reduction kernels, the
// way an eager framework runs `e = (x - x.amax(-1, keepdim=True)).exp(); y = e / e.sum(-1, keepdim=True)` on a GPU
// (the same five passes as cpu/baseline.cpp).
//
//   1. sm_row_max   m = max(x, last axis)       (rows scratch buffer; one block per row, tree in shared memory)
//   2. sm_sub_max   t = x - m, m broadcast      (rows*cols scratch buffer)
//   3. sm_exp       e = exp(t)                  (rows*cols scratch buffer; expf, 2 ulp, no fast math)
//   4. sm_row_sum   s = sum(e, last axis)       (rows scratch buffer; one block per row, tree in shared memory)
//   5. sm_divide    y = e / s, s broadcast      (into the output)
//
// Deliberately unfused: five launches on the call's stream, each a full sweep over its operand, so a profiler sees
// five kernels and two rows*cols temporaries written and read back. The scratch buffers are allocated on the first
// call that needs them and kept (grown, never shrunk) for later calls, as a framework's caching allocator would:
// cudaMalloc and cudaFree synchronize the device and would cost more than the kernels. It is the "before" that the
// fused reference (cuda/fused.cu) is measured against.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// Threads per block of every kernel. The reductions' tree halves it at each step, so it is a power of two.
constexpr int k_threads = 256;

}  // namespace

// Element-wise kernels take the element count n: the grid is rounded up to whole blocks, so the last block has
// threads past the end. A thread past a row's end enters a reduction with the operation's identity. Kernels are at
// global scope with external linkage, so that profilers and kwb's trace name them plainly.
__global__ void sm_row_max(const float* __restrict__ x, float* __restrict__ m, int64_t cols) {
  __shared__ float partial[k_threads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  float v = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) v = x[base + c] > v ? x[base + c] : v;
  partial[threadIdx.x] = v;
  __syncthreads();
  for (unsigned active = blockDim.x / 2; active > 0; active /= 2) {
    if (threadIdx.x < active && partial[threadIdx.x + active] > partial[threadIdx.x]) {
      partial[threadIdx.x] = partial[threadIdx.x + active];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) m[blockIdx.x] = partial[0];
}

__global__ void sm_sub_max(const float* __restrict__ x, const float* __restrict__ m, float* __restrict__ t,
                           int64_t cols, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) t[i] = x[i] - m[i / cols];
}

__global__ void sm_exp(const float* __restrict__ t, float* __restrict__ e, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) e[i] = expf(t[i]);
}

__global__ void sm_row_sum(const float* __restrict__ e, float* __restrict__ s, int64_t cols) {
  __shared__ float partial[k_threads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += e[base + c];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned active = blockDim.x / 2; active > 0; active /= 2) {
    if (threadIdx.x < active) partial[threadIdx.x] += partial[threadIdx.x + active];
    __syncthreads();
  }
  if (threadIdx.x == 0) s[blockIdx.x] = partial[0];
}

__global__ void sm_divide(const float* __restrict__ e, const float* __restrict__ s, float* __restrict__ y,
                          int64_t cols, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = e[i] / s[i / cols];
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

Scratch g_max;   // m: per row the maximum
Scratch g_diff;  // t: x - m, rows*cols floats
Scratch g_exp;   // e: exp(t), rows*cols floats
Scratch g_sum;   // s: per row the sum of e

// The call's tensors, checked against the task signature: x [rows, cols] in, y [rows, cols] out, both f32,
// compact row-major, CUDA device memory. Anything else is refused rather than guessed at.
struct Softmax {
  const float* x;
  float* y;
  int64_t rows;
  int64_t cols;
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

std::optional<Softmax> unpack(const kwb_call& call) {
  if (call.num_inputs != 1 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& y = call.outputs[0];
  if (!is_compact_cuda_f32(x, 2) || !is_compact_cuda_f32(y, 2)) return std::nullopt;
  if (y.shape[0] != x.shape[0] || y.shape[1] != x.shape[1]) return std::nullopt;
  // One block per row in the reductions, one thread per element elsewhere: both grids must fit in 2^31 - 1 blocks.
  if (x.shape[0] > INT32_MAX || x.shape[0] * x.shape[1] / k_threads >= INT32_MAX) return std::nullopt;
  return Softmax{elements<const float>(x), elements<float>(y), x.shape[0], x.shape[1]};
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + k_threads - 1) / k_threads); }

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature (or a row is empty), 2 when a scratch buffer cannot be
// allocated, 3 when a launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  if (p->rows == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const int64_t n = p->rows * p->cols;
  if (!g_max.reserve(static_cast<size_t>(p->rows)) || !g_diff.reserve(static_cast<size_t>(n)) ||
      !g_exp.reserve(static_cast<size_t>(n)) || !g_sum.reserve(static_cast<size_t>(p->rows))) {
    return 2;
  }
  const auto stream = static_cast<cudaStream_t>(call->stream);
  const unsigned rows = static_cast<unsigned>(p->rows);

  // No synchronization: kwb waits for the device inside the timed region.
  sm_row_max<<<rows, k_threads, 0, stream>>>(p->x, g_max.data, p->cols);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sm_sub_max<<<blocks_for(n), k_threads, 0, stream>>>(p->x, g_max.data, g_diff.data, p->cols, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sm_exp<<<blocks_for(n), k_threads, 0, stream>>>(g_diff.data, g_exp.data, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sm_row_sum<<<rows, k_threads, 0, stream>>>(g_exp.data, g_sum.data, p->cols);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sm_divide<<<blocks_for(n), k_threads, 0, stream>>>(g_exp.data, g_sum.data, p->y, p->cols, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  g_max.release();
  g_diff.release();
  g_exp.release();
  g_sum.release();
}
