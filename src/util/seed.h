// Seed mixing: deterministic, the same on every machine. Input generation (task/data.h) and the canaries around
// shared buffers (worker/shared_buffer.cpp) both derive their bytes from seeds through these.
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

}  // namespace kwb
