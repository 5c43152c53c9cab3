// A small seeded generator whose output is the same on every platform. std::mt19937_64 would be too, but the
// std:: distributions on top of it are implementation-defined, so a bootstrap seeded identically could give
// different intervals under libstdc++ and libc++. Resampling indices come from uniform_below instead.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace kwb::stats {

// xoshiro256** (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2021), seeded through
// splitmix64 as its authors recommend so that nearby seeds give unrelated streams.
class Xoshiro256StarStar {
public:
  explicit Xoshiro256StarStar(std::uint64_t seed) {
    for (std::uint64_t& word : m_state) word = splitmix64(seed);
  }

  std::uint64_t next() {
    const std::uint64_t result = std::rotl(m_state[1] * 5, 7) * 9;
    const std::uint64_t t = m_state[1] << 17;
    m_state[2] ^= m_state[0];
    m_state[3] ^= m_state[1];
    m_state[1] ^= m_state[2];
    m_state[0] ^= m_state[3];
    m_state[2] ^= t;
    m_state[3] = std::rotl(m_state[3], 45);
    return result;
  }

  // Uniform on [0, n) without modulo bias: draws below 2^64 mod n are rejected, so each residue is equally likely
  // (as in O'Neill's PCG bounded_rand). n must be > 0.
  std::uint64_t uniform_below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;
    for (;;) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

  // Uniform on the open interval (0, 1): 53 random bits, offset by half a step so neither end is reachable and
  // the value can feed an inverse CDF directly.
  double uniform_open01() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

private:
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }

  std::uint64_t m_state[4];
};

// The seed of the i-th workload of a comparison (i from 0): a 64-bit LCG step (Knuth's MMIX constants) per
// workload from the comparison's seed. compare uses it; verify re-derives every workload's seed with it.
inline std::uint64_t workload_seed(std::uint64_t comparison_seed, std::size_t index) {
  std::uint64_t s = comparison_seed;
  for (std::size_t i = 0; i <= index; ++i) s = s * 6364136223846793005ull + 1442695040888963407ull;
  return s;
}

// validate's comparison seeds: mix_seed(run seed, tag); verify re-derives them from the plan's seed.
inline constexpr std::uint64_t k_seed_tag_aa = 0xAA;
inline constexpr std::uint64_t k_seed_tag_ab = 0xAB;

}  // namespace kwb::stats
