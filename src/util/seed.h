// Seed mixing and the one generator: deterministic, the same on every machine. Input generation (task/data.h), the
// statistics (stats/random.h) and the canaries around shared buffers (worker/shared_buffer.cpp) all derive their
// bytes from seeds through these.
#pragma once

#include <bit>
#include <cstdint>

namespace kwb {

// splitmix64 (Steele et al. 2014): advances `x` and returns the next output.
inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One seed from two: unrelated outputs for nearby inputs, and mix_seed(a, b) != mix_seed(b, a).
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ std::rotl(b, 23) ^ 0xD1B54A32D192ED03ull;
  splitmix64(x);
  return splitmix64(x);
}

// xoshiro256** (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2021), seeded through
// splitmix64 as its authors recommend so that nearby seeds give unrelated streams.
class Xoshiro256StarStar {
public:
  explicit Xoshiro256StarStar(uint64_t seed) {
    for (uint64_t& word : m_state) word = splitmix64(seed);
  }

  uint64_t next() {
    const uint64_t result = std::rotl(m_state[1] * 5, 7) * 9;
    const uint64_t t = m_state[1] << 17;
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
  uint64_t uniform_below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

  // Uniform on the open interval (0, 1): 53 random bits, offset by half a step so neither end is reachable and
  // the value can feed an inverse CDF directly.
  double uniform_open01() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

private:
  uint64_t m_state[4];
};

}  // namespace kwb
