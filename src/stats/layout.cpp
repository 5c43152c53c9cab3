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

// Whether layout matters at all: under "no layout effect" the visits of the builds visited at least twice are
// exchangeable, so their build labels are shuffled (group sizes kept) and the spread recomputed, 2000 times. The
// p-value is the share of shuffles whose spread reaches the observed one, counting the observed arrangement
// (Phipson & Smyth 2010); the median shuffled spread is what noise alone gives with these visits.
void permutation_test(const std::vector<std::vector<double>>& by, double observed, std::uint64_t seed,
                      LayoutSensitivity& out) {
  constexpr int k_permutations = 2000;
  std::vector<double> pooled;
  for (const auto& v : by) {
    if (v.size() >= 2) pooled.insert(pooled.end(), v.begin(), v.end());
  }
  Xoshiro256StarStar rng(seed ^ 0x9E7A17ull);
  std::vector<double> spreads, medians(by.size()), group;
  spreads.reserve(k_permutations);
  int reached = 0;
  for (int r = 0; r < k_permutations; ++r) {
    for (std::size_t i = pooled.size(); i > 1; --i) std::swap(pooled[i - 1], pooled[rng.uniform_below(i)]);
    std::size_t at = 0;
    for (std::size_t i = 0; i < by.size(); ++i) {
      if (by[i].size() < 2) {
        medians[i] = -1.0;
        continue;
      }
      group.assign(pooled.begin() + static_cast<std::ptrdiff_t>(at),
                   pooled.begin() + static_cast<std::ptrdiff_t>(at + by[i].size()));
      at += by[i].size();
      medians[i] = median(group);
    }
    spreads.push_back(spread(medians));
    reached += spreads.back() >= observed * (1.0 - 1e-12);
  }
  std::sort(spreads.begin(), spreads.end());
  out.null_spread_pct = spreads[spreads.size() / 2];
  out.p_value = static_cast<double>(reached + 1) / static_cast<double>(k_permutations + 1);
}

}  // namespace

LayoutSensitivity layout_sensitivity(const std::vector<std::pair<int, double>>& visits, int layouts,
                                     std::uint64_t seed) {
  LayoutSensitivity out;
  const auto k = static_cast<std::size_t>(std::max(layouts, 1));
  std::vector<std::vector<double>> by(k);
  for (const auto& [variant, ns] : visits) {
    if (variant >= 0 && static_cast<std::size_t>(variant) < k && ns > 0)
      by[static_cast<std::size_t>(variant)].push_back(ns);
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
  out.observed_spread_pct = spread(point);
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
  auto at = [&](double p) { return spreads[static_cast<std::size_t>(p * (k_resamples - 1))]; };
  // The basic (reverse percentile) bootstrap: the resampled spreads sit above the observed one by about as much as
  // the observed one sits above the true spread, so both the point and the interval are reflected about the
  // observed spread (Davison & Hinkley 1997, sec. 5.2). With the bootstrap median as the centre, the point always
  // lies inside its interval; all three are clipped at 0, which a spread cannot go below.
  const double observed = out.observed_spread_pct;
  permutation_test(by, observed, seed, out);
  out.spread_pct = std::max(0.0, 2.0 * observed - at(0.5));
  out.ci_low_pct = std::max(0.0, 2.0 * observed - at(0.975));
  out.ci_high_pct = std::max(0.0, 2.0 * observed - at(0.025));
  return out;
}

}  // namespace kwb::stats
