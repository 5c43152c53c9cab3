// Descriptive statistics over a sample. Every function throws std::invalid_argument on an empty sample or a
// non-finite value rather than returning NaN.
#pragma once

#include <cstddef>
#include <span>

namespace kwb::stats {

// 1 / Phi^-1(3/4): scales the MAD so that it estimates the standard deviation of normal data
// (Rousseeuw & Croux, JASA 1993).
inline constexpr double k_mad_to_sd = 1.4826;

double mean(std::span<const double> x);
// Sample standard deviation with the n - 1 denominator; needs at least 2 values.
double stddev(std::span<const double> x);
double median(std::span<const double> x);
// Hyndman & Fan (1996) type 7, the default of R and NumPy: linear interpolation between order statistics at
// h = (n - 1) p. p must lie in [0, 1].
double quantile(std::span<const double> x, double p);
// Median absolute deviation from the median, unscaled.
double mad(std::span<const double> x);
// k_mad_to_sd * mad(x): a robust standard deviation.
double scaled_mad(std::span<const double> x);

struct Summary {
  size_t n = 0;
  double mean = 0.0;
  double sd = 0.0;  // n - 1 denominator; 0 when n == 1 (one value shows no spread: check n before trusting it)
  double median = 0.0;
  double mad = 0.0;  // scaled by k_mad_to_sd so it reads on the same scale as sd
  double min = 0.0;
  double max = 0.0;
  double p05 = 0.0;  // type 7 quantiles
  double p95 = 0.0;
};

Summary summarize(std::span<const double> x);

namespace detail {
// quantile() on data already sorted ascending and checked; lets callers that sort anyway avoid a second sort.
double quantile_sorted(std::span<const double> sorted, double p);
}  // namespace detail

}  // namespace kwb::stats
