// Deterministic input generation. Own PRNG and transforms (not <random>'s distributions, whose output differs
// between standard libraries), so a seed means the same bytes on every machine and a bundle can be re-derived.
#pragma once

#include "task/task.h"
#include "util/seed.h"

#include <cstdint>
#include <span>
#include <string>

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
// sets of one case never share data, so a replayed output never matches by accident. Nonce 0 is the published data
// (a public formula); any other nonce derives the seed through SHA-256, so that no tensor's data leads to another's.
uint64_t input_seed(const Case& c, size_t input_index, uint64_t set_index, uint64_t nonce);

// Why `dist` cannot fill `elements` elements of `dtype` with values the dtype holds exactly ("" when it can): an
// integer or boolean dtype takes the integer laws (randint, arange, permutation) and zeros or constant, with every
// value (the special value too) an integer within its range; a floating dtype takes integer laws only where every
// integer they reach is exact in it (bf16: up to 256).
std::string distribution_misfit(const Distribution& dist, DType dtype, size_t elements);

// Fills `out` (elements of `dtype`) from `dist`.
void fill_tensor(const Distribution& dist, DType dtype, std::span<unsigned char> out, uint64_t seed);

}  // namespace kwb
