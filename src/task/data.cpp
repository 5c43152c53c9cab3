#include "task/data.h"

#include "util/data_secret.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <stdexcept>
#include <vector>

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
  // The published data (nonce 0): anyone can regenerate it, by design.
  if (nonce == 0) return mix_seed(mix_seed(mix_seed(c.seed, input_index + 1), set_index + 1), nonce);
  // A run's data: a keyed hash. xoshiro's state, and so a tensor's seed, can be recovered from enough of its data;
  // through SHA-256 that seed says nothing of the nonce or of any other set's seed (docs/timing.md).
  return sha256_u64("kwb.input_seed.v1", {nonce, c.seed, input_index, set_index});
}

namespace {

bool integer_law(DistributionKind k) {
  return k == DistributionKind::randint || k == DistributionKind::arange || k == DistributionKind::permutation;
}

}  // namespace

std::string distribution_misfit(const Distribution& dist, DType dtype, size_t elements) {
  const DTypeInfo& t = dtype_info(dtype);
  const bool exact_dtype = t.kind != DTypeKind::floating;
  if (exact_dtype && !integer_law(dist.kind) && dist.kind != DistributionKind::zeros &&
      dist.kind != DistributionKind::constant) {
    return fmt::format("{} data needs an integer law (randint, arange, permutation, zeros or constant), not {}", t.name,
                       to_string(dist.kind));
  }
  if (!exact_dtype && !integer_law(dist.kind)) return "";
  // The least and greatest value the law reaches, and the values it takes besides (the special value).
  const double n = static_cast<double>(elements);
  double lo = 0.0, hi = 0.0;
  switch (dist.kind) {
    case DistributionKind::randint:
      lo = dist.low;
      hi = dist.high;
      break;
    case DistributionKind::arange:
      lo = dist.low;
      hi = dist.low + std::max(n - 1.0, 0.0);
      break;
    case DistributionKind::permutation:
      lo = 0.0;
      hi = std::max(n - 1.0, 0.0);
      break;
    case DistributionKind::constant:
      lo = hi = dist.value;
      break;
    default:
      break;  // zeros; the floating laws never reach here
  }
  auto integral = [](double v) { return std::isfinite(v) && std::nearbyint(v) == v; };
  if (!integral(lo) || !integral(hi)) {
    return fmt::format("{} data holds integers only (got the value {})", t.name, integral(lo) ? hi : lo);
  }
  const double least = exact_dtype ? t.lowest : -t.highest;
  if (lo < least || hi > t.highest) {
    return fmt::format("{} reaches {} to {} here, beyond what {} holds exactly ({} to {}){}", to_string(dist.kind), lo,
                       hi, t.name, least, t.highest,
                       exact_dtype ? "" : "; integer-valued data needs a wider dtype or fewer elements");
  }
  if (exact_dtype && dist.special_fraction > 0.0 &&
      !(integral(dist.special_value) && dist.special_value >= t.lowest && dist.special_value <= t.highest)) {
    return fmt::format("special_value {} is not a {} value (integers from {} to {})", dist.special_value, t.name,
                       t.lowest, t.highest);
  }
  return "";
}

void fill_tensor(const Distribution& dist, DType dtype, std::span<unsigned char> out, uint64_t seed) {
  const size_t width = dtype_size(dtype);
  if (out.size() % width != 0) throw std::invalid_argument("fill_tensor: size is not a multiple of the dtype");
  const size_t n = out.size() / width;
  Rng rng(seed);
  // The special-value mix draws from a stream of its own, so the other elements are those of the plain law.
  Rng special(seed ^ 0x5EC1A1F4AC710Eull);
  auto store = [&](size_t i, double v) { store_element(dtype, out.data(), i, v); };
  // permutation: 0 to n - 1, shuffled (Fisher-Yates, from the back), drawn before the loop.
  std::vector<uint64_t> permutation;
  if (dist.kind == DistributionKind::permutation) {
    permutation.resize(n);
    std::iota(permutation.begin(), permutation.end(), uint64_t{0});
    for (size_t i = n; i > 1; --i) std::swap(permutation[i - 1], permutation[rng.next() % i]);
  }
  // randint's span high - low + 1 fits 64 bits: both ends are within +-2^53.
  const uint64_t span = dist.kind == DistributionKind::randint ? static_cast<uint64_t>(dist.high - dist.low) + 1 : 0;
  for (size_t i = 0; i < n; ++i) {
    double v = 0.0;
    switch (dist.kind) {
      case DistributionKind::normal:
        v = dist.mean + dist.scale * rng.normal();
        break;
      case DistributionKind::uniform:
        v = dist.low + (dist.high - dist.low) * rng.uniform01();
        break;
      case DistributionKind::zeros:
        v = 0.0;
        break;
      case DistributionKind::constant:
        v = dist.value;
        break;
      case DistributionKind::log_uniform: {
        const double magnitude = std::pow(10.0, dist.low + (dist.high - dist.low) * rng.uniform01());
        v = (rng.next() & 1) != 0 ? -magnitude : magnitude;
        break;
      }
      case DistributionKind::randint:
        v = dist.low + static_cast<double>(rng.next() % span);
        break;
      case DistributionKind::arange:
        v = dist.low + static_cast<double>(i);
        break;
      case DistributionKind::permutation:
        v = static_cast<double>(permutation[i]);
        break;
    }
    if (dist.special_fraction > 0.0 && special.uniform01() < dist.special_fraction) v = dist.special_value;
    store(i, v);
  }
}

}  // namespace kwb
