#include "stats/effect.h"

#include "stats/checks.h"
#include "stats/descriptive.h"
#include "stats/distributions.h"
#include "stats/intervals.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace kwb::stats {

namespace {

// A higher log ratio is a slower candidate, so the ends swap: the low improvement comes from the high d.
Interval improvement_pct_interval(Interval d) {
  return {improvement_pct_from_log_ratio(d.high), improvement_pct_from_log_ratio(d.low)};
}

constexpr double k_mde_power = 0.8;

}  // namespace

std::string_view to_string(IntervalMethod method) {
  switch (method) {
    case IntervalMethod::paired_t:
      return "paired_t";
    case IntervalMethod::bootstrap:
      return "bootstrap";
    case IntervalMethod::hodges_lehmann:
      return "hodges_lehmann";
  }
  throw std::invalid_argument("to_string: unknown IntervalMethod " + std::to_string(static_cast<int>(method)));
}

double improvement_pct_from_log_ratio(double d) { return (1.0 - std::exp(d)) * 100.0; }

std::vector<double> log_ratios(std::span<const double> a_block_stats, std::span<const double> b_block_stats) {
  if (a_block_stats.size() != b_block_stats.size()) {
    throw std::invalid_argument("log_ratios: baseline has " + std::to_string(a_block_stats.size()) +
                                " block statistics but candidate has " + std::to_string(b_block_stats.size()) +
                                "; every block must time both arms");
  }
  const auto require_positive = [](double t, size_t block, const char* arm) {
    if (!(std::isfinite(t) && t > 0.0)) {
      throw std::invalid_argument(std::string("log_ratios: ") + arm + " time in block " + std::to_string(block) +
                                  " is " + detail::format_number(t) +
                                  " ns; block statistics must be positive and finite");
    }
  };
  std::vector<double> d(a_block_stats.size());
  for (size_t i = 0; i < d.size(); ++i) {
    require_positive(a_block_stats[i], i, "baseline");
    require_positive(b_block_stats[i], i, "candidate");
    d[i] = std::log(b_block_stats[i] / a_block_stats[i]);
  }
  return d;
}

EffectEstimate estimate_effect(std::span<const double> log_ratios, double confidence, std::uint64_t seed,
                               int bootstrap_resamples, const LayoutFloor& layout) {
  if (log_ratios.size() < 2) {
    throw std::invalid_argument("estimate_effect: need at least 2 blocks to estimate their spread, got " +
                                std::to_string(log_ratios.size()) + "; run more blocks");
  }
  detail::require_values(log_ratios, 2, "estimate_effect");
  detail::require_confidence(confidence, "estimate_effect");
  const size_t n = log_ratios.size();

  EffectEstimate e;
  e.blocks = n;
  e.mean_log_ratio = mean(log_ratios);
  e.sd_log_ratio = stddev(log_ratios);
  e.confidence = confidence;
  e.heavy_tailed = heavy_tailed(log_ratios);

  const Interval t_d = t_interval_mean(log_ratios, confidence);
  const Interval t = improvement_pct_interval(t_d);
  e.t_ci_low_pct = t.low;
  e.t_ci_high_pct = t.high;
  const Interval boot =
      improvement_pct_interval(bootstrap_mean_interval(log_ratios, confidence, bootstrap_resamples, seed));
  e.boot_ci_low_pct = boot.low;
  e.boot_ci_high_pct = boot.high;

  // The centre follows the method so the point estimate always lies inside the decision interval.
  double centre = e.mean_log_ratio;
  Interval d_interval;
  if (e.heavy_tailed && confidence <= signed_rank_max_confidence(n)) {
    e.method = IntervalMethod::hodges_lehmann;
    centre = hodges_lehmann(log_ratios);
    d_interval = hodges_lehmann_interval(log_ratios, confidence);
  } else {
    e.method = IntervalMethod::paired_t;
    d_interval = t_d;
  }
  e.layout = layout;
  if (layout.applied) {
    // The layout floor (layout_floor.h): each side of the interval widened in quadrature by the layouts' own
    // half-width, the t quantile at the floor's degrees of freedom times its standard deviation. Two independent
    // errors, each at its own quantile: at least as wide as a Welch-Satterthwaite t interval of the summed
    // variances, and it keeps the signed-rank interval where the blocks are heavy-tailed.
    const double floor_half = student_t_quantile(0.5 * (1.0 + confidence), layout.df) * std::sqrt(layout.variance_log);
    const double below = centre - d_interval.low, above = d_interval.high - centre;
    d_interval = {centre - std::sqrt(below * below + floor_half * floor_half),
                  centre + std::sqrt(above * above + floor_half * floor_half)};
  }
  e.improvement_pct = improvement_pct_from_log_ratio(centre);
  const Interval decision = improvement_pct_interval(d_interval);
  e.ci_low_pct = decision.low;
  e.ci_high_pct = decision.high;

  // Smallest true shift delta (in d) that a two-sided test at 1 - confidence detects with 80% power, normal
  // approximation: delta = (z_{1-alpha/2} + z_{0.8}) sd / sqrt(n) (2.8 sd / sqrt(n) at 95%), reported as the
  // improvement a shift of -delta would be. The layout floor's variance is part of the standard error.
  const double standard_error =
      layout.applied ? std::sqrt(e.sd_log_ratio * e.sd_log_ratio / static_cast<double>(n) + layout.variance_log)
                     : e.sd_log_ratio / std::sqrt(static_cast<double>(n));
  const double delta = (normal_quantile(0.5 * (1.0 + confidence)) + normal_quantile(k_mde_power)) * standard_error;
  e.mde_pct = improvement_pct_from_log_ratio(-delta);
  return e;
}

}  // namespace kwb::stats
