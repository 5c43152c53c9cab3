// Twins stay within their law (session/case_data.h, change_within_law): for every law kwb offers, on every dtype it
// fits, with and without a special value mixed in, each element a twin may change moves to another value of the
// law's support (and no farther from its centre than the old value or one scale), a special value (a mask's -inf, a
// NaN) never moves, a law of one value never changes, and an integer law keeps its range or its multiset.
#include "session/case_data.h"
#include "task/data.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace kwb {
namespace {

struct Law {
  std::string name;
  Distribution dist;
};

Distribution make(DistributionKind kind, double low = -1.0, double high = 1.0) {
  Distribution d;
  d.kind = kind;
  d.low = low;
  d.high = high;
  return d;
}

std::vector<Law> laws() {
  std::vector<Law> out;
  out.push_back({"normal", make(DistributionKind::normal)});
  Distribution shifted = make(DistributionKind::normal);
  shifted.mean = 5.0;  // positive data (a variance, a scale): a twin must not make it negative
  shifted.scale = 0.1;
  out.push_back({"normal(5, 0.1)", shifted});
  out.push_back({"uniform[-1, 1)", make(DistributionKind::uniform)});
  out.push_back({"uniform[2, 3)", make(DistributionKind::uniform, 2.0, 3.0)});
  out.push_back({"log_uniform[-7, 4.8)", make(DistributionKind::log_uniform, -7.0, 4.8)});
  out.push_back({"zeros", make(DistributionKind::zeros)});
  Distribution constant = make(DistributionKind::constant);
  constant.value = 16.0;  // a constant index: it must stay 16
  out.push_back({"constant 16", constant});
  out.push_back({"randint[0, 99]", make(DistributionKind::randint, 0.0, 99.0)});
  out.push_back({"randint[-3, 3]", make(DistributionKind::randint, -3.0, 3.0)});
  out.push_back({"randint[0, 1]", make(DistributionKind::randint, 0.0, 1.0)});
  out.push_back({"arange from 0", make(DistributionKind::arange, 0.0, 0.0)});
  out.push_back({"permutation", make(DistributionKind::permutation)});
  return out;
}

const double k_nan = std::numeric_limits<double>::quiet_NaN();
const double k_inf = std::numeric_limits<double>::infinity();

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Whether `w`, a value a twin wrote where the base held `v`, is within `d`'s support and spread.
std::string outside_law(const Distribution& d, double v, double w) {
  switch (d.kind) {
    case DistributionKind::normal:
      if (!std::isfinite(w)) return "not finite";
      // The mirror keeps the distance from the mean; a value near the mean moves by one scale: at most max(|v - mean|,
      // 1.5 scale) from the mean, with room for the dtype's rounding.
      if (std::abs(w - d.mean) > std::max(std::abs(v - d.mean), 1.5 * d.scale) * 1.01 + 1e-3) {
        return fmt::format("{} is farther from the mean {} than {} was", w, d.mean, v);
      }
      return "";
    case DistributionKind::uniform:
      return w >= d.low - 1e-3 && w <= d.high + 1e-3 ? "" : fmt::format("{} outside [{}, {}]", w, d.low, d.high);
    case DistributionKind::log_uniform: {
      const double m = std::abs(w);
      return m >= std::pow(10.0, d.low) * 0.99 && m <= std::pow(10.0, d.high) * 1.01
                 ? ""
                 : fmt::format("|{}| outside 10^[{}, {}]", w, d.low, d.high);
    }
    case DistributionKind::randint:
      return w >= d.low && w <= d.high && std::nearbyint(w) == w ? ""
                                                                 : fmt::format("{} outside [{}, {}]", w, d.low, d.high);
    default:
      return "";  // zeros and constant never change; arange and permutation are checked as multisets
  }
}

TEST(twin_law_test, every_twin_change_stays_within_its_law_and_special_values_stay) {
  const std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16, DType::f64,    DType::i8,
                                     DType::i32, DType::i64, DType::u8,   DType::boolean};
  const std::vector<std::pair<double, double>> specials = {{0.0, 0.0}, {0.1, -k_inf}, {0.1, k_nan}, {0.1, 0.0}};
  constexpr size_t n = 200;
  size_t combinations = 0, changes = 0;
  for (const Law& law : laws()) {
    for (DType dtype : dtypes) {
      for (const auto& [fraction, special] : specials) {
        Distribution d = law.dist;
        d.special_fraction = fraction;
        d.special_value = special;
        if (!distribution_misfit(d, dtype, n).empty()) continue;  // a law the dtype does not take
        ++combinations;
        const std::string where =
            fmt::format("{} on {} with special {} at {}", law.name, dtype_info(dtype).name, special, fraction);
        std::vector<unsigned char> base(n * dtype_size(dtype));
        fill_tensor(d, dtype, base, 42);
        Rng rng(7);
        for (size_t at = 0; at < n; ++at) {
          std::vector<unsigned char> twin = base;
          std::string what;
          const bool changed = change_within_law(dtype, d, twin, at, rng, &what);
          const double v = load_element(dtype, base.data(), at);
          const bool is_special = fraction > 0.0 && same_value(v, special);
          std::vector<double> before(n), after(n);
          for (size_t k = 0; k < n; ++k) {
            before[k] = load_element(dtype, base.data(), k);
            after[k] = load_element(dtype, twin.data(), k);
          }
          size_t moved = 0;
          for (size_t k = 0; k < n; ++k) {
            if (same_value(before[k], after[k])) continue;
            ++moved;
            // A special value never moves, nor does anything move onto a special value's place.
            EXPECT_FALSE(fraction > 0.0 && same_value(before[k], special))
                << where << ": special value at " << k << " became " << after[k];
            EXPECT_EQ(outside_law(d, before[k], after[k]), "") << where << ": element " << k;
          }
          EXPECT_EQ(changed, moved > 0) << where << " at " << at << " (" << what << ")";
          if (is_special || d.kind == DistributionKind::zeros || d.kind == DistributionKind::constant) {
            EXPECT_FALSE(changed) << where << ": element " << at << " (" << v << ") must not change";
          }
          if (d.kind == DistributionKind::arange || d.kind == DistributionKind::permutation) {
            // NaN (a special value) sorts last, and compares equal to NaN.
            auto nan_last = [](double x, double y) { return std::isnan(y) ? !std::isnan(x) : x < y; };
            std::vector<double> a = before, b = after;
            std::sort(a.begin(), a.end(), nan_last);
            std::sort(b.begin(), b.end(), nan_last);
            EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), same_value))
                << where << ": a swap keeps the multiset";
          }
          if (changed) ++changes;
        }
      }
    }
  }
  // Every law met at least one dtype, and most positions of the laws with more than one value changed.
  EXPECT_GE(combinations, 60u);
  EXPECT_GT(changes, combinations * n / 3);
}

