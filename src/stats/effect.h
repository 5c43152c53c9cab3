// The effect of candidate B against baseline A for one workload, from per-block log ratios d_i = ln(B_i / A_i)
// of the per-block median times (blocks are the independent unit: Kalibera & Jones, ISMM 2013).
// improvement % = (1 - t_B / t_A) * 100 = (1 - exp(d)) * 100: positive means the candidate is faster.
#pragma once

#include "stats/layout_floor.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kwb::stats {

// estimate_effect decides with paired_t or hodges_lehmann; bootstrap names the cross-check interval for reporters.
enum class IntervalMethod { paired_t, bootstrap, hodges_lehmann };

std::string_view to_string(IntervalMethod method);  // "paired_t", "bootstrap", "hodges_lehmann"

struct EffectEstimate {
  size_t blocks = 0;
  double mean_log_ratio = 0.0;
  double sd_log_ratio = 0.0;
  double improvement_pct = 0.0;  // from the centre of `method`: mean of d (paired_t) or Hodges-Lehmann estimate
  double ci_low_pct = 0.0;       // improvement-% interval at `confidence` from `method`: the decision interval
  double ci_high_pct = 0.0;
  double confidence = 0.0;  // the confidence asked for; the signed-rank interval covers at least this much
  IntervalMethod method = IntervalMethod::paired_t;
  bool heavy_tailed = false;
  double t_ci_low_pct = 0.0;  // cross-checks at the same confidence, always computed
  double t_ci_high_pct = 0.0;
  double boot_ci_low_pct = 0.0;
  double boot_ci_high_pct = 0.0;
  double mde_pct = 0.0;  // improvement % detectable with 80% power at `confidence` with this many blocks
  // A/B over layout pools: the variance the layouts' sample adds (layout_floor.h). When applied, each side of the
  // decision interval is widened in quadrature by the floor's half-width (its t quantile at layout.df times its sd),
  // and the MDE's standard error includes it; the cross-check intervals stay the plain ones.
  LayoutFloor layout;
};

// Resamples for the cross-check bootstrap: enough for stable 2.5% tails (Efron & Tibshirani suggest >= 1000 for
// percentile-type intervals); the cost is resamples * blocks draws.
inline constexpr int k_default_bootstrap_resamples = 10000;

// (1 - exp(d)) * 100.
double improvement_pct_from_log_ratio(double d);

// d_i = ln(b_i / a_i) per block. Throws when the sizes differ or a block statistic is not a positive finite time.
std::vector<double> log_ratios(std::span<const double> a_block_stats, std::span<const double> b_block_stats);

// Needs >= 2 blocks and finite log ratios. The decision interval is the paired t interval, or the Hodges-Lehmann
// signed-rank interval when heavy_tailed(d) and n can reach `confidence` with it (otherwise t, which stays
// conservative under symmetric heavy tails: Efron, JASA 1969). The bootstrap (seeded by `seed`) is a cross-check only.
// An applied `layout` floor widens the decision interval and the MDE (EffectEstimate::layout).
EffectEstimate estimate_effect(std::span<const double> log_ratios, double confidence, std::uint64_t seed,
                               int bootstrap_resamples = k_default_bootstrap_resamples, const LayoutFloor& layout = {});

}  // namespace kwb::stats
