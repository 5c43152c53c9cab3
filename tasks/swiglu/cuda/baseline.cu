// SwiGLU on bfloat16, baseline cuda implementation: y = silu(gate) * up with silu(g) = g / (1 + exp(-g)), the same
// eight passes as cpu/baseline.cpp and opencl/baseline.cpp, each its own kernel launch on the call's stream:
//
//   1. sg_widen     gf = float(gate)                    (n-element float scratch buffer)
//   2. sg_widen     uf = float(up)                      (n-element float scratch buffer)
//   3. sg_negate    t  = -gf                            (n-element float scratch buffer)
//   4. sg_exp       e  = exp(t)                         (n-element float scratch buffer; expf, 2 ulp, no fast math)
//   5. sg_sigmoid   s  = 1 / (1 + e)                    (n-element float scratch buffer)
//   6. sg_mul       a  = gf * s            (silu)       (n-element float scratch buffer)
//   7. sg_mul       yf = a * uf                         (n-element float scratch buffer)
//   8. sg_narrow    y  = bf16(yf)                       (into the output, rounded to nearest even)
//
// Deliberately unfused: eight launches, each a full sweep over its operands, so a profiler sees eight kernels and
// seven float temporaries written and read back. The scratch buffers are allocated on the first call that needs
// them and kept (grown, never shrunk) for later calls, as a framework's caching allocator would: cudaMalloc and
// cudaFree synchronize the device and would cost more than the kernels. All arithmetic is float32, and silu(gate)
// is not rounded to bfloat16 between the passes. It is the "before" that the fused reference (cuda/fused.cu) is
// measured against.
//
// bfloat16 travels as uint16_t: widening is a shift into the upper half of a float's bits, narrowing rounds to
// nearest even in integer operations (a NaN stays a quiet NaN), exactly as the cpu implementations do. Large |gate|
// needs no special case: for g < -88.72 e = expf(-g) = +inf, s = 0 and silu = g * 0 = -0; gate = -inf gives
// -inf * 0 = NaN, as the oracle's IEEE evaluation does.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// Threads per block of every kernel.
constexpr int k_threads = 256;

}  // namespace

// Every kernel takes the element count n: the grid is rounded up to whole blocks, so the last block has threads
// past the end. Kernels are at global scope with external linkage, so that profilers and kwb's trace name them
// plainly.
__global__ void sg_widen(const uint16_t* __restrict__ x, float* __restrict__ xf, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) xf[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
}

__global__ void sg_negate(const float* __restrict__ x, float* __restrict__ t, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) t[i] = -x[i];
}

__global__ void sg_exp(const float* __restrict__ t, float* __restrict__ e, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) e[i] = expf(t[i]);
}

__global__ void sg_sigmoid(const float* __restrict__ e, float* __restrict__ s, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) s[i] = 1.0f / (1.0f + e[i]);
}

__global__ void sg_mul(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] * b[i];
}

// float32 to bfloat16, rounded to nearest, ties to even; NaN stays NaN (quiet), where the rounding add could carry a
// NaN's payload into infinity.
__global__ void sg_narrow(const float* __restrict__ yf, uint16_t* __restrict__ y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float f = yf[i];
  const uint32_t bits = __float_as_uint(f);
  y[i] = f != f ? static_cast<uint16_t>((bits >> 16) | 0x0040u)
                : static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
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

// The float temporaries, in the order the passes produce them.
enum Temp { t_gf, t_uf, t_neg, t_exp, t_sig, t_silu, t_yf, k_temps };
Scratch g_temps[k_temps];

// The call's tensors, checked against the task signature: gate and up in, y out, all [tokens, ffn] bfloat16
// (DLPack's kDLBfloat, 16 bits), compact row-major, CUDA device memory. The operator is element-wise, so only the
// element count matters once the shapes agree. Anything else is refused rather than guessed at.
struct SwiGLU {
  const uint16_t* gate;
  const uint16_t* up;
  uint16_t* y;
  int64_t n;
};

bool is_compact_cuda_bf16(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLCUDA || t.ndim != ndim) return false;
  if (t.dtype.code != kDLBfloat || t.dtype.bits != 16 || t.dtype.lanes != 1) return false;
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

bool same_shape(const DLTensor& a, const DLTensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int32_t d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
  }
  return true;
}

template <typename T>
T* elements(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

std::optional<SwiGLU> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& gate = call.inputs[0];
  const DLTensor& up = call.inputs[1];
  const DLTensor& y = call.outputs[0];
  if (!is_compact_cuda_bf16(gate, 2) || !is_compact_cuda_bf16(up, 2) || !is_compact_cuda_bf16(y, 2)) {
    return std::nullopt;
  }
  if (!same_shape(gate, up) || !same_shape(gate, y)) return std::nullopt;
  // One thread per element: the grid must fit in 2^31 - 1 blocks.
  if (gate.shape[0] * gate.shape[1] / k_threads >= INT32_MAX) return std::nullopt;
  return SwiGLU{elements<const uint16_t>(gate), elements<const uint16_t>(up), elements<uint16_t>(y),
                gate.shape[0] * gate.shape[1]};
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + k_threads - 1) / k_threads); }

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature, 2 when a scratch buffer cannot be allocated, 3 when a
// launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<SwiGLU> p = unpack(*call);
  if (!p) return 1;
  const int64_t n = p->n;
  if (n == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  for (Scratch& s : g_temps) {
    if (!s.reserve(static_cast<size_t>(n))) return 2;
  }
  const auto stream = static_cast<cudaStream_t>(call->stream);
  const unsigned grid = blocks_for(n);
  float* t[k_temps];
  for (int i = 0; i < k_temps; ++i) t[i] = g_temps[i].data;

  // The stream is in order, so each pass sees the previous one's writes. No synchronization: kwb waits for the
  // device inside the timed region.
  sg_widen<<<grid, k_threads, 0, stream>>>(p->gate, t[t_gf], n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sg_widen<<<grid, k_threads, 0, stream>>>(p->up, t[t_uf], n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sg_negate<<<grid, k_threads, 0, stream>>>(t[t_gf], t[t_neg], n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sg_exp<<<grid, k_threads, 0, stream>>>(t[t_neg], t[t_exp], n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sg_sigmoid<<<grid, k_threads, 0, stream>>>(t[t_exp], t[t_sig], n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sg_mul<<<grid, k_threads, 0, stream>>>(t[t_gf], t[t_sig], t[t_silu], n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sg_mul<<<grid, k_threads, 0, stream>>>(t[t_silu], t[t_uf], t[t_yf], n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  sg_narrow<<<grid, k_threads, 0, stream>>>(t[t_yf], p->y, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  for (Scratch& s : g_temps) s.release();
}
