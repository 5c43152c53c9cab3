// Q8_0 quantization, baseline cuda implementation: ggml's quantize_row_q8_0_ref recipe as an eager framework would
// run it on a GPU, one whole-tensor kernel per step (the same four passes as cpu/baseline.cpp):
//
//   1. q8_abs        a = |x|                          (rows*cols float scratch buffer)
//   2. q8_block_max  amax[b] = max(a, block of 32)    (per-block float scratch buffer; one thread per block)
//   3. q8_scales     d = amax[b] / 127, id[b] = d ? 1/d : 0, scales[b] = f16(d)
//                                                     (per-block float scratch buffer for id; f16 rounding in
//                                                     integer operations)
//   4. q8_quantize   qs = roundf(x * id[b])           (one thread per element; halves away from zero)
//
// Deliberately unfused: four launches on the call's stream, each a full sweep over its operands, so a profiler sees
// four kernels, the rows*cols temporary written and read back and x read twice. The scratch buffers are allocated
// on the first call that needs them and kept (grown, never shrunk) for later calls, as a framework's caching
// allocator would. It is the "before" that the fused reference (cuda/fused.cu) is measured against.
//
// The arithmetic is exactly the task's, so its outputs are bit-identical to the oracle's: kwb builds without fast
// math, so both divisions are IEEE's (correctly rounded), x * id is a single rounded multiply with no add to
// contract into an FMA, roundf rounds halves away from zero, and the f16 scale is rounded to nearest even from the
// float d (the integer conversion of cpu/baseline.cpp).
#include <kwb/kernel.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

constexpr int64_t k_block = 32;

// Threads per block of every kernel.
constexpr int k_threads = 256;

}  // namespace

// Every kernel takes its thread count n (elements or blocks): the grid is rounded up to whole thread blocks, so the
// last one has threads past the end. Kernels are at global scope with external linkage, so that profilers and kwb's
// trace name them plainly.
__global__ void q8_abs(const float* __restrict__ x, float* __restrict__ a, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) a[i] = fabsf(x[i]);
}

__global__ void q8_block_max(const float* __restrict__ a, float* __restrict__ amax, int64_t n) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= n) return;
  float m = 0.0f;
  for (int j = 0; j < 32; ++j) m = a[b * 32 + j] > m ? a[b * 32 + j] : m;
  amax[b] = m;
}

// float32 -> binary16 bits, round to nearest even, overflow to inf (the argument here is finite and >= 0), in
// integer operations, as cpu/baseline.cpp's f16_bits.
__device__ uint16_t f16_bits(float f) {
  const uint32_t w = __float_as_uint(f);
  const uint32_t sign = (w >> 16) & 0x8000u;
  const uint32_t a = w & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (a > 0x7F800000u ? 0x200u : 0u));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: rounds to inf
  if (a < 0x38800000u) {                                                // below 2^-14: an f16 subnormal or 0
    if (a < 0x33000000u) return static_cast<uint16_t>(sign);          // below 2^-25 (half of 2^-24): 0
    const uint32_t mantissa = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - (a >> 23);  // the value is mantissa * 2^(e - 150); f16 units are 2^-24
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u) != 0)) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // A normal f16: rebias the exponent and round the 23-bit mantissa to 10 bits; a carry moves into the exponent.
  uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3FFu);
  const uint32_t rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;
  return static_cast<uint16_t>(sign | h);
}

__global__ void q8_scales(const float* __restrict__ amax, float* __restrict__ id, uint16_t* __restrict__ scales,
                          int64_t n) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= n) return;
  const float d = amax[b] / 127.0f;
  id[b] = d != 0.0f ? 1.0f / d : 0.0f;
  scales[b] = f16_bits(d);
}

// roundf gives an integer in [-127, 127], so the conversion to int8 is exact.
__global__ void q8_quantize(const float* __restrict__ x, const float* __restrict__ id, int8_t* __restrict__ qs,
                            int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) qs[i] = static_cast<int8_t>(roundf(x[i] * id[i / 32]));
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

Scratch g_abs;   // a: |x|, rows*cols floats
Scratch g_amax;  // per block: max |x|
Scratch g_id;    // per block: 1 / d, or 0

// The call's tensors, checked against the task signature: x [rows, 32*blocks] f32 in; qs [rows, 32*blocks] i8
// and scales [rows, blocks] f16 out; compact row-major, CUDA device memory. Rows are whole blocks, so the tensor is
// one contiguous run of blocks: x[b*32 .. b*32+31] -> qs[b*32 ..], scales[b]. Anything else is refused.
struct Q8 {
  const float* x;
  int8_t* qs;
  uint16_t* scales;
  int64_t blocks;  // over the whole tensor
};

bool is_compact_cuda(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLCUDA || t.ndim != ndim) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
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

std::optional<Q8> unpack(const kwb_call& call) {
  if (call.num_inputs != 1 || call.num_outputs != 2) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& qs = call.outputs[0];
  const DLTensor& scales = call.outputs[1];
  if (!is_compact_cuda(x, 2, kDLFloat, 32) || !is_compact_cuda(qs, 2, kDLInt, 8) ||
      !is_compact_cuda(scales, 2, kDLFloat, 16)) {
    return std::nullopt;
  }
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (cols % k_block != 0 || qs.shape[0] != rows || qs.shape[1] != cols || scales.shape[0] != rows ||
      scales.shape[1] != cols / k_block) {
    return std::nullopt;
  }
  // One thread per element: the grid must fit in 2^31 - 1 blocks.
  if (rows * cols / k_threads >= INT32_MAX) return std::nullopt;
  return Q8{elements<const float>(x), elements<int8_t>(qs), elements<uint16_t>(scales), rows * (cols / k_block)};
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + k_threads - 1) / k_threads); }

}  // namespace

// Returns 1 when the backend is not CUDA.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) { return ctx->backend == KWB_BACKEND_CUDA ? 0 : 1; }

// Returns 1 when the call does not match the task signature, 2 when a scratch buffer cannot be allocated, 3 when a
// launch fails.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Q8> p = unpack(*call);
  if (!p) return 1;
  if (p->blocks == 0) return 0;  // nothing to write, and CUDA refuses an empty grid
  const int64_t blocks = p->blocks;
  const int64_t n = blocks * k_block;
  if (!g_abs.reserve(static_cast<size_t>(n)) || !g_amax.reserve(static_cast<size_t>(blocks)) ||
      !g_id.reserve(static_cast<size_t>(blocks))) {
    return 2;
  }
  const auto stream = static_cast<cudaStream_t>(call->stream);

  // The stream is in order, so each pass sees the previous one's writes. No synchronization: kwb waits for the
  // device inside the timed region.
  q8_abs<<<blocks_for(n), k_threads, 0, stream>>>(p->x, g_abs.data, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  q8_block_max<<<blocks_for(blocks), k_threads, 0, stream>>>(g_abs.data, g_amax.data, blocks);
  if (cudaGetLastError() != cudaSuccess) return 3;
  q8_scales<<<blocks_for(blocks), k_threads, 0, stream>>>(g_amax.data, g_id.data, p->scales, blocks);
  if (cudaGetLastError() != cudaSuccess) return 3;
  q8_quantize<<<blocks_for(n), k_threads, 0, stream>>>(p->x, g_id.data, p->qs, n);
  if (cudaGetLastError() != cudaSuccess) return 3;
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  g_abs.release();
  g_amax.release();
  g_id.release();
}
