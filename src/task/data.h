// Deterministic input generation. Own PRNG and transforms (not <random>'s distributions, whose output differs
// between standard libraries), so a seed means the same bytes on every machine and a bundle can be re-derived.
#pragma once

#include "task/task.h"
#include "util/seed.h"

#include <cstdint>
#include <span>

namespace kwb {

// The stream is Xoshiro256StarStar's (util/seed.h: xoshiro256** seeded through splitmix64), the one generator of
// the tree; this adds the transforms input generation needs.
class Rng {
public:
  explicit Rng(uint64_t seed) : m_gen(seed) {}
  uint64_t next() { return m_gen.next(); }
  double uniform01();  // [0, 1) with 53 random bits
  double normal();     // Box-Muller, both values used

private:
  Xoshiro256StarStar m_gen;
  bool m_have_spare = false;
  double m_spare = 0.0;
};

// The seed of input tensor `input_index` in input set `set_index` of a case, under a run nonce. Different
// sets of one case never share data, so a replayed output never matches by accident.
uint64_t input_seed(const Case& c, size_t input_index, uint64_t set_index, uint64_t nonce);

// Element `i` of a tensor of `dtype` stored at `data`, as a double (exact: every dtype is a subset of double), and
// the reverse, rounded to the nearest value of `dtype` (ties to even, once, straight from the double), overflowing
// to infinity. The one place that knows how each dtype is stored.
double load_element(DType dtype, const unsigned char* data, size_t i);
void store_element(DType dtype, unsigned char* data, size_t i, double v);

// The 16-bit formats: bits of the nearest f16 / bf16 to `v` (ties to even; NaN becomes the quiet NaN of that sign),
// and the exact value of a bit pattern.
uint16_t f16_bits(double v);
uint16_t bf16_bits(double v);
double f16_value(uint16_t bits);
double bf16_value(uint16_t bits);

// Fills `out` (elements of `dtype`) from `dist`.
void fill_tensor(const Distribution& dist, DType dtype, std::span<unsigned char> out, uint64_t seed);

}  // namespace kwb
