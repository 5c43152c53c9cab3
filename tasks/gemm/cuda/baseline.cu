// GEMM, baseline cuda implementation: C = A B with the textbook kernel, one thread per output element,
// c[i, j] = sum_p a[i, p] * b[p, j] accumulated in one float, p innermost, exactly as the definition reads.
//
// It is the "before" the tiled reference (cuda/tiled.cu) is measured against. Every thread reads a whole row of A
// and a whole column of B from global memory: nothing is shared through shared memory, so A and B are each read n
// and m times over (the L1 and L2 catch part of it). Each c[i, j] is the same sequential sum as the cpu baseline's,
// so the recursive-summation bound the tolerance is derived from applies unchanged. kwb builds without fast math,
// but nvcc contracts a * b + sum into an FMA, which only removes a rounding.
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// 16 x 16 threads per block: x runs over the columns j (adjacent threads read adjacent b[p, j] and write adjacent
// c[i, j]), y over the rows i.
constexpr int k_side = 16;

}  // namespace

// The grid is rounded up to whole blocks, so threads past the edge return at once. Kernels are at global scope with
// external linkage, so that profilers and kwb's trace name them plainly.
__global__ void gemm_naive(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                           int64_t m, int64_t k, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (i >= m || j >= n) return;
  float sum = 0.0f;
  for (int64_t p = 0; p < k; ++p) sum += a[i * k + p] * b[p * n + j];
  c[i * n + j] = sum;
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
  if ((a.shape[0] + k_side - 1) / k_side > 65535 || (b.shape[1] + k_side - 1) / k_side > INT32_MAX) {
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
  const dim3 block(k_side, k_side);
  const dim3 grid(static_cast<unsigned>((p->n + k_side - 1) / k_side),
                  static_cast<unsigned>((p->m + k_side - 1) / k_side));
  // No synchronization: kwb waits for the device inside the timed region.
  gemm_naive<<<grid, block, 0, static_cast<cudaStream_t>(call->stream)>>>(p->a, p->b, p->c, p->m, p->k, p->n);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
