// Layout randomization (docs/timing.md, "Layout"): where code, stack and data land changes a kernel's speed by
// several percent (Mytkowicz et al., ASPLOS 2009), so one fixed layout per arm biases every comparison. Each arm is
// built in K code layouts, and every visit draws, independently per arm, a layout variant from a balanced schedule,
// a stack offset at the call and an offset of each tensor within its page. Everything here is a pure function of the
// workload's seed, so `kwb verify` re-derives every visit's layout from the plan.
#pragma once

#include "stats/random.h"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kwb::stats {

// K on the cpu backend: 8 variants cover the four 16-byte slots of a 64-byte line twice each, at eight different
// offsets within a page (builder.h, layout_pad_bytes), while the schedule below still visits every variant once per 8
// blocks.
inline constexpr int k_cpu_layouts = 8;
// Device backends: the driver places device code and device buffers; only host code moves with a pad, and it is not
// what is timed. One layout (the plain build), no stack or data offsets.
inline constexpr int k_device_layouts = 1;

// The stack offset at the call: 0..4080 bytes in steps of 16 (the ABI's stack alignment is kept).
inline constexpr std::uint32_t k_stack_offset_step = 16, k_stack_offset_slots = 256;
// Each tensor's offset within its page: 0..4032 bytes in steps of 64 (a cache line; more than the element size
// the ABI promises, docs/candidate-abi.md).
inline constexpr std::uint32_t k_tensor_offset_step = 64, k_tensor_offset_slots = 64;

struct VisitLayout {
  int variant = 0;                            // index into the arm's layout pool (0 = the plain build)
  std::uint32_t stack_offset = 0;             // bytes
  std::vector<std::uint32_t> tensor_offsets;  // bytes, one per tensor: inputs then outputs, in signature order
};

// The layout of arm `arm`'s visit in block `block` (>= 0): the variant from a balanced schedule (each run of
// `layouts` consecutive blocks visits every variant once, in an order drawn per arm and run), the offsets drawn
// per visit. Arms draw independently: A/A compares the baseline's pool with itself.
inline VisitLayout visit_layout(std::uint64_t workload_seed, std::size_t arm, int block, int layouts,
                                std::size_t tensors, bool offsets) {
  VisitLayout v;
  const auto k = static_cast<std::uint64_t>(layouts < 1 ? 1 : layouts);
  const auto b = static_cast<std::uint64_t>(block < 0 ? 0 : block);
  // The run's permutation (Fisher-Yates), seeded by workload, arm and run.
  Xoshiro256StarStar run(workload_seed ^ (0x9E3779B97F4A7C15ull * (arm + 1)) ^ (0xD1B54A32D192ED03ull * (b / k + 1)));
  std::vector<int> perm(static_cast<std::size_t>(k));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[run.uniform_below(i)]);
  v.variant = perm[static_cast<std::size_t>(b % k)];
  if (offsets) {
    Xoshiro256StarStar draw(workload_seed ^ (0xA0761D6478BD642Full * (arm + 1)) ^ (0xE7037ED1A0B428DBull * (b + 1)));
    v.stack_offset = k_stack_offset_step * static_cast<std::uint32_t>(draw.uniform_below(k_stack_offset_slots));
    for (std::size_t t = 0; t < tensors; ++t) {
      v.tensor_offsets.push_back(k_tensor_offset_step *
                                 static_cast<std::uint32_t>(draw.uniform_below(k_tensor_offset_slots)));
    }
  } else {
    v.tensor_offsets.assign(tensors, 0);
  }
  return v;
}

// How much an arm's speed depends on its layout: the median of the visit medians of each build in its pool, and
// their spread, max/min - 1. The observed spread of noisy medians is above zero even when layout does not matter;
// a bootstrap that resamples visits within each build (stratified, 2000 resamples) measures that bias, and the
// estimate and its 95% interval are the basic bootstrap's: reflected about the observed spread, so the estimate is
// bias-corrected and always inside its interval. A spread of a few noisy medians can be large by chance alone, so a
// permutation test (build labels shuffled among the visits) says whether layout matters at all: p_value, and the
// spread noise alone gives (null_spread_pct). Layout is shown to matter when p_value < k_layout_alpha.
struct LayoutSensitivity {
  std::vector<double> variant_median_ns;  // per build; -1 where the build was not visited
  std::vector<std::size_t> variant_visits;
  bool available = false;            // at least two builds with at least two visits each
  double observed_spread_pct = 0.0;  // max/min - 1 of the medians of the builds visited at least twice
  double spread_pct = 0.0, ci_low_pct = 0.0, ci_high_pct = 0.0;  // bias-corrected estimate and interval
  double null_spread_pct = 0.0;  // the median spread over permutations of the build labels: noise alone
  double p_value = 1.0;          // permutation p-value of "no layout effect"
};

inline constexpr double k_layout_alpha = 0.01;

// `visits`: (build index, visit median in ns) of one arm in one workload. Deterministic in `seed`.
LayoutSensitivity layout_sensitivity(const std::vector<std::pair<int, double>>& visits, int layouts,
                                     std::uint64_t seed);

}  // namespace kwb::stats
