// SwiGLU on bfloat16, reference optimized cpu implementation: one fused pass over the data,
//
//   y = bf16(silu(float(gate)) * float(up)),   silu(g) = g / (1 + exp(-g)),
//
// a vector of k_lanes elements at a time, with an inline vector exp instead of libm's scalar expf, bfloat16
// widened with a zero-extend and a shift and narrowed (rounded to nearest even) with integer vector operations.
// Nothing is allocated and nothing but the inputs and the output is touched: no float temporaries, one read of
// each input and one write of the output. All arithmetic is float32; silu(gate) is not rounded to bfloat16
// before the multiply.
//
// Large |gate| is handled by the formula itself, exactly as IEEE arithmetic on it does: for g < -88.72 exp(-g)
// overflows to +inf and g / inf = -0 (the true value is below 2.7e-37 in magnitude); for g > 88.72 exp(-g) is 0
// or subnormal and silu(g) = g. gate = -inf gives -inf / inf = NaN and gate = +inf gives +inf, as the oracle
// defines them (oracle.cpp); a NaN in either input gives NaN.
#include <kwb/kernel.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The widest vector the target has. -march=native picks it; the code below is the same for every width, and
// GCC/Clang lower the vector type to plain scalar code on a target with no SIMD at all.
#if defined(__AVX512F__)
constexpr int k_lanes = 16;
#elif defined(__AVX__)
constexpr int k_lanes = 8;
#else
constexpr int k_lanes = 4;
#endif
using Vec = float __attribute__((vector_size(k_lanes * sizeof(float))));
using IVec = int32_t __attribute__((vector_size(k_lanes * sizeof(int32_t))));
using UVec = uint32_t __attribute__((vector_size(k_lanes * sizeof(uint32_t))));
using HVec = uint16_t __attribute__((vector_size(k_lanes * sizeof(uint16_t))));

// A scalar operand of a vector operation is broadcast to every lane; subtracting +0 leaves every value (-0, inf,
// NaN) as it is.
Vec splat(float v) { return v - Vec{}; }

// bfloat16 is the upper half of a float32: widening is exact, a zero-extend and a shift.
Vec widen(HVec h) { return std::bit_cast<Vec>(__builtin_convertvector(h, UVec) << 16); }

// float32 to bfloat16, rounded to nearest, ties to even (as kwb's store_element and torch do); NaN stays NaN
// (quiet), where the rounding add could carry a NaN's payload into infinity.
HVec narrow(Vec v) {
  const UVec bits = std::bit_cast<UVec>(v);
  const UVec rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const UVec out = v != v ? (bits >> 16) | 0x0040u : rounded;
  return __builtin_convertvector(out, HVec);
}

// exp(t) lane by lane for every float t, with IEEE's limits: +inf above 88.72 (and for t = +inf), 0 below -103.97
// (and for t = -inf), NaN for NaN. t is clamped to [-110, 89] first, where e^-110 rounds to 0 and e^89 overflows,
// so the clamp changes no result; a NaN compares false and passes through both clamps.
Vec exp_vec(Vec t) {
  const Vec lo = splat(-110.0f);
  const Vec hi = splat(89.0f);
  t = t < lo ? lo : t;
  t = t > hi ? hi : t;
  // n = round(t / ln 2) with the 1.5 * 2^23 trick: after the add the integer sits in the low mantissa bits.
  const Vec magic = splat(12582912.0f);
  const Vec shifted = t * splat(1.44269504088896341f) + magic;
  const Vec n = shifted - magic;
  const IVec ni = std::bit_cast<IVec>(shifted) - std::bit_cast<IVec>(magic);
  // r = t - n ln 2 in two parts (Cody-Waite): n * 0.693359375 is exact for |n| < 2^15, |r| <= 0.35.
  Vec r = t - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  // Cephes expf: e^r = 1 + r + r^2 * P(r), a few ulp.
  Vec p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r + splat(1.0f);
  // e^t = p * 2^n with n in [-159, 128]: 2^n is applied as 2^h * 2^(n-h), h = n / 2, each factor a normal float,
  // so the first multiply is exact and the second rounds once (to a subnormal, 0 or +inf where it must).
  const IVec h = ni >> 1;
  const Vec scale_h = std::bit_cast<Vec>((h + 127) << 23);
  const Vec scale_rest = std::bit_cast<Vec>((ni - h + 127) << 23);
  return p * scale_h * scale_rest;
}

// silu(g) = g / (1 + e^-g).
Vec silu(Vec g) { return g / (splat(1.0f) + exp_vec(-g)); }

Vec swiglu(Vec g, Vec u) { return silu(g) * u; }

HVec load(const uint16_t* p) {
  HVec h;
  std::memcpy(&h, p, sizeof h);
  return h;
}

// The last `count` (< k_lanes) elements; the missing lanes are 0 (their results are never stored).
HVec load_tail(const uint16_t* p, int64_t count) {
  HVec h{};
  std::memcpy(&h, p, static_cast<size_t>(count) * sizeof(uint16_t));
  return h;
}

// The whole span, one vector at a time, then the tail. Buffers carry no alignment promise: every vector load and
// store is a memcpy, which compiles to one unaligned instruction without undefined behaviour.
void swiglu_span(const uint16_t* gate, const uint16_t* up, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + k_lanes <= n; i += k_lanes) {
    const HVec out = narrow(swiglu(widen(load(gate + i)), widen(load(up + i))));
    std::memcpy(y + i, &out, sizeof out);
  }
  if (i < n) {
    const HVec out = narrow(swiglu(widen(load_tail(gate + i, n - i)), widen(load_tail(up + i, n - i))));
    std::memcpy(y + i, &out, static_cast<size_t>(n - i) * sizeof(uint16_t));
  }
}

// The call's tensors, checked against the task signature: gate and up in, y out, all [tokens, ffn] bfloat16
// (DLPack's kDLBfloat, 16 bits), compact row-major, host memory. The operator is element-wise, so only the element
// count matters once the shapes agree. Anything else is refused rather than guessed at.
struct SwiGLU {
  const uint16_t* gate;
  const uint16_t* up;
  uint16_t* y;
  int64_t n;
};

bool is_compact_host_bf16(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim) return false;
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
  if (!is_compact_host_bf16(gate, 2) || !is_compact_host_bf16(up, 2) || !is_compact_host_bf16(y, 2)) {
    return std::nullopt;
  }
  if (!same_shape(gate, up) || !same_shape(gate, y)) return std::nullopt;
  return SwiGLU{elements<const uint16_t>(gate), elements<const uint16_t>(up), elements<uint16_t>(y),
                gate.shape[0] * gate.shape[1]};
}

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<SwiGLU> p = unpack(*call);
  if (!p) return 1;
  swiglu_span(p->gate, p->up, p->y, p->n);
  return 0;
}
