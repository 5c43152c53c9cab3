#include "stats/descriptive.h"

#include "stats/checks.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace kwb::stats {

namespace {

std::vector<double> sorted_copy(std::span<const double> x) {
  std::vector<double> sorted(x.begin(), x.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

}  // namespace

double detail::quantile_sorted(std::span<const double> sorted, double p) {
  const double h = static_cast<double>(sorted.size() - 1) * p;
  const auto low = static_cast<size_t>(std::floor(h));
  if (low + 1 >= sorted.size()) return sorted.back();
  return sorted[low] + (h - static_cast<double>(low)) * (sorted[low + 1] - sorted[low]);
}

double mean(std::span<const double> x) {
  detail::require_values(x, 1, "mean");
  double sum = 0.0;
  for (double v : x) sum += v;
  return sum / static_cast<double>(x.size());
}

double stddev(std::span<const double> x) {
  detail::require_values(x, 2, "stddev");
  const double m = mean(x);
  double squares = 0.0;
  for (double v : x) squares += (v - m) * (v - m);
  return std::sqrt(squares / static_cast<double>(x.size() - 1));
}

double quantile(std::span<const double> x, double p) {
  detail::require_values(x, 1, "quantile");
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument("quantile: p must lie in [0, 1], got " + detail::format_number(p));
  }
  return detail::quantile_sorted(sorted_copy(x), p);
}

double median(std::span<const double> x) {
  detail::require_values(x, 1, "median");
  return detail::quantile_sorted(sorted_copy(x), 0.5);
}

double mad(std::span<const double> x) {
  detail::require_values(x, 1, "mad");
  const double centre = median(x);
  std::vector<double> deviations(x.size());
  std::transform(x.begin(), x.end(), deviations.begin(), [centre](double v) { return std::fabs(v - centre); });
  return median(deviations);
}

double scaled_mad(std::span<const double> x) { return k_mad_to_sd * mad(x); }

Summary summarize(std::span<const double> x) {
  detail::require_values(x, 1, "summarize");
  const std::vector<double> sorted = sorted_copy(x);
  Summary s;
  s.n = x.size();
  s.mean = mean(x);
  s.sd = x.size() >= 2 ? stddev(x) : 0.0;
  s.median = detail::quantile_sorted(sorted, 0.5);
  s.mad = scaled_mad(x);
  s.min = sorted.front();
  s.max = sorted.back();
  s.p05 = detail::quantile_sorted(sorted, 0.05);
  s.p95 = detail::quantile_sorted(sorted, 0.95);
  return s;
}

}  // namespace kwb::stats
