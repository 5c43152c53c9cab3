// Adversarial candidate. Class: work on another stream (the side-stream cheat: a harness that times an event pair
// on the stream it handed over, or synchronizes only that stream, never sees kernels launched elsewhere).
// Cheat: an honest fused RMSNorm, except that kwb_setup creates a non-blocking stream of its own and kwb_run launches
// the kernel there instead of on call->stream and returns without waiting for it. An event pair on call->stream
// brackets no work at all, so the call would look nearly free, and its y may or may not have landed when a harness
// reads it back.
// Defense: the cuda backend synchronizes the whole device (cudaDeviceSynchronize) before the host clock stops, so
// the kernel is finished, and timed, inside the call whatever stream it ran on; in check and profile the CUPTI trace
// shows the kernel on a stream other than the call's.
// Expected reason: work_off_queue (kwb check, cuda backend).
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string_view>

KWB_CANDIDATE_ABI

namespace {

// Wide enough for a 4096-element row to give each thread four float4s, narrow enough to keep several blocks per SM.
constexpr int k_max_threads = 256;
constexpr int k_warp = 32;

}  // namespace

// The sum of `v` over the block, returned to every thread. The block is a whole number of warps (at most 32 of
// them), so every shuffle has all 32 lanes present; `partial` holds one float per warp.
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
  return partial[0];
}

// One block per row. vec4: cols % 4 == 0 and x, weight and y 16-byte aligned, so every row starts aligned and is
// read and written as float4; otherwise one float at a time (odd rows such as 4097 or 7 columns).
// Kernels are at global scope with external linkage, so that profilers and kwb's trace name them plainly.
__global__ void __launch_bounds__(k_max_threads)
    rmsnorm_fused(const float* __restrict__ x, const float* __restrict__ weight, float* __restrict__ y,
                  int64_t cols, float eps, bool vec4) {
  __shared__ float partial[k_warp];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  const float* xr = x + base;
  float* yr = y + base;

  float sum = 0.0f;
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
      const float4 v = x4[i];
      sum += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += xr[c] * xr[c];
  }
  const float inv_rms = rsqrtf(block_sum(sum, partial) / static_cast<float>(cols) + eps);

  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
      const float4 v = x4[i];
      const float4 w = w4[i];
      y4[i] = make_float4(v.x * inv_rms * w.x, v.y * inv_rms * w.y, v.z * inv_rms * w.z, v.w * inv_rms * w.w);
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] * inv_rms * weight[c];
  }
}

namespace {

// The call's tensors, found by name and checked against the task signature: x [rows, cols] and weight [cols] in,
// y [rows, cols] out, all f32, compact row-major, CUDA device memory. Anything else is refused rather than guessed
// at.
struct Rmsnorm {
  const float* x;
  const float* weight;
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

std::optional<Rmsnorm> unpack(const kwb_call& call) {
  const DLTensor* x = find(call.inputs, call.input_names, call.num_inputs, "x");
  const DLTensor* weight = find(call.inputs, call.input_names, call.num_inputs, "weight");
  const DLTensor* y = find(call.outputs, call.output_names, call.num_outputs, "y");
  if (x == nullptr || weight == nullptr || y == nullptr) return std::nullopt;
  if (!is_compact_cuda_f32(*x, 2) || !is_compact_cuda_f32(*weight, 1) || !is_compact_cuda_f32(*y, 2)) {
    return std::nullopt;
  }
  if (weight->shape[0] != x->shape[1] || y->shape[0] != x->shape[0] || y->shape[1] != x->shape[1]) {
    return std::nullopt;
  }
  if (x->shape[0] > INT32_MAX) return std::nullopt;  // one block per row: the grid's x extent is at most 2^31 - 1
  return Rmsnorm{elements<const float>(*x), elements<const float>(*weight), elements<float>(*y), x->shape[0],
                 x->shape[1], static_cast<float>(kwb_scalar_or(&call, "eps", 1e-6))};
}

// The stream kwb_setup creates and every call launches on instead of call->stream.
cudaStream_t g_private_stream = nullptr;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The smallest whole number of warps that covers a row (in float4s on the vector path), at most k_max_threads:
// short rows (612 x 7) get one warp instead of 256 threads of which 249 idle.
int threads_for(int64_t items) {
  const int64_t warps = (items + k_warp - 1) / k_warp;
  return static_cast<int>(warps >= k_max_threads / k_warp ? k_max_threads : (warps < 1 ? 1 : warps) * k_warp);
}

}  // namespace

// Returns 1 when the backend is not CUDA, 2 when the private stream cannot be created.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_CUDA) return 1;
  return cudaStreamCreateWithFlags(&g_private_stream, cudaStreamNonBlocking) == cudaSuccess ? 0 : 2;
}

// Returns 1 when the call does not match the task signature, 3 when the launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  if (p->rows == 0 || p->cols == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const bool vec4 = p->cols % 4 == 0 && aligned16(p->x) && aligned16(p->weight) && aligned16(p->y);
  const int threads = threads_for(vec4 ? p->cols / 4 : p->cols);
  // The cheat: the private stream, not call->stream, and no synchronization.
  rmsnorm_fused<<<static_cast<unsigned>(p->rows), threads, 0, g_private_stream>>>(p->x, p->weight, p->y, p->cols,
                                                                                 p->eps, vec4);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  if (g_private_stream != nullptr) cudaStreamDestroy(g_private_stream);
  g_private_stream = nullptr;
}
