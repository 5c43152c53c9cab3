#include "task/data.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>

namespace kwb {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : m_s) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(m_s[1] * 5, 7) * 9;
  const uint64_t t = m_s[1] << 17;
  m_s[2] ^= m_s[0];
  m_s[3] ^= m_s[1];
  m_s[1] ^= m_s[2];
  m_s[0] ^= m_s[3];
  m_s[2] ^= t;
  m_s[3] = rotl(m_s[3], 45);
  return result;
}

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

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ rotl(b, 23) ^ 0xD1B54A32D192ED03ull;
  splitmix64(x);
  return splitmix64(x);
}

uint64_t input_seed(const Case& c, size_t input_index, uint64_t set_index, uint64_t nonce) {
  return mix_seed(mix_seed(mix_seed(c.seed, input_index + 1), set_index + 1), nonce);
}

double load_element(DType dtype, const unsigned char* data, size_t i) {
  if (dtype == DType::f32) {
    float f;
    std::memcpy(&f, data + 4 * i, 4);
    return f;
  }
  double d;
  std::memcpy(&d, data + 8 * i, 8);
  return d;
}

void store_element(DType dtype, unsigned char* data, size_t i, double v) {
  if (dtype == DType::f32) {
    const float f = static_cast<float>(v);
    std::memcpy(data + 4 * i, &f, 4);
  } else {
    std::memcpy(data + 8 * i, &v, 8);
  }
}

void fill_tensor(const Distribution& dist, DType dtype, std::span<unsigned char> out, uint64_t seed) {
  const size_t width = dtype_size(dtype);
  if (out.size() % width != 0) throw std::invalid_argument("fill_tensor: size is not a multiple of the dtype");
  const size_t n = out.size() / width;
  Rng rng(seed);
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
    store(i, v);
  }
}

}  // namespace kwb