TEST(twin_law_test, a_law_with_more_than_one_value_changes_a_plain_element_far_enough_to_matter) {
  // normal at 0: a value within half a scale of the mean moves by a whole scale, so a twin is never a rounding error.
  Distribution d;
  std::vector<unsigned char> data(4 * sizeof(float));
  for (size_t k = 0; k < 4; ++k) store_element(DType::f32, data.data(), k, 0.01 * static_cast<double>(k));
  Rng rng(1);
  ASSERT_TRUE(change_within_law(DType::f32, d, data, 1, rng));
  EXPECT_NEAR(load_element(DType::f32, data.data(), 1), 0.01 - 1.0, 1e-6);
  // uniform[2, 3): half the width away, inside the range.
  d = make(DistributionKind::uniform, 2.0, 3.0);
  store_element(DType::f32, data.data(), 0, 2.25);
  ASSERT_TRUE(change_within_law(DType::f32, d, data, 0, rng));
  EXPECT_FLOAT_EQ(static_cast<float>(load_element(DType::f32, data.data(), 0)), 2.75f);
  // A masked -inf stays -inf (a twin that made it +inf broke an honest cross-entropy reference).
  d = make(DistributionKind::normal);
  d.special_fraction = 0.5;
  d.special_value = -k_inf;
  store_element(DType::f32, data.data(), 2, -k_inf);
  EXPECT_FALSE(change_within_law(DType::f32, d, data, 2, rng));
  EXPECT_EQ(load_element(DType::f32, data.data(), 2), -k_inf);
  // A constant index of 16 stays 16 (a twin once made it -32).
  d = make(DistributionKind::constant);
  d.value = 16.0;
  std::vector<unsigned char> ids(2 * sizeof(int32_t));
  store_element(DType::i32, ids.data(), 0, 16.0);
  store_element(DType::i32, ids.data(), 1, 16.0);
  EXPECT_FALSE(change_within_law(DType::i32, d, ids, 0, rng));
  EXPECT_EQ(load_element(DType::i32, ids.data(), 0), 16.0);
}

}  // namespace
}  // namespace kwb
