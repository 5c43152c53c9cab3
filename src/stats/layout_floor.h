// The layout floor of an A/B interval (docs/timing.md, "The layout floor"). Each arm is timed over a pool of K builds
// (layout.h), so the mean of the blocks' log ratios holds, besides the arms' difference, the mean layout effect of
// the K builds each arm drew: a sample of K layouts, which no number of blocks averages away. The paired t interval
// over blocks counts the layout effects as noise that shrinks with sqrt(blocks), so on a kernel whose speed moves with
// its layout (a naive gemm: its two layouts' medians 29% apart) it called the same kernel 11% faster, with an interval
// of +-2%. The floor is the variance of that mean layout effect, estimated per arm from the blocks themselves: a
// one-way analysis of variance of the log ratios by the arm's build (its other arm's builds are drawn independently,
// so they are within-group noise), its between-build variance component by the method of moments (Searle, Casella &
// McCulloch, *Variance Components*, 1992, sec. 3.5, with the unbalanced design's n0), counted only where the F test
// says the builds explain the blocks (p < k_layout_alpha). The ratios are winsorized at the median +- 3.5 scaled MADs
// first (a disturbed block is not a layout), and an arm is tested only from two blocks a build on average. The floor
// is V = sum over the counted arms of c_arm * sigma^2_arm (c_arm = sum of n_g^2 / n^2, 1/K when balanced), with
// Welch-Satterthwaite's degrees of freedom; effect.h widens each side of the decision interval by its t half-width,
// in quadrature. Only A/B: an A/A draws both arms from one pool, so over a balanced run of blocks its layout effects
// cancel exactly.
#pragma once

#include <array>
#include <cstddef>
#include <span>

namespace kwb::stats {

// One arm's builds against the blocks' log ratios: a one-way analysis of variance.
struct BuildEffect {
  std::size_t groups = 0;    // builds with at least one block
  double p_value = 1.0;      // F test of "the builds explain none of the blocks' spread"; 1 when it cannot be formed
  double variance = 0.0;     // between-build variance component of the log ratio, method of moments, >= 0
  double variance_df = 0.0;  // its Satterthwaite degrees of freedom (0 when variance is 0)
  double weight = 0.0;       // c = sum of n_g^2 / n^2: the variance of the blocks' mean effect is c * variance
};

// `builds[i]`: the arm's build in block i (>= 0); the same length as `log_ratios`. Throws on a length mismatch, a
// negative build or a non-finite ratio.
BuildEffect build_effect(std::span<const double> log_ratios, std::span<const int> builds);

struct LayoutFloor {
  bool applied = false;            // some arm's builds explain the blocks (p < k_layout_alpha) with a variance > 0
  double variance_log = 0.0;       // added to the variance of the mean log ratio: sum of the applied arms' c * variance
  double df = 0.0;                 // the added variance's own Satterthwaite degrees of freedom (0 when not applied)
  std::array<BuildEffect, 2> arm;  // per arm: reference (A), then the other
};

// Both arms' build effects and the floor they add. Needs at least 2 blocks.
LayoutFloor layout_floor(std::span<const double> log_ratios, std::span<const int> builds_reference,
                         std::span<const int> builds_other);

}  // namespace kwb::stats
