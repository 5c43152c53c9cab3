#include "oracle/oracle.h"
#include "oracle/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace {

kwb::TensorView view(const std::vector<float>& v, std::vector<int64_t> dims) {
  return {reinterpret_cast<const unsigned char*>(v.data()), kwb::DType::f32, std::move(dims)};
}

std::vector<double> rmsnorm(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t cols,
                            double eps) {
  const kwb::OracleFn* f = kwb::find_oracle("rmsnorm");
  std::vector<kwb::TensorView> in = {view(x, {rows, cols}), view(w, {cols})};
  std::vector<double> scalars = {eps};
  return (*f)(in, scalars).at(0);
}

TEST(oracle_test, rmsnorm_matches_hand_computed_row) {
  // x = [3, 4]: mean(x^2) = (9 + 16) / 2 = 12.5; eps = 0.25 -> rms = sqrt(12.75); w = [2, 0.5]
  std::vector<double> y = rmsnorm({3.0f, 4.0f}, {2.0f, 0.5f}, 1, 2, 0.25);
  EXPECT_NEAR(y[0], 3.0 / std::sqrt(12.75) * 2.0, 1e-15);
  EXPECT_NEAR(y[1], 4.0 / std::sqrt(12.75) * 0.5, 1e-15);
}

TEST(oracle_test, rmsnorm_normalises_each_row_separately) {
  // Row 0: [1, 1, 1, 1] -> rms 1 (eps 0); row 1: [2, 2, 2, 2] -> rms 2: both normalise to 1 * w.
  std::vector<double> y = rmsnorm({1, 1, 1, 1, 2, 2, 2, 2}, {1, 2, 3, 4}, 2, 4, 0.0);
  for (int c = 0; c < 4; ++c) {
    EXPECT_DOUBLE_EQ(y[c], c + 1.0);
    EXPECT_DOUBLE_EQ(y[4 + c], c + 1.0);
  }
}

TEST(oracle_test, rmsnorm_of_zeros_is_zero_with_eps) {
  std::vector<double> y = rmsnorm({0, 0, 0}, {1, 1, 1}, 1, 3, 1e-6);
  for (double v : y) EXPECT_EQ(v, 0.0);
}

TEST(oracle_test, rmsnorm_does_not_overflow_where_float_squares_would) {
  // (1e20)^2 = 1e40 overflows float32 but not long double: the oracle stays exact.
  std::vector<double> y = rmsnorm({1e20f, -1e20f}, {1, 1}, 1, 2, 0.0);
  EXPECT_NEAR(y[0], 1.0, 1e-12);
  EXPECT_NEAR(y[1], -1.0, 1e-12);
}

TEST(oracle_test, compensated_sum_recovers_what_naive_summation_loses) {
  // 1 + 10000 * 4e-20 - 1 in long double: each 4e-20 is below half an ulp of 1 (5.4e-20) and is lost naively,
  // giving 0; compensation keeps it, giving 4e-16.
  kwb::CompensatedSum s;
  long double naive = 1.0L;
  s.add(1.0L);
  for (int i = 0; i < 10000; ++i) {
    s.add(4e-20L);
    naive += 4e-20L;
  }
  s.add(-1.0L);
  naive -= 1.0L;
  EXPECT_EQ(naive, 0.0L);
  EXPECT_NEAR(static_cast<double>(s.value()), 4e-16, 1e-24);
}

TEST(oracle_test, unknown_oracle_is_null) { EXPECT_EQ(kwb::find_oracle("nope"), nullptr); }

// ---- tolerance ----------------------------------------------------------------------------------------------

const kwb::Tolerance k_tol{1e-3, 1e-6};

TEST(tolerance_test, boundary_is_inclusive) {
  // |got - expected| <= atol + rtol * |expected|: expected 1 -> bound 1.001e-3 (binary fractions keep it exact
  // enough: test just inside and just outside).
  EXPECT_TRUE(kwb::within_tolerance(1.0 + 1.0009e-3, 1.0, k_tol));
  EXPECT_FALSE(kwb::within_tolerance(1.0 + 1.0011e-3, 1.0, k_tol));
  EXPECT_TRUE(kwb::within_tolerance(-1.0 - 1.0009e-3, -1.0, k_tol));
}

TEST(tolerance_test, atol_governs_near_zero) {
  EXPECT_TRUE(kwb::within_tolerance(9e-7, 0.0, k_tol));
  EXPECT_FALSE(kwb::within_tolerance(2e-6, 0.0, k_tol));
}

TEST(tolerance_test, nan_is_never_within) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(kwb::within_tolerance(nan, 1.0, k_tol));
  EXPECT_FALSE(kwb::within_tolerance(1.0, nan, k_tol));
}

std::span<const unsigned char> bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const unsigned char*>(v.data()), v.size() * 4};
}

TEST(tolerance_test, compare_counts_each_kind_of_disagreement) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint32_t poison_bits = 0x7FC01234u;
  float poison;
  std::memcpy(&poison, &poison_bits, 4);
  std::vector<float> got = {1.0f, 2.5f, nan, inf, poison, nan, -inf};
  std::vector<double> expected = {1.0, 2.0, 3.0, 4.0, 5.0, std::nan(""), -INFINITY};
  kwb::OutputComparison c = kwb::compare_output(bytes(got), kwb::DType::f32, expected, k_tol, poison_bits);
  EXPECT_EQ(c.elements, 7u);
  EXPECT_EQ(c.value_mismatches, 1u);      // 2.5 vs 2
  EXPECT_EQ(c.nonfinite_mismatches, 2u);  // NaN vs 3, Inf vs 4 (NaN vs NaN and -Inf vs -Inf agree)
  EXPECT_EQ(c.poison_left, 1u);
  ASSERT_TRUE(c.first_value_mismatch);
  EXPECT_EQ(c.first_value_mismatch->index, 1u);
  EXPECT_NEAR(c.max_rel_error, 0.25, 1e-12);
}

TEST(tolerance_test, inf_of_the_wrong_sign_disagrees) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> got = {inf};
  std::vector<double> expected = {-INFINITY};
  EXPECT_EQ(kwb::compare_output(bytes(got), kwb::DType::f32, expected, k_tol, 0).nonfinite_mismatches, 1u);
}

TEST(tolerance_test, size_mismatch_is_an_error) {
  std::vector<float> got = {1.0f};
  std::vector<double> expected = {1.0, 2.0};
  EXPECT_THROW(kwb::compare_output(bytes(got), kwb::DType::f32, expected, k_tol, 0), std::invalid_argument);
}

}  // namespace
