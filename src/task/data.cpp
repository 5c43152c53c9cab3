#include "task/data.h"

#include <cmath>
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
