#include "stats/intervals.h"

#include "stats/checks.h"
#include "stats/descriptive.h"
#include "stats/distributions.h"
#include "stats/random.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace kwb::stats {

namespace {

// Up to this n the signed-rank null distribution is counted exactly (2^50 subsets still fit in uint64_t); R's
// wilcox.test switches to the normal approximation at about the same size (exact below 50).
constexpr size_t k_exact_signed_rank_max_n = 50;

std::vector<double> sorted_walsh_averages(std::span<const double> d) {
  std::vector<double> averages;
  averages.reserve(d.size() * (d.size() + 1) / 2);
  for (size_t i = 0; i < d.size(); ++i) {
    for (size_t j = i; j < d.size(); ++j) averages.push_back(0.5 * (d[i] + d[j]));
  }
  std::sort(averages.begin(), averages.end());
  return averages;
}

// The 1-based rank C of the lower endpoint among the Walsh averages: one more than the largest t with
// P(T+ <= t) <= alpha / 2. The caller guarantees C >= 1 is reachable.
size_t signed_rank_lower_rank(size_t n, double alpha) {
  const size_t total = n * (n + 1) / 2;
  if (n <= k_exact_signed_rank_max_n) {
    // counts[t] = number of subsets of {1..n} whose ranks sum to t; each has probability 2^-n under H0.
    std::vector<std::uint64_t> counts(total + 1, 0);
    counts[0] = 1;
    for (size_t rank = 1; rank <= n; ++rank) {
      for (size_t t = total; t >= rank; --t) counts[t] += counts[t - rank];
    }
    const double limit = 0.5 * alpha * std::ldexp(1.0, static_cast<int>(n));
    std::uint64_t cumulative = counts[0];
    size_t c = 0;
    while (static_cast<double>(cumulative) <= limit) cumulative += counts[++c];
    return c;
  }
  const double nd = static_cast<double>(n);
  const double mu = nd * (nd + 1.0) / 4.0;
  const double sigma = std::sqrt(nd * (nd + 1.0) * (2.0 * nd + 1.0) / 24.0);
  // Largest t with Phi((t + 0.5 - mu) / sigma) <= alpha / 2 is floor(mu - z sigma - 0.5); C is one more.
  const double c = std::floor(mu - normal_quantile(1.0 - 0.5 * alpha) * sigma + 0.5);
  return c < 1.0 ? 1 : static_cast<size_t>(c);
}

}  // namespace

Interval t_interval_mean(std::span<const double> d, double confidence) {
  detail::require_values(d, 2, "t_interval_mean");
  detail::require_confidence(confidence, "t_interval_mean");
  const double n = static_cast<double>(d.size());
  const double centre = mean(d);
  const double half_width = student_t_quantile(0.5 * (1.0 + confidence), n - 1.0) * stddev(d) / std::sqrt(n);
  return {centre - half_width, centre + half_width};
}

Interval bootstrap_mean_interval(std::span<const double> d, double confidence, int resamples, std::uint64_t seed) {
  detail::require_values(d, 2, "bootstrap_mean_interval");
  detail::require_confidence(confidence, "bootstrap_mean_interval");
  if (resamples < k_min_bootstrap_resamples) {
    throw std::invalid_argument("bootstrap_mean_interval: resamples must be >= " +
                                std::to_string(k_min_bootstrap_resamples) + ", got " + std::to_string(resamples));
  }
  const size_t n = d.size();
  const double theta = mean(d);

  Xoshiro256StarStar rng(seed);
  std::vector<double> means(static_cast<size_t>(resamples));
  for (double& m : means) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += d[rng.uniform_below(n)];
    m = sum / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());

  // Bias correction z0 from the share of resample means below the estimate. Ties count half and the share is kept
  // off 0 and 1, so identical data (every mean equal to theta) give z0 = 0 instead of an infinite z0.
  const auto [tie_begin, tie_end] = std::equal_range(means.begin(), means.end(), theta);
  const double b = static_cast<double>(resamples);
  const double below = static_cast<double>(tie_begin - means.begin()) + 0.5 * static_cast<double>(tie_end - tie_begin);
  const double z0 = normal_quantile(std::clamp(below / b, 0.5 / b, 1.0 - 0.5 / b));

  // Acceleration from the jackknife. For the mean, theta_(.) - theta_(i) = (d_i - mean) / (n - 1), so the
  // jackknife formula (Efron & Tibshirani eq. 14.15) reduces to sum e^3 / (6 (sum e^2)^1.5) with e_i = d_i - mean.
  double sum_sq = 0.0;
  double sum_cube = 0.0;
  for (double v : d) {
    const double e = v - theta;
    sum_sq += e * e;
    sum_cube += e * e * e;
  }
  const double a = sum_sq > 0.0 ? sum_cube / (6.0 * std::pow(sum_sq, 1.5)) : 0.0;

  // BCa maps the nominal level z to Phi(z0 + w / (1 - a w)), w = z0 + z. When one block dominates the skew, a w can
  // reach 1 and the map stops being monotone; its limit there is the extreme of the bootstrap distribution.
  const auto adjusted_level = [z0, a](double z) {
    const double w = z0 + z;
    const double denominator = 1.0 - a * w;
    if (denominator <= 0.0) return w > 0.0 ? 1.0 : 0.0;
    return normal_cdf(z0 + w / denominator);
  };
  const double z = normal_quantile(0.5 * (1.0 + confidence));
  return {detail::quantile_sorted(means, adjusted_level(-z)), detail::quantile_sorted(means, adjusted_level(z))};
}

double hodges_lehmann(std::span<const double> d) {
  detail::require_values(d, 1, "hodges_lehmann");
  return detail::quantile_sorted(sorted_walsh_averages(d), 0.5);
}

double signed_rank_max_confidence(size_t n) {
  // Capping n keeps the exponent in int range; beyond 54 values the result rounds to 1 anyway.
  return std::max(0.0, 1.0 - std::ldexp(1.0, 1 - static_cast<int>(std::min<size_t>(n, 64))));
}

Interval hodges_lehmann_interval(std::span<const double> d, double confidence) {
  detail::require_values(d, 2, "hodges_lehmann_interval");
  detail::require_confidence(confidence, "hodges_lehmann_interval");
  const size_t n = d.size();
  if (confidence > signed_rank_max_confidence(n)) {
    const auto needed = static_cast<size_t>(std::ceil(1.0 + std::log2(1.0 / (1.0 - confidence))));
    throw std::invalid_argument("hodges_lehmann_interval: " + std::to_string(n) + " values cannot reach confidence " +
                                detail::format_number(confidence) + " (at most " +
                                detail::format_number(signed_rank_max_confidence(n)) + "); use at least " +
                                std::to_string(needed) + " values or the t interval");
  }
  const std::vector<double> walsh = sorted_walsh_averages(d);
  const size_t c = signed_rank_lower_rank(n, 1.0 - confidence);
  return {walsh[c - 1], walsh[walsh.size() - c]};
}

bool heavy_tailed(std::span<const double> d) {
  detail::require_values(d, 1, "heavy_tailed");
  const double centre = median(d);
  const double limit = k_outlier_modified_z * scaled_mad(d);
  const auto outliers = std::count_if(d.begin(), d.end(), [&](double v) { return std::fabs(v - centre) > limit; });
  return static_cast<double>(outliers) > k_heavy_tail_outlier_fraction * static_cast<double>(d.size());
}

}  // namespace kwb::stats
