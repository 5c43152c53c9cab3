#include "oracle/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

// The oracle itself is the task's (tasks/rmsnorm/oracle.cpp; tests/integration/oracle_test.cpp runs it). Here: the
// element-wise comparison of an implementation's outputs with the oracle's.

const kwb::Tolerance k_tol{kwb::ToleranceMode::abs_rel, 1e-3, 1e-6};

TEST(tolerance_test, boundary_is_inclusive) {
  // |got - expected| <= atol + rtol * |expected|: expected 1 -> bound 1.001e-3 (binary fractions keep it exact
  // enough: test just inside and just outside).
  EXPECT_TRUE(kwb::within_tolerance(1.0 + 1.0009e-3, 1.0, k_tol, kwb::DType::f64));
  EXPECT_FALSE(kwb::within_tolerance(1.0 + 1.0011e-3, 1.0, k_tol, kwb::DType::f64));
  EXPECT_TRUE(kwb::within_tolerance(-1.0 - 1.0009e-3, -1.0, k_tol, kwb::DType::f64));
}

TEST(tolerance_test, atol_governs_near_zero) {
  EXPECT_TRUE(kwb::within_tolerance(9e-7, 0.0, k_tol, kwb::DType::f64));
  EXPECT_FALSE(kwb::within_tolerance(2e-6, 0.0, k_tol, kwb::DType::f64));
}

TEST(tolerance_test, nan_is_never_within) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(kwb::within_tolerance(nan, 1.0, k_tol, kwb::DType::f64));
  EXPECT_FALSE(kwb::within_tolerance(1.0, nan, k_tol, kwb::DType::f64));
}

template <typename T>
std::span<const unsigned char> bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const unsigned char*>(v.data()), v.size() * sizeof(T)};
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
    const kwb::OutputComparison c =
        kwb::compare_output(bytes(got), kwb::DType::f32, expected, k_tol, poison_bits, stats);
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
  EXPECT_GT(clean.max_rel_error, 0.0);               // float rounding of the sines
  EXPECT_LE(clean.max_rel_error, 0x1p-24 * 1.0001);  // and no more than float's unit roundoff
}

// The vector pass (AVX2, where the CPU has it) and the scalar one give the same comparison, element for element:
// random outputs of f32 and f64 seeded with every kind of disagreement (NaN, the poison, +-Inf on either side, just
// inside and just outside the tolerance, -0, the largest finite values), at lengths that leave every tail.
TEST(tolerance_test, the_vector_pass_and_the_scalar_pass_agree) {
  std::mt19937_64 rng(20261202);
  auto compare_both = [](auto got, const std::vector<double>& expected, kwb::DType dtype, uint64_t poison) {
    kwb::OutputComparison r[2];
    for (int vector : {0, 1}) {
      kwb::allow_vector_compare(vector == 1);
      r[vector] = kwb::compare_output(bytes(got), dtype, expected, k_tol, poison, kwb::ErrorStats::skip);
    }
    kwb::allow_vector_compare(true);
    EXPECT_EQ(r[0].value_mismatches, r[1].value_mismatches);
    EXPECT_EQ(r[0].nonfinite_mismatches, r[1].nonfinite_mismatches);
    EXPECT_EQ(r[0].poison_left, r[1].poison_left);
    EXPECT_EQ(r[0].first_value_mismatch.has_value(), r[1].first_value_mismatch.has_value());
    if (r[0].first_value_mismatch && r[1].first_value_mismatch) {
      EXPECT_EQ(r[0].first_value_mismatch->index, r[1].first_value_mismatch->index);
    }
    return r[0].value_mismatches + r[0].nonfinite_mismatches + r[0].poison_left;
  };
  size_t disagreements = 0;
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng() % 4200;  // one chunk, two, and every remainder mod 4
    std::vector<double> expected(n);
    std::uniform_real_distribution<double> value(-100.0, 100.0);
    for (double& e : expected) e = value(rng);
    std::vector<float> f32(n);
    std::vector<double> f64(n);
    for (size_t i = 0; i < n; ++i) {
      f32[i] = static_cast<float>(expected[i]);
      f64[i] = expected[i];
    }
    const uint32_t poison32 = 0x7FC00000u | static_cast<uint32_t>(1 + rng() % 0x3FFFFF);
    const uint64_t poison64 = 0x7FF8000000000000ull | (1 + rng() % 0xFFFFFFFFFFull);
    float p32;
    double p64;
    std::memcpy(&p32, &poison32, 4);
    std::memcpy(&p64, &poison64, 8);
    const int edits = static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const size_t i = rng() % n;
      const double allowed = k_tol.atol + k_tol.rtol * std::fabs(expected[i]);
      switch (rng() % 9) {
        case 0:
          f32[i] = std::numeric_limits<float>::quiet_NaN();
          f64[i] = std::nan("");
          break;
        case 1:
          f32[i] = p32;
          f64[i] = p64;
          break;
        case 2:
          f32[i] = INFINITY;
          f64[i] = -INFINITY;
          break;
        case 3:
          expected[i] = INFINITY;
          break;
        case 4:
          expected[i] = std::nan("");
          break;
        case 5:
          f64[i] = expected[i] + allowed;
          f32[i] = static_cast<float>(expected[i] + 2 * allowed);
          break;
        case 6:
          f64[i] = expected[i] - allowed * 1.0000001;
          f32[i] = static_cast<float>(expected[i] - allowed / 2);
          break;
        case 7:
          expected[i] = 0.0;
          f64[i] = -0.0;
          f32[i] = -0.0f;
          break;
        case 8:
          expected[i] = std::numeric_limits<double>::max();
          f64[i] = std::numeric_limits<double>::max();
          f32[i] = std::numeric_limits<float>::max();
          break;
      }
    }
    disagreements += compare_both(f32, expected, kwb::DType::f32, poison32);
    disagreements += compare_both(f64, expected, kwb::DType::f64, poison64);
  }
  EXPECT_GT(disagreements, 100u);  // the rounds did test disagreements, not only clean outputs
}

