#include "oracle/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace {

// The oracle itself is the task's (tasks/rmsnorm/oracle.cpp; tests/integration/oracle_test.cpp runs it). Here: the
// element-wise comparison of an implementation's outputs with the oracle's.

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

// The comparison runs in chunks with a vectorized fast pass (tolerance.cpp); its counts, first mismatches and maxima
// must be exactly those of the element-by-element rules, wherever in a chunk a disagreement falls.
TEST(tolerance_test, chunked_comparison_agrees_with_the_element_rules_across_chunk_boundaries) {
  const size_t n = 10000;  // several chunks and a partial one
  std::vector<double> expected(n);
  std::vector<float> got(n);
  for (size_t i = 0; i < n; ++i) {
    expected[i] = std::sin(static_cast<double>(i)) * 100.0;
    got[i] = static_cast<float>(expected[i]);
  }
  const uint32_t poison_bits = 0x7FC0ABCDu;
  float poison;
  std::memcpy(&poison, &poison_bits, 4);
  got[2047] = static_cast<float>(expected[2047] * 1.01);  // last element of the first chunk
  got[2048] = poison;                                     // first element of the second chunk
  got[5000] = std::numeric_limits<float>::quiet_NaN();
  expected[7000] = INFINITY;  // finite got against an infinite oracle: never within, whatever rtol * inf says
  got[9999] = static_cast<float>(expected[9999] * 1.005);  // the partial last chunk
  for (kwb::ErrorStats stats : {kwb::ErrorStats::compute, kwb::ErrorStats::skip}) {
    const kwb::OutputComparison c = kwb::compare_output(bytes(got), kwb::DType::f32, expected, k_tol, poison_bits, stats);
    EXPECT_EQ(c.value_mismatches, 2u);
    EXPECT_EQ(c.nonfinite_mismatches, 2u);
    EXPECT_EQ(c.poison_left, 1u);
    ASSERT_TRUE(c.first_value_mismatch);
    EXPECT_EQ(c.first_value_mismatch->index, 2047u);
    ASSERT_TRUE(c.first_nonfinite_mismatch);
    EXPECT_EQ(c.first_nonfinite_mismatch->index, 5000u);
  }
  // The maxima, asked for, cover the clean chunks too: float rounding there, 1% at 2047.
  const kwb::OutputComparison with = kwb::compare_output(bytes(got), kwb::DType::f32, expected, k_tol, poison_bits);
  EXPECT_NEAR(with.max_rel_error, 0.01, 1e-6);
  got[2047] = static_cast<float>(expected[2047]);
  got[9999] = static_cast<float>(expected[9999]);
  got[5000] = static_cast<float>(expected[5000]);
  got[2048] = static_cast<float>(expected[2048]);
  expected[7000] = 1.0;
  got[7000] = 1.0f;
  const kwb::OutputComparison clean = kwb::compare_output(bytes(got), kwb::DType::f32, expected, k_tol, poison_bits);
  EXPECT_EQ(clean.value_mismatches + clean.nonfinite_mismatches + clean.poison_left, 0u);
  EXPECT_GT(clean.max_rel_error, 0.0);                // float rounding of the sines
  EXPECT_LE(clean.max_rel_error, 0x1p-24 * 1.0001);  // and no more than float's unit roundoff
}

// Near zero, atol governs: a relative error of 50% can use half the tolerance, and the report says the share used
// (check's "tolerance used"), which means the same wherever the element lies.
TEST(tolerance_test, the_share_of_the_tolerance_used_is_reported_where_the_relative_error_misleads) {
  const kwb::Tolerance tol{1e-3, 1e-6};  // rtol 1e-3, atol 1e-6
  const std::vector<float> got = {1.5e-6f, 100.05f};
  const std::vector<double> expected = {1e-6, 100.0};  // allowed: 1e-6 + 1e-9 and 1e-6 + 0.1
  const kwb::OutputComparison c = kwb::compare_output(bytes(got), kwb::DType::f32, expected, tol, 0x7FC01234u);
  EXPECT_EQ(c.value_mismatches, 0u);
  EXPECT_NEAR(c.max_rel_error, 0.5, 1e-3);        // looks alarming
  EXPECT_NEAR(c.max_tolerance_used, 0.5, 2e-3);   // both elements use about half of what they may
  const kwb::OutputComparison skipped =
      kwb::compare_output(bytes(got), kwb::DType::f32, expected, tol, 0x7FC01234u, kwb::ErrorStats::skip);
  EXPECT_EQ(skipped.max_tolerance_used, 0.0);
}

}  // namespace
