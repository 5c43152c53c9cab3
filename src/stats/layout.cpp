#include "stats/layout.h"

#include "stats/descriptive.h"

#include <algorithm>
#include <cmath>

namespace kwb::stats {

namespace {

// max/min - 1 over the builds that have a median, in percent.
double spread(const std::vector<double>& medians) {
  double lo = 0, hi = 0;
  bool any = false;
  for (double m : medians) {
    if (m <= 0) continue;
    lo = any ? std::min(lo, m) : m;
    hi = any ? std::max(hi, m) : m;
    any = true;
  }
  return any ? (hi / lo - 1.0) * 100.0 : 0.0;
}

}  // namespace

LayoutSensitivity layout_sensitivity(const std::vector<std::pair<int, double>>& visits, int layouts, std::uint64_t seed) {
  LayoutSensitivity out;
  const auto k = static_cast<std::size_t>(std::max(layouts, 1));
  std::vector<std::vector<double>> by(k);
  for (const auto& [variant, ns] : visits) {
    if (variant >= 0 && static_cast<std::size_t>(variant) < k && ns > 0) by[static_cast<std::size_t>(variant)].push_back(ns);
  }
  std::size_t usable = 0;
  for (const auto& v : by) {
    out.variant_visits.push_back(v.size());
    out.variant_median_ns.push_back(v.empty() ? -1.0 : median(v));
    usable += v.size() >= 2;
  }
  out.available = usable >= 2;
  if (!out.available) return out;
  std::vector<double> point(k);  // builds visited at least twice, as in the bootstrap
  for (std::size_t i = 0; i < k; ++i) point[i] = by[i].size() >= 2 ? out.variant_median_ns[i] : -1.0;
  out.spread_pct = spread(point);
  constexpr int k_resamples = 2000;
  Xoshiro256StarStar rng(seed ^ 0x1A7037ull);
  std::vector<double> spreads;
  spreads.reserve(k_resamples);
  std::vector<double> medians(k), draw;
  for (int r = 0; r < k_resamples; ++r) {
    for (std::size_t i = 0; i < k; ++i) {
      if (by[i].size() < 2) {
        medians[i] = -1.0;  // a build seen once cannot be resampled; it stays out of the interval
        continue;
      }
      draw.clear();
      for (std::size_t j = 0; j < by[i].size(); ++j) draw.push_back(by[i][rng.uniform_below(by[i].size())]);
      medians[i] = median(draw);
    }
    spreads.push_back(spread(medians));
  }
  std::sort(spreads.begin(), spreads.end());
  out.ci_low_pct = spreads[static_cast<std::size_t>(0.025 * (k_resamples - 1))];
  out.ci_high_pct = spreads[static_cast<std::size_t>(0.975 * (k_resamples - 1))];
  return out;
}

}  // namespace kwb::stats
