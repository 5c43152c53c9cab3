// Replay detection (session/replay.h): a call whose output is the previous call's result is flagged; outputs that
// only look like it (an honest result equal to the previous one where the inputs agree, a wrong constant, an
// underflowed tail, a minority of elements, an output also wrong where both results agree) are not.
#include "session/replay.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kwb {
namespace {

// The output bytes of `values` stored as `dtype`.
std::vector<unsigned char> stored(const std::vector<double>& values, DType dtype = DType::f64) {
  std::vector<unsigned char> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) store_element(dtype, bytes.data(), i, values[i]);
  return bytes;
}

const Tolerance k_tol{ToleranceMode::abs_rel, 1e-3, 1e-6};  // rtol, atol

TEST(replay_test, an_output_that_is_the_previous_calls_result_is_a_replay) {
  const std::vector<double> previous = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<double> expected = {11, 12, 13, 14, 15, 16, 17, 18};
  const auto r = detect_replay(previous, expected, stored(previous), DType::f64, k_tol);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->replayed, 8u);
  EXPECT_EQ(r->differing, 8u);
}

TEST(replay_test, a_replay_is_found_in_a_16_bit_output_within_tolerance) {
  const std::vector<double> previous = {1.001, 2.002, 3.003, 4.004};
  const std::vector<double> expected = {-1, -2, -3, -4};
  const auto r = detect_replay(previous, expected, stored(previous, DType::bf16), DType::bf16,
                               Tolerance{ToleranceMode::abs_rel, 1e-2, 0});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->replayed, 4u);
}

TEST(replay_test, an_honest_output_equal_to_the_previous_where_the_inputs_agree_is_no_replay) {
  // A twin: its result differs from its base's in two elements only. The honest output equals the previous result
  // everywhere else, and a precision error there must not count either.
  const std::vector<double> previous = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<double> expected = previous;
  expected[2] = 30;
  expected[5] = 60;
  EXPECT_FALSE(detect_replay(previous, expected, stored(expected), DType::f64, k_tol));
  std::vector<double> imprecise = expected;
  for (size_t k : {0, 1, 3, 4, 6, 7}) imprecise[k] *= 1.5;
  EXPECT_FALSE(detect_replay(previous, expected, stored(imprecise), DType::f64, k_tol));
}

TEST(replay_test, an_output_wrong_where_both_results_agree_is_a_wrong_value_not_a_replay) {
  // A twin changed rows 1 and 2 of an embedding lookup; the kernel reads the row after the one asked for. Where the
  // results differ its output happens to hold the previous result, but rows 0 and 3, which the twin left alone, are
  // wrong too: a bug (numeric_mismatch), not a replay (stale_output).
  const std::vector<double> previous = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<double> expected = previous;
  expected[2] = 30;
  expected[3] = 40;
  expected[4] = 50;
  expected[5] = 60;
  std::vector<double> wrong_row = previous;  // the previous values where the results differ...
  wrong_row[0] = 3;                          // ...and another row's value where they agree
  wrong_row[7] = 1;
  EXPECT_FALSE(detect_replay(previous, expected, stored(wrong_row), DType::f64, k_tol));
  // The same output right where the results agree is a replay.
  wrong_row[0] = 1;
  wrong_row[7] = 8;
  EXPECT_TRUE(detect_replay(previous, expected, stored(wrong_row), DType::f64, k_tol).has_value());
}

TEST(replay_test, identical_results_leave_nothing_to_tell_a_replay_by) {
  const std::vector<double> same = {1, 2, 3, 4};
  EXPECT_FALSE(detect_replay(same, same, stored(same), DType::f64, k_tol));
  EXPECT_FALSE(detect_replay({}, same, stored(same), DType::f64, k_tol));
}

TEST(replay_test, a_constant_output_is_a_wrong_value_not_a_replay) {
  // The previous result was all zeros: an all-zeros output reproduces it but could be any wrong constant.
  const std::vector<double> zeros(6, 0.0);
  const std::vector<double> expected = {1, 2, 3, 4, 5, 6};
  EXPECT_FALSE(detect_replay(zeros, expected, stored(zeros), DType::f64, k_tol));
  // Previous results that differ only below atol (an underflowed tail) are one value to a reader of the output.
  const std::vector<double> tail = {1e-12, 2e-12, 3e-12, 4e-12, 5e-12, 6e-12};
  EXPECT_FALSE(detect_replay(tail, expected, stored(zeros), DType::f64, k_tol));
}

TEST(replay_test, only_a_majority_of_the_differing_elements_makes_a_replay) {
  const std::vector<double> previous = {1, 2, 3, 4};
  const std::vector<double> expected = {10, 20, 30, 40};
  EXPECT_FALSE(detect_replay(previous, expected, stored({1, 2, 0, 0}), DType::f64, k_tol));   // half: 2 of 4
  const auto r = detect_replay(previous, expected, stored({1, 2, 3, 0}), DType::f64, k_tol);  // 3 of 4
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->replayed, 3u);
  EXPECT_EQ(r->differing, 4u);
}

TEST(replay_test, results_of_other_lengths_are_compared_on_their_common_prefix) {
  // The previous call was another case, with a shorter output.
  const std::vector<double> previous = {1, 2, 3};
  const std::vector<double> expected = {10, 20, 30, 40, 50, 60};
  const auto r = detect_replay(previous, expected, stored({1, 2, 3, 0, 0, 0}), DType::f64, k_tol);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->differing, 3u);
  EXPECT_EQ(r->replayed, 3u);
  // An output shorter than both (a truncated buffer) bounds the comparison too.
  EXPECT_FALSE(detect_replay(previous, expected, stored({1}), DType::f64, k_tol));
}

}  // namespace
}  // namespace kwb
