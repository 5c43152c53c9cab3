#include "stats/layout_floor.h"

#include "stats/checks.h"
#include "stats/descriptive.h"
#include "stats/distributions.h"
#include "stats/intervals.h"
#include "stats/layout.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kwb::stats {

namespace {

struct Group {
  std::size_t n = 0;
  double sum = 0.0;
};

// The blocks' log ratios clipped to median +- k_outlier_modified_z scaled MADs (winsorized): a disturbed block (the
// decode blocks are heavy-tailed, docs/timing.md "Estimator and interval") would otherwise move its build's mean and
// pass for a layout effect. Blocks within the limits are unchanged.
std::vector<double> winsorized(std::span<const double> d) {
  std::vector<double> out(d.begin(), d.end());
  if (out.empty()) return out;
  const double centre = median(d);
  const double limit = k_outlier_modified_z * scaled_mad(d);
  for (double& v : out) v = std::clamp(v, centre - limit, centre + limit);
  return out;
}

}  // namespace

BuildEffect build_effect(std::span<const double> raw_log_ratios, std::span<const int> builds) {
  if (builds.size() != raw_log_ratios.size()) {
    throw std::invalid_argument("build_effect: " + std::to_string(raw_log_ratios.size()) + " log ratios but " +
                                std::to_string(builds.size()) + " builds; every block needs its build");
  }
  detail::require_values(raw_log_ratios, 0, "build_effect");
  const std::vector<double> log_ratios = winsorized(raw_log_ratios);
  std::map<int, Group> groups;
  for (std::size_t i = 0; i < builds.size(); ++i) {
    if (builds[i] < 0) {
      throw std::invalid_argument("build_effect: block " + std::to_string(i) + " has build " +
                                  std::to_string(builds[i]) + "; builds are numbered from 0");
    }
    Group& g = groups[builds[i]];
    ++g.n;
    g.sum += log_ratios[i];
  }
  BuildEffect e;
  e.groups = groups.size();
  const auto n = static_cast<double>(log_ratios.size());
  double sum_sq_n = 0.0;
  for (const auto& [build, g] : groups) sum_sq_n += static_cast<double>(g.n) * static_cast<double>(g.n);
  if (n > 0) e.weight = sum_sq_n / (n * n);
  const double df_between = static_cast<double>(e.groups) - 1.0;
  const double df_within = n - static_cast<double>(e.groups);
  // One build, or fewer than two blocks a build on average: below that the blocks' own spread already holds the
  // builds' (each block mostly another build), and a within-build spread of a few blocks is too frail to test on.
  if (df_between < 1.0 || df_within < df_between + 1.0) return e;
  double total = 0.0;
  for (const double d : log_ratios) total += d;
  const double grand = total / n;
  double ss_between = 0.0;
  for (const auto& [build, g] : groups) {
    const double m = g.sum / static_cast<double>(g.n);
    ss_between += static_cast<double>(g.n) * (m - grand) * (m - grand);
  }
  double ss_within = 0.0;
  for (std::size_t i = 0; i < builds.size(); ++i) {
    const Group& g = groups[builds[i]];
    const double r = log_ratios[i] - g.sum / static_cast<double>(g.n);
    ss_within += r * r;
  }
  const double ms_between = ss_between / df_between;
  const double ms_within = ss_within / df_within;
  if (!(ms_within > 0.0)) {
    // No spread within any build: the builds explain all of it, or there is none at all.
    e.p_value = ms_between > 0.0 ? 0.0 : 1.0;
  } else {
    e.p_value = f_upper_tail(ms_between / ms_within, df_between, df_within);
  }
  // E[MS_between] = sigma^2_within + n0 sigma^2_build, n0 = (n - sum n_g^2 / n) / (groups - 1).
  const double n0 = (n - sum_sq_n / n) / df_between;
  const double excess = ms_between - ms_within;
  if (excess > 0.0 && n0 > 0.0) {
    e.variance = excess / n0;
    // A difference of mean squares: Satterthwaite's approximation (Satterthwaite, Biometrics Bulletin 1946).
    e.variance_df = excess * excess / (ms_between * ms_between / df_between + ms_within * ms_within / df_within);
  }
  return e;
}

LayoutFloor layout_floor(std::span<const double> log_ratios, std::span<const int> builds_reference,
                         std::span<const int> builds_other) {
  if (log_ratios.size() < 2) {
    throw std::invalid_argument("layout_floor: need at least 2 blocks, got " + std::to_string(log_ratios.size()));
  }
  LayoutFloor f;
  f.arm = {build_effect(log_ratios, builds_reference), build_effect(log_ratios, builds_other)};
  double sum_sq_over_df = 0.0;
  for (const BuildEffect& e : f.arm) {
    if (!(e.p_value < k_layout_alpha && e.variance > 0.0 && e.variance_df > 0.0)) continue;
    const double term = e.weight * e.variance;
    f.variance_log += term;
    sum_sq_over_df += term * term / e.variance_df;
    f.applied = true;
  }
  if (f.applied) f.df = f.variance_log * f.variance_log / sum_sq_over_df;
  return f;
}

}  // namespace kwb::stats