// Near zero, atol governs: a relative error of 50% can use half the tolerance, and the report says the share used
// (check's "tolerance used"), which means the same wherever the element lies.
TEST(tolerance_test, the_share_of_the_tolerance_used_is_reported_where_the_relative_error_misleads) {
  const kwb::Tolerance tol{kwb::ToleranceMode::abs_rel, 1e-3, 1e-6};  // rtol 1e-3, atol 1e-6
  const std::vector<float> got = {1.5e-6f, 100.05f};
  const std::vector<double> expected = {1e-6, 100.0};  // allowed: 1e-6 + 1e-9 and 1e-6 + 0.1
  const kwb::OutputComparison c = kwb::compare_output(bytes(got), kwb::DType::f32, expected, tol, 0x7FC01234u);
  EXPECT_EQ(c.value_mismatches, 0u);
  EXPECT_NEAR(c.max_rel_error, 0.5, 1e-3);       // looks alarming
  EXPECT_NEAR(c.max_tolerance_used, 0.5, 2e-3);  // both elements use about half of what they may
  const kwb::OutputComparison skipped =
      kwb::compare_output(bytes(got), kwb::DType::f32, expected, tol, 0x7FC01234u, kwb::ErrorStats::skip);
  EXPECT_EQ(skipped.max_tolerance_used, 0.0);
}

// ulp mode measures in the output's dtype: at 1.0 one f32 ulp is 2^-23, one bf16 ulp 2^-7; at 0 (and below the
// smallest normal) the spacing is the subnormals', 2^-149 for f32.
TEST(tolerance_test, ulp_mode_counts_units_in_the_last_place_of_the_output_dtype) {
  const kwb::Tolerance two_ulp{kwb::ToleranceMode::ulp, 0, 0, 2.0};
  EXPECT_TRUE(kwb::within_tolerance(1.0 + 2 * 0x1p-23, 1.0, two_ulp, kwb::DType::f32));
  EXPECT_FALSE(kwb::within_tolerance(1.0 + 3 * 0x1p-23, 1.0, two_ulp, kwb::DType::f32));
  EXPECT_TRUE(kwb::within_tolerance(1.0 + 2 * 0x1p-7, 1.0, two_ulp, kwb::DType::bf16));
  EXPECT_FALSE(kwb::within_tolerance(1.0 + 3 * 0x1p-7, 1.0, two_ulp, kwb::DType::bf16));
  // Just below a power of two the spacing is half: 1.5 ulp at 0.75 is 1.5 * 2^-24.
  EXPECT_DOUBLE_EQ(kwb::allowed_error(0.75, {kwb::ToleranceMode::ulp, 0, 0, 1.5}, kwb::DType::f32), 1.5 * 0x1p-24);
  EXPECT_DOUBLE_EQ(kwb::allowed_error(0.0, two_ulp, kwb::DType::f32), 2 * 0x1p-149);
  EXPECT_DOUBLE_EQ(kwb::allowed_error(-0x1p-140, two_ulp, kwb::DType::f32), 2 * 0x1p-149);  // f32 subnormal range
  EXPECT_DOUBLE_EQ(kwb::allowed_error(1000.0, two_ulp, kwb::DType::f16), 2 * 0.5);          // f16 at 512..1024
  // Counted as a share in the report: 1 ulp off under a 2-ulp tolerance is half of it.
  const std::vector<float> got = {1.0f + 0x1p-23f};
  const std::vector<double> expected = {1.0};
  const kwb::OutputComparison c = kwb::compare_output(bytes(got), kwb::DType::f32, expected, two_ulp, 0x7FC01234u);
  EXPECT_EQ(c.value_mismatches, 0u);
  EXPECT_DOUBLE_EQ(c.max_tolerance_used, 0.5);
}

