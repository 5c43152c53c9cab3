// LayerNorm, baseline cuda implementation: the textbook composition of element-wise and reduction kernels, the way an
// eager framework runs `m = x.mean(-1, keepdim=True); t = x - m; v = (t * t).mean(-1, keepdim=True);
// y = t * (v + eps).rsqrt() * w + b` on a GPU (the same seven launches as opencl/baseline.cpp).
//
//   1. ln_row_mean   m = mean(x, last axis)       (rows scratch buffer; one block per row, tree in shared memory)
//   2. ln_center     t = x - m, m broadcast        (rows*cols scratch buffer)
//   3. ln_square     s = t * t                     (rows*cols scratch buffer)
//   4. ln_row_mean   v = mean(s, last axis)        (rows scratch buffer; the same kernel as step 1)
//   5. ln_rstd       v = 1 / sqrt(v + eps)         (in place)
//   6. ln_normalize  y = t * v, v broadcast        (into the output)
//   7. ln_affine     y = y * weight + bias         (in place, in the output)
//
// Deliberately unfused: seven launches on the call's stream, each a full sweep over its operand, so a profiler sees
// seven kernels, the rows*cols temporaries t and s written and read back, y written and read back, and x read twice.
// The scratch buffers are allocated on the first call that needs them and kept (grown, never shrunk) for later
// calls, as a framework's caching allocator would: cudaMalloc and cudaFree synchronize the device and would cost
// more than the kernels. It is the "before" that the fused reference (cuda/fused.cu) is measured against.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string_view>

KWB_CANDIDATE_ABI

namespace {

// Threads per block of every kernel. The reduction's tree halves it at each step, so it is a power of two.
constexpr int k_threads = 256;

}  // namespace

// Element-wise kernels take the element count n: the grid is rounded up to whole blocks, so the last block has
// threads past the end. A thread past the end of a short row adds 0 to the tree. Kernels are at global scope with
// external linkage, so that profilers and kwb's trace name them plainly.
__global__ void ln_row_mean(const float* __restrict__ a, float* __restrict__ m, int64_t cols) {
  __shared__ float partial[k_threads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += a[base + c];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned active = blockDim.x / 2; active > 0; active /= 2) {
    if (threadIdx.x < active) partial[threadIdx.x] += partial[threadIdx.x + active];
    __syncthreads();
  }
  if (threadIdx.x == 0) m[blockIdx.x] = partial[0] / static_cast<float>(cols);
}

__global__ void ln_center(const float* __restrict__ x, const float* __restrict__ m, float* __restrict__ t,
                          int64_t cols, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) t[i] = x[i] - m[i / cols];
}

__global__ void ln_square(const float* __restrict__ t, float* __restrict__ s, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) s[i] = t[i] * t[i];
}

__global__ void ln_rstd(float* v, float eps, int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) v[r] = 1.0f / sqrtf(v[r] + eps);
}

__global__ void ln_normalize(const float* __restrict__ t, const float* __restrict__ v, float* __restrict__ y,
                             int64_t cols, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = t[i] * v[i / cols];
}

__global__ void ln_affine(float* __restrict__ y, const float* __restrict__ weight, const float* __restrict__ bias,
                          int64_t cols, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * weight[i % cols] + bias[i % cols];
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

Scratch g_centered;  // t: x - mean, rows*cols floats
Scratch g_squares;   // s: (x - mean)^2, rows*cols floats
Scratch g_mean;      // m: per row the mean
Scratch g_var;       // v: per row the variance, then 1 / sqrt(variance + eps)

// The call's tensors, found by name and checked against the task signature: x [rows, cols], weight [cols] and
// bias [cols] in, y [rows, cols] out, all f32, compact row-major, CUDA device memory. Anything else is refused
// rather than guessed at.
struct Layernorm {
  const float* x;
  const float* weight;
  const float* bias;
  float* y;
  int64_t rows;
  int64_t cols;
  float eps;
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

std::optional<Layernorm> unpack(const kwb_call& call) {
  const DLTensor* x = find(call.inputs, call.input_names, call.num_inputs, "x");
  const DLTensor* weight = find(call.inputs, call.input_names, call.num_inputs, "weight");
  const DLTensor* bias = find(call.inputs, call.input_names, call.num_inputs, "bias");
  const DLTensor* y = find(call.outputs, call.output_names, call.num_outputs, "y");
  if (x == nullptr || weight == nullptr || bias == nullptr || y == nullptr) return std::nullopt;
  if (!is_compact_cuda_f32(*x, 2) || !is_compact_cuda_f32(*weight, 1) || !is_compact_cuda_f32(*bias, 1) ||
      !is_compact_cuda_f32(*y, 2)) {
    return std::nullopt;
  }
  if (weight->shape[0] != x->shape[1] || bias->shape[0] != x->shape[1] || y->shape[0] != x->shape[0] ||
      y->shape[1] != x->shape[1]) {
    return std::nullopt;
  }
  // One block per row in ln_row_mean, one thread per element elsewhere: both grids must fit in 2^31 - 1 blocks.
  if (x->shape[0] > INT32_MAX || x->shape[0] * x->shape[1] / k_threads >= INT32_MAX) return std::nullopt;
  const float eps = static_cast<float>(kwb_scalar_or(&call, "eps", 1e-5));
  return Layernorm{elements<const float>(*x), elements<const float>(*weight), elements<const float>(*bias),
                   elements<float>(*y),       x->shape[0],                     x->shape[1],
                   eps};
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + k_threads - 1) / k_threads); }

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature, 2 when a scratch buffer cannot be allocated, 3 when a
// launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Layernorm> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0 || p->cols == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const int64_t n = p->rows * p->cols;
  if (!g_centered.reserve(static_cast<size_t>(n)) || !g_squares.reserve(static_cast<size_t>(n)) ||
      !g_mean.reserve(static_cast<size_t>(p->rows)) || !g_var.reserve(static_cast<size_t>(p->rows))) {
    return 2;
  }
  const auto stream = static_cast<cudaStream_t>(call->stream);
  const unsigned rows = static_cast<unsigned>(p->rows);

  // No synchronization: kwb waits for the device inside the timed region.
  ln_row_mean<<<rows, k_threads, 0, stream>>>(p->x, g_mean.data, p->cols);
  if (cudaGetLastError() != cudaSuccess) return 3;
  ln_center<<<blocks_for(n), k_threads, 0, stream>>>(p->x, g_mean.data, g_centered.data, p->cols, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  ln_square<<<blocks_for(n), k_threads, 0, stream>>>(g_centered.data, g_squares.data, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  ln_row_mean<<<rows, k_threads, 0, stream>>>(g_squares.data, g_var.data, p->cols);
  if (cudaGetLastError() != cudaSuccess) return 3;
  ln_rstd<<<blocks_for(p->rows), k_threads, 0, stream>>>(g_var.data, p->eps, p->rows);
  if (cudaGetLastError() != cudaSuccess) return 3;
  ln_normalize<<<blocks_for(n), k_threads, 0, stream>>>(g_centered.data, g_var.data, p->y, p->cols, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  ln_affine<<<blocks_for(n), k_threads, 0, stream>>>(p->y, p->weight, p->bias, p->cols, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  g_centered.release();
  g_squares.release();
  g_mean.release();
  g_var.release();
}
