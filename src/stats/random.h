// A small seeded generator whose output is the same on every platform. std::mt19937_64 would be too, but the
// std:: distributions on top of it are implementation-defined, so a bootstrap seeded identically could give
// different intervals under libstdc++ and libc++. Resampling indices come from uniform_below instead.
#pragma once

#include "util/seed.h"

#include <bit>
#include <cstddef>
#include <cstdint>

namespace kwb::stats {

// The tree's one generator (util/seed.h), under the name the statistics have always used.
using Xoshiro256StarStar = kwb::Xoshiro256StarStar;

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