TEST(tolerance_test, exact_mode_allows_no_difference_and_reports_any_as_beyond_the_tolerance) {
  const kwb::Tolerance exact{kwb::ToleranceMode::exact};
  const std::vector<float> got = {1.0f, 2.0f + 0x1p-22f};
  const std::vector<double> expected = {1.0, 2.0};
  const kwb::OutputComparison c = kwb::compare_output(bytes(got), kwb::DType::f32, expected, exact, 0x7FC01234u);
  EXPECT_EQ(c.value_mismatches, 1u);
  ASSERT_TRUE(c.first_value_mismatch);
  EXPECT_EQ(c.first_value_mismatch->index, 1u);
  EXPECT_TRUE(std::isinf(c.max_tolerance_used));
}

// An integer output is compared exactly whatever tolerance it is handed: 1 off is a mismatch even under a wide
// abs_rel tolerance. i64 values beyond 2^53 cannot pass for the oracle's (which are within it).
TEST(tolerance_test, integer_outputs_are_compared_exactly_whatever_the_tolerance) {
  const kwb::Tolerance wide{kwb::ToleranceMode::abs_rel, 0.5, 10.0};
  const std::vector<int32_t> got = {7, 8, -3};
  const std::vector<double> expected = {7, 9, -3};
  const kwb::OutputComparison c = kwb::compare_output(
      {reinterpret_cast<const unsigned char*>(got.data()), got.size() * 4}, kwb::DType::i32, expected, wide, 0xDEADu);
  EXPECT_EQ(c.value_mismatches, 1u);
  EXPECT_EQ(c.first_value_mismatch->index, 1u);
  const std::vector<int64_t> big = {(int64_t{1} << 53) + 1};
  const std::vector<double> near = {9007199254740991.0};  // 2^53 - 1: the largest i64 the oracle may return
  const kwb::OutputComparison b =
      kwb::compare_output({reinterpret_cast<const unsigned char*>(big.data()), 8}, kwb::DType::i64, near, wide, 0);
  EXPECT_EQ(b.value_mismatches, 1u);
}

// A dtype without NaN has no pattern a result cannot hold: an element equal to the poison is unwritten only where
// the oracle expects something else; where it expects exactly that value, it is a correct result.
TEST(tolerance_test, integer_poison_counts_as_unwritten_only_where_it_differs_from_the_oracle) {
  const kwb::Tolerance exact{kwb::ToleranceMode::exact};
  const std::vector<int8_t> got = {-77, -77, 5};
  const std::vector<double> expected = {-77, 3, 5};
  const uint64_t poison = static_cast<uint8_t>(int8_t{-77});
  const kwb::OutputComparison c = kwb::compare_output({reinterpret_cast<const unsigned char*>(got.data()), got.size()},
                                                      kwb::DType::i8, expected, exact, poison);
  EXPECT_EQ(c.poison_left, 1u);
  EXPECT_EQ(c.value_mismatches, 0u);
  // A boolean output holding a byte other than 0 or 1 (bool's poison is one) matches nothing.
  const std::vector<uint8_t> flags = {1, 0, 0xA7};
  const std::vector<double> want = {1, 0, 1};
  const kwb::OutputComparison f =
      kwb::compare_output({flags.data(), flags.size()}, kwb::DType::boolean, want, exact, 0xA7);
  EXPECT_EQ(f.poison_left, 1u);
}

}  // namespace
