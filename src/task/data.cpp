#include "task/data.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>

namespace kwb {

double Rng::uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  if (m_have_spare) {
    m_have_spare = false;
    return m_spare;
  }
  double u1 = 0.0;
  while (u1 <= 0.0) u1 = uniform01();  // log(0) would be -inf
  double u2 = uniform01();
  double r = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * std::numbers::pi * u2;
  m_spare = r * std::sin(theta);
  m_have_spare = true;
  return r * std::cos(theta);
}

uint64_t input_seed(const Case& c, size_t input_index, uint64_t set_index, uint64_t nonce) {
  return mix_seed(mix_seed(mix_seed(c.seed, input_index + 1), set_index + 1), nonce);
}

namespace {

// A binary floating-point format of 16 bits: 1 sign bit, `E` exponent bits, `M` stored significand bits.
template <int E, int M>
struct Half {
  static constexpr int bias = (1 << (E - 1)) - 1;
  static constexpr uint16_t inf = static_cast<uint16_t>(((1u << E) - 1) << M);
  static constexpr uint16_t quiet_nan = static_cast<uint16_t>(inf | (1u << (M - 1)));

  static uint16_t bits(double v) {
    const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
    if (std::isnan(v)) return sign | quiet_nan;
    const double a = std::fabs(v);
    if (std::isinf(a)) return sign | inf;
    // Subnormals and zero: a multiple of the smallest subnormal 2^(1 - bias - M), rounded to nearest even (the
    // default rounding mode); 2^M of them is the smallest normal, whose bits are that same integer.
    const double min_normal = std::ldexp(1.0, 1 - bias);
    if (a < min_normal) return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, bias - 1 + M)));
    int exp = 0;
    const double frac = std::frexp(a, &exp);  // a = frac * 2^exp, frac in [0.5, 1)
    int e = exp - 1;                           // a = s * 2^e, s in [1, 2)
    double m = std::nearbyint(std::ldexp(frac, M + 1)) - std::ldexp(1.0, M);  // stored significand, rounded once
    if (m >= std::ldexp(1.0, M)) {  // rounded up to the next power of two
      m = 0;
      ++e;
    }
    if (e + bias >= (1 << E) - 1) return sign | inf;
    return sign | static_cast<uint16_t>((static_cast<unsigned>(e + bias) << M) | static_cast<unsigned>(m));
  }

  static double value(uint16_t b) {
    const double sign = (b & 0x8000) != 0 ? -1.0 : 1.0;
    const unsigned e = (b >> M) & ((1u << E) - 1);
    const unsigned m = b & ((1u << M) - 1);
    if (e == (1u << E) - 1) return m == 0 ? sign * std::numeric_limits<double>::infinity()
                                          : std::copysign(std::numeric_limits<double>::quiet_NaN(), sign);
    if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - M);
    return sign * std::ldexp(static_cast<double>(m + (1u << M)), static_cast<int>(e) - bias - M);
  }
};

using F16 = Half<5, 10>;
using BF16 = Half<8, 7>;

}  // namespace

uint16_t f16_bits(double v) { return F16::bits(v); }
uint16_t bf16_bits(double v) { return BF16::bits(v); }
double f16_value(uint16_t bits) { return F16::value(bits); }
double bf16_value(uint16_t bits) { return BF16::value(bits); }

double load_element(DType dtype, const unsigned char* data, size_t i) {
  switch (dtype) {
    case DType::f16:
    case DType::bf16: {
      uint16_t b;
      std::memcpy(&b, data + 2 * i, 2);
      return dtype == DType::f16 ? f16_value(b) : bf16_value(b);
    }
    case DType::f32: {
      float f;
      std::memcpy(&f, data + 4 * i, 4);
      return f;
    }
    case DType::f64: break;
  }
  double d;
  std::memcpy(&d, data + 8 * i, 8);
  return d;
}

void store_element(DType dtype, unsigned char* data, size_t i, double v) {
  switch (dtype) {
    case DType::f16:
    case DType::bf16: {
      const uint16_t b = dtype == DType::f16 ? f16_bits(v) : bf16_bits(v);
      std::memcpy(data + 2 * i, &b, 2);
      return;
    }
    case DType::f32: {
      const float f = static_cast<float>(v);
      std::memcpy(data + 4 * i, &f, 4);
      return;
    }
    case DType::f64: break;
  }
  std::memcpy(data + 8 * i, &v, 8);
}

void fill_tensor(const Distribution& dist, DType dtype, std::span<unsigned char> out, uint64_t seed) {
  const size_t width = dtype_size(dtype);
  if (out.size() % width != 0) throw std::invalid_argument("fill_tensor: size is not a multiple of the dtype");
  const size_t n = out.size() / width;
  Rng rng(seed);
  // The special-value mix draws from a stream of its own, so the other elements are those of the plain law.
  Rng special(seed ^ 0x5EC1A1F4AC710Eull);
  auto store = [&](size_t i, double v) { store_element(dtype, out.data(), i, v); };
  for (size_t i = 0; i < n; ++i) {
    double v = 0.0;
    switch (dist.kind) {
      case DistributionKind::normal: v = dist.mean + dist.scale * rng.normal(); break;
      case DistributionKind::uniform: v = dist.low + (dist.high - dist.low) * rng.uniform01(); break;
      case DistributionKind::zeros: v = 0.0; break;
      case DistributionKind::constant: v = dist.value; break;
      case DistributionKind::log_uniform: {
        const double magnitude = std::pow(10.0, dist.low + (dist.high - dist.low) * rng.uniform01());
        v = (rng.next() & 1) != 0 ? -magnitude : magnitude;
        break;
      }
    }
    if (dist.special_fraction > 0.0 && special.uniform01() < dist.special_fraction) v = dist.special_value;
    store(i, v);
  }
}

}  // namespace kwb
