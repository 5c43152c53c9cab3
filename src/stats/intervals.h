// Confidence intervals for the centre of per-block log ratios d_i = ln(B_i / A_i). Blocks are the independent unit
// (Kalibera & Jones, ISMM 2013: iterations inside one process are not independent replicates), so every method
// here treats one block as one observation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kwb::stats {

struct Interval {
  double low = 0.0;
  double high = 0.0;
};

// Fewer resamples than this make the tail quantiles of the bootstrap distribution too coarse to mean anything.
inline constexpr int k_min_bootstrap_resamples = 100;

// Iglewicz & Hoaglin (1993): a point is an outlier when its modified z-score 0.6745 (x - median) / MAD exceeds
// 3.5, i.e. when it lies more than 3.5 scaled MADs from the median.
inline constexpr double k_outlier_modified_z = 3.5;
// Normal data put about 0.05% of points beyond that limit; more than 1% outliers (so a single one in up to 100
// blocks) means a few disturbed blocks dominate the mean and sd, and a rank method is the better choice.
inline constexpr double k_heavy_tail_outlier_fraction = 0.01;

// Student t interval for the mean: mean +- t_{(1+c)/2, n-1} sd / sqrt(n). Needs n >= 2; identical data give a
// zero-width interval at the mean.
Interval t_interval_mean(std::span<const double> d, double confidence);

// BCa bootstrap interval for the mean (Efron & Tibshirani, An Introduction to the Bootstrap, 1993, ch. 14):
// resamples whole blocks with replacement. The same seed gives the same resample indices on every platform.
// Needs n >= 2 and resamples >= k_min_bootstrap_resamples.
Interval bootstrap_mean_interval(std::span<const double> d, double confidence, int resamples, std::uint64_t seed);

// Hodges-Lehmann estimate of the centre: the median of the n (n + 1) / 2 Walsh averages (d_i + d_j) / 2, i <= j
// (Hodges & Lehmann 1963). O(n^2) memory, fine for the tens to hundreds of blocks a session runs.
double hodges_lehmann(std::span<const double> d);

// Distribution-free interval for the centre of a symmetric distribution, inverted from the Wilcoxon signed-rank
// test (Hollander & Wolfe, Nonparametric Statistical Methods, section 3.3): [W_(C), W_(M+1-C)] over the sorted
// Walsh averages, where C - 1 is the largest t with P(T+ <= t) <= (1 - confidence) / 2. The null distribution of
// T+ is exact for n <= 50 and normal with continuity correction beyond, so coverage is at least `confidence`.
// Throws when n is too small to reach `confidence` (see signed_rank_max_confidence).
Interval hodges_lehmann_interval(std::span<const double> d, double confidence);

// The widest signed-rank interval, [min d, max d], covers with probability 1 - 2^(1-n); no higher confidence is
// reachable with n values (0.9375 for n = 5, 0.96875 for n = 6).
double signed_rank_max_confidence(size_t n);

// True when more than k_heavy_tail_outlier_fraction of the values are Iglewicz-Hoaglin outliers. A MAD of zero
// (more than half the values identical) makes every differing value an outlier. Measured at n = 30: normal data
// are flagged about 10% of the time (MAD noise lets one point past the limit), which costs little because the
// Hodges-Lehmann interval is 95% as efficient as t on normal data; Cauchy data about 97% of the time.
bool heavy_tailed(std::span<const double> d);

}  // namespace kwb::stats
