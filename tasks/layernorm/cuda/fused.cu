// LayerNorm, reference optimized cuda implementation: one kernel, one thread block per row, nothing else (the cuda
// port of opencl/fused.cpp).
//
//   layernorm_fused  each thread sums a strided slice of its row, the block adds the partial sums with warp
//                    shuffles and one round through shared memory: the mean. The same again for the squared
//                    deviations from it: the variance (the two-pass form, never E[x^2] - E[x]^2). Then each thread
//                    writes its slice of y[r, :] = (x[r, :] - mean) * rsqrt(var + eps) * weight + bias
//
// Compared with the seven-launch baseline it launches once, reads x three times (the second and third reads hit the
// L2 the first one filled) and writes y once, and never writes or re-reads a temporary. Every sum stays in float: a
// thread adds at most ceil(cols / block size) terms and the shuffle tree adds the partial sums pairwise, so the
// rounding error is smaller than that of the sequential sums the tolerance is derived from. rsqrtf is within 2 ulp
// (kwb builds without fast math).
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string_view>

KWB_CANDIDATE_ABI

namespace {

// Wide enough for a 4096-element row to give each thread 16 elements, narrow enough to keep several blocks per SM.
constexpr int k_max_threads = 256;
constexpr int k_warp = 32;

}  // namespace

// The sum of `v` over the block, returned to every thread. The block is a whole number of warps (at most 32 of
// them), so every shuffle has all 32 lanes present; `partial` holds one float per warp. It ends with a barrier
// after every thread has read the total, so `partial` can be reused for the next sum.
__device__ float block_sum(float v, float* partial) {
  for (int offset = k_warp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int warp = static_cast<int>(threadIdx.x) / k_warp;
  const int lane = static_cast<int>(threadIdx.x) % k_warp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x) / k_warp ? partial[lane] : 0.0f;
    for (int offset = k_warp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  const float total = partial[0];
  __syncthreads();
  return total;
}

// One block per row. A row shorter than the block leaves some threads without elements; they add 0 to the sums.
// Kernels are at global scope with external linkage, so that profilers and kwb's trace name them plainly.
__global__ void __launch_bounds__(k_max_threads)
    layernorm_fused(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                    float* __restrict__ y, int64_t cols, float eps) {
  __shared__ float partial[k_warp];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  const float* xr = x + base;
  float* yr = y + base;

  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += xr[c];
  const float mean = block_sum(sum, partial) / static_cast<float>(cols);

  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sq += (xr[c] - mean) * (xr[c] - mean);
  const float var = block_sum(sq, partial) / static_cast<float>(cols);

  const float inv_std = rsqrtf(var + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (xr[c] - mean) * inv_std * weight[c] + bias[c];
}

namespace {

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
  if (x->shape[0] > INT32_MAX) return std::nullopt;  // one block per row: the grid's x extent is at most 2^31 - 1
  const float eps = static_cast<float>(kwb_scalar_or(&call, "eps", 1e-5));
  return Layernorm{elements<const float>(*x), elements<const float>(*weight), elements<const float>(*bias),
                   elements<float>(*y),       x->shape[0],                     x->shape[1],
                   eps};
}

// The smallest whole number of warps that covers a row, at most k_max_threads: short rows (700 x 5) get one warp
// instead of 256 threads of which 251 idle.
int threads_for(int64_t cols) {
  const int64_t warps = (cols + k_warp - 1) / k_warp;
  return static_cast<int>(warps >= k_max_threads / k_warp ? k_max_threads : (warps < 1 ? 1 : warps) * k_warp);
}

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature, 3 when the launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Layernorm> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0 || p->cols == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  // No synchronization: kwb waits for the device inside the timed region.
  layernorm_fused<<<static_cast<unsigned>(p->rows), threads_for(p->cols), 0, static_cast<cudaStream_t>(call->stream)>>>(
      p->x, p->weight, p->bias, p->y, p->cols, p->eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
