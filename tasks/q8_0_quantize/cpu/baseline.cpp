// Q8_0 quantization, baseline cpu implementation: the recipe of ggml's quantize_row_q8_0_ref as an eager framework
// would run it, one whole-tensor kernel per step:
//
//   1. pass_abs          a = |x|                          (new rows*cols temporary)
//   2. pass_block_max    amax[b] = max(a, block of 32)    (new blocks temporary)
//   3. pass_scales       d = amax[b] / 127, id[b] = d ? 1/d : 0, scales[b] = f16(d)
//                                                         (new blocks temporary for id; f16 rounding in scalar code)
//   4. pass_quantize     qs = roundf(x * id[b])           (libm roundf, one element at a time)
//
// Deliberately unfused: each pass is its own non-inlined function with its own sweep over memory, every temporary
// is allocated on each call, and pass 4 calls libm's roundf per element. It is the "before" that the fused
// reference is measured against. The arithmetic is exactly the task's (float32 d, id and x * id; roundf, halves
// away from zero; the f16 scale rounded to nearest even from the float d), so its outputs are bit-identical to the
// oracle's.
#include <kwb/kernel.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

constexpr int64_t k_block = 32;

__attribute__((noinline)) void pass_abs(const float* x, float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = std::fabs(x[i]);
}

__attribute__((noinline)) void pass_block_max(const float* a, float* amax, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) {
    float m = 0.0f;
    for (int64_t j = 0; j < k_block; ++j) m = a[b * k_block + j] > m ? a[b * k_block + j] : m;
    amax[b] = m;
  }
}

// float32 -> binary16 bits, round to nearest even, overflow to inf (the inputs here are finite and >= 0).
uint16_t f16_bits(float f) {
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (w >> 16) & 0x8000u;
  const uint32_t abs = w & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: rounds to inf
  if (abs < 0x38800000u) {                                                // below 2^-14: an f16 subnormal or 0
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);          // below 2^-25 (half of 2^-24): 0
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - (abs >> 23);  // the value is mantissa * 2^(e - 150); f16 units are 2^-24
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u) != 0)) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // A normal f16: rebias the exponent and round the 23-bit mantissa to 10 bits; a carry moves into the exponent.
  uint32_t h = ((abs >> 23) - 112u) << 10 | ((abs >> 13) & 0x3FFu);
  const uint32_t rest = abs & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;
  return static_cast<uint16_t>(sign | h);
}

__attribute__((noinline)) void pass_scales(const float* amax, float* id, uint16_t* scales, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) {
    const float d = amax[b] / 127.0f;
    id[b] = d != 0.0f ? 1.0f / d : 0.0f;
    scales[b] = f16_bits(d);
  }
}

__attribute__((noinline)) void pass_quantize(const float* x, const float* id, int8_t* qs, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t j = 0; j < k_block; ++j) {
      qs[b * k_block + j] = static_cast<int8_t>(std::round(x[b * k_block + j] * id[b]));
    }
  }
}

// Uninitialized, like an eager framework's empty(): every element is written by the pass that produces it.
template <typename T>
std::unique_ptr<T[]> temporary(int64_t n) {
  return std::make_unique_for_overwrite<T[]>(static_cast<size_t>(n));
}

// The call's tensors, checked against the task signature: x [rows, 32*blocks] f32 in; qs [rows, 32*blocks] i8
// and scales [rows, blocks] f16 out; compact row-major, host memory. Anything else is refused.
struct Q8 {
  const float* x;
  int8_t* qs;
  uint16_t* scales;
  int64_t blocks;  // over the whole tensor: every row is a whole number of blocks
};

bool is_compact_host(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim) return false;
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
  if (!is_compact_host(x, 2, kDLFloat, 32) || !is_compact_host(qs, 2, kDLInt, 8) ||
      !is_compact_host(scales, 2, kDLFloat, 16)) {
    return std::nullopt;
  }
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (cols % k_block != 0 || qs.shape[0] != rows || qs.shape[1] != cols || scales.shape[0] != rows ||
      scales.shape[1] != cols / k_block) {
    return std::nullopt;
  }
  return Q8{elements<const float>(x), elements<int8_t>(qs), elements<uint16_t>(scales), rows * (cols / k_block)};
}

}  // namespace

// Returns 1 when the call does not match the task signature, 2 when a temporary cannot be allocated (an exception
// must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Q8> p = unpack(*call);
  if (!p) return 1;
  try {
    const std::unique_ptr<float[]> a = temporary<float>(p->blocks * k_block);
    pass_abs(p->x, a.get(), p->blocks * k_block);

    const std::unique_ptr<float[]> amax = temporary<float>(p->blocks);
    pass_block_max(a.get(), amax.get(), p->blocks);

    const std::unique_ptr<float[]> id = temporary<float>(p->blocks);
    pass_scales(amax.get(), id.get(), p->scales, p->blocks);

    pass_quantize(p->x, id.get(), p->qs, p->blocks);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
