// Softmax on bfloat16, reference optimized cpu implementation: tasks/softmax/cpu/online.cpp (the online softmax
// of Milakov & Gimelshein 2018, then one normalize pass, with an inline vector exp) reading bfloat16 and writing
// bfloat16. The arithmetic is float32 throughout; widening a bfloat16 vector is a zero-extend and a shift, and
// narrowing rounds to nearest even with integer vector operations, so the conversions cost a few instructions per
// vector instead of the baseline's two extra passes and two float temporaries.
//
//   pass 1 (online): per SIMD lane a running maximum m and a running sum d of exp(x - m), rescaled by
//          exp(m_old - m_new) when an element raises m; the lanes are combined into the row's M and D.
//   pass 2: y = bf16(exp(x - M) * (1 / D)).
//
// -inf entries are handled as in tasks/softmax/cpu/online.cpp; the row tail is loaded padded with -inf.
#include <kwb/kernel.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

constexpr uint16_t k_bf16_neg_inf = 0xff80;

constexpr float k_neg_inf = -std::numeric_limits<float>::infinity();

// A scalar operand of a vector operation is broadcast to every lane; subtracting +0 leaves every value (-0, inf,
// NaN) as it is.
Vec splat(float v) { return v - Vec{}; }

// Rows carry no alignment promise, so every vector load and store is an unaligned one; memcpy is how to say that
// without undefined behaviour, and it compiles to a single instruction. bfloat16 is the upper half of a float32:
// widening is exact, a zero-extend and a shift.
Vec widen(HVec h) { return std::bit_cast<Vec>(__builtin_convertvector(h, UVec) << 16); }

Vec load(const uint16_t* p) {
  HVec h;
  std::memcpy(&h, p, sizeof h);
  return widen(h);
}

// The last `count` (< k_lanes) elements of a row, the missing lanes set to -inf.
Vec load_tail(const uint16_t* p, int64_t count) {
  HVec h;
  for (int i = 0; i < k_lanes; ++i) h[i] = k_bf16_neg_inf;
  std::memcpy(&h, p, static_cast<size_t>(count) * sizeof(uint16_t));
  return widen(h);
}

// float32 to bfloat16, rounded to nearest, ties to even (as kwb's store_element and torch do); NaN stays NaN
// (quiet), where the rounding add could carry a NaN's payload into infinity.
HVec narrow(Vec v) {
  const UVec bits = std::bit_cast<UVec>(v);
  const UVec rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const UVec out = v != v ? (bits >> 16) | 0x0040u : rounded;
  return __builtin_convertvector(out, HVec);
}

// exp(t) for t <= 0 (and t = -inf or NaN), lane by lane. Below -110 the result is 0 in float32 (exp(-103.98) is
// half the smallest subnormal), so t is clamped there; that also turns -inf into 0 instead of NaN.
Vec exp_nonpositive(Vec t) {
  const Vec lo = splat(-110.0f);
  t = t < lo ? lo : t;  // a NaN compares false and stays NaN
  // n = round(t / ln 2) with the 1.5 * 2^23 trick: after the add the integer sits in the low mantissa bits.
  const Vec magic = splat(12582912.0f);
  const Vec shifted = t * splat(1.44269504088896341f) + magic;
  const Vec n = shifted - magic;
  const IVec ni = std::bit_cast<IVec>(shifted) - std::bit_cast<IVec>(magic);
  // r = t - n ln 2 in two parts (Cody-Waite): n * 0.693359375 is exact for |n| < 2^15, |r| <= 0.35.
  Vec r = t - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  // Cephes expf: e^r = 1 + r + r^2 * P(r).
  Vec p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r + splat(1.0f);
  // e^t = p * 2^n with n in [-159, 0]: 2^(n + 64) is a normal float, and the final multiply by 2^-64 rounds a
  // subnormal result once.
  const IVec bits = (ni + 64 + 127) << 23;
  return p * std::bit_cast<Vec>(bits) * splat(5.42101086242752217e-20f);
}

// One step of the online normalizer for every lane: m, d describe the elements seen so far; v are new elements.
void online_step(Vec& m, Vec& d, Vec v) {
  const Vec delta = v - m;
  const Vec magnitude = delta < splat(0.0f) ? -delta : delta;
  // exp(-|v - m|): the rescale factor when v raises the max, the new term when it does not. A -inf element
  // contributes nothing (and -inf - -inf must not become NaN).
  const Vec e = exp_nonpositive(v == splat(k_neg_inf) ? splat(k_neg_inf) : -magnitude);
  const auto raises = v > m;
  d = raises ? d * e + splat(1.0f) : d + e;
  m = raises ? v : m;
}

// The call's tensors, checked against the task signature: x [rows, cols] in, y [rows, cols] out, both bfloat16
// (DLPack's kDLBfloat, 16 bits), compact row-major, host memory. Anything else is refused rather than guessed at.
struct Softmax {
  const uint16_t* x;
  uint16_t* y;
  int64_t rows;
  int64_t cols;
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

template <typename T>
T* elements(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

std::optional<Softmax> unpack(const kwb_call& call) {
  if (call.num_inputs != 1 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& y = call.outputs[0];
  if (!is_compact_host_bf16(x, 2) || !is_compact_host_bf16(y, 2)) return std::nullopt;
  if (y.shape[0] != x.shape[0] || y.shape[1] != x.shape[1]) return std::nullopt;
  return Softmax{elements<const uint16_t>(x), elements<uint16_t>(y), x.shape[0], x.shape[1]};
}


// One row: pass 1 (online max and sum), then pass 2 (normalize).
void softmax_row(const uint16_t* x, uint16_t* y, int64_t n) {
  Vec m = splat(k_neg_inf);
  Vec d = splat(0.0f);
  int64_t i = 0;
  for (; i + k_lanes <= n; i += k_lanes) online_step(m, d, load(x + i));
  if (i < n) online_step(m, d, load_tail(x + i, n - i));

  // Combine the lanes: M = max m_lane, D = sum d_lane * exp(m_lane - M). A lane that saw only -inf has d = 0.
  float row_max = m[0];
  for (int lane = 1; lane < k_lanes; ++lane) row_max = m[lane] > row_max ? m[lane] : row_max;
  const Vec scale = exp_nonpositive(m == splat(k_neg_inf) ? splat(k_neg_inf) : m - splat(row_max));
  const Vec scaled = d * scale;
  float sum = 0.0f;
  for (int lane = 0; lane < k_lanes; ++lane) sum += scaled[lane];
  if (row_max == k_neg_inf) sum = std::numeric_limits<float>::quiet_NaN();  // every element -inf: 0/0

  const Vec inv_sum = splat(1.0f / sum);
  const Vec max_vec = splat(row_max);
  i = 0;
  for (; i + k_lanes <= n; i += k_lanes) {
    const HVec out = narrow(exp_nonpositive(load(x + i) - max_vec) * inv_sum);
    std::memcpy(y + i, &out, sizeof out);
  }
  if (i < n) {
    const HVec out = narrow(exp_nonpositive(load_tail(x + i, n - i) - max_vec) * inv_sum);
    std::memcpy(y + i, &out, static_cast<size_t>(n - i) * sizeof(uint16_t));
  }
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  for (int64_t r = 0; r < p->rows; ++r) softmax_row(p->x + r * p->cols, p->y + r * p->cols, p->cols);
  return 0;
}
