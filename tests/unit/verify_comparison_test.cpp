// verify's re-derivation of a workload (record/verify_comparison.h), on synthetic samples.csv rows.
#include "record/verify_comparison.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using kwb::SampleRow;

SampleRow row(int block, const std::string& arm, int64_t ns, bool warmup = false, bool valid = true) {
  SampleRow r;
  r.comparison = "ab";
  r.workload = "decode";
  r.block = block;
  r.arm = arm;
  r.ns = ns;
  r.warmup = warmup;
  r.output_valid = valid;
  return r;
}

// Per block: B's median over A's, as a log ratio; warm-ups count neither as timed nor in a median.
TEST(verify_comparison_test, block_ratios_are_the_log_of_the_arms_medians) {
  std::vector<SampleRow> rows = {row(0, "A", 100),     row(0, "A", 300), row(0, "A", 200), row(0, "B", 50),
                                 row(0, "B", 1, true), row(1, "B", 90),  row(1, "A", 90),  row(-1, "A", 7)};
  std::vector<std::string> problems;
  const kwb::BlockRatios r = kwb::block_log_ratios(rows, "ab", "decode", "B", 2, "w", problems);
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems);
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.timed, 6u);  // the pilot (block -1) and the warm-up are not timed blocks
  ASSERT_EQ(r.log_ratios.size(), 2u);
  EXPECT_DOUBLE_EQ(r.log_ratios[0], std::log(50.0 / 200.0));
  EXPECT_DOUBLE_EQ(r.log_ratios[1], 0.0);
}

TEST(verify_comparison_test, a_missing_arm_a_stray_block_and_an_invalid_output_are_named) {
  std::vector<std::string> problems;
  kwb::BlockRatios r = kwb::block_log_ratios({row(0, "A", 100)}, "ab", "decode", "B", 1, "w", problems);
  EXPECT_FALSE(r.complete);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "w: block 0 has no timed samples for B in samples.csv");

  problems.clear();
  r = kwb::block_log_ratios({row(0, "A", 100), row(0, "B", 100), row(3, "B", 100)}, "ab", "decode", "B", 1, "w",
                            problems);
  EXPECT_FALSE(r.complete);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "w: samples.csv has block 3 arm B which the comparison does not count");

  problems.clear();
  r = kwb::block_log_ratios({row(0, "A", 100), row(0, "B", 100, false, false), row(0, "B", 80)}, "ab", "decode", "B", 1,
                            "w", problems);
  EXPECT_TRUE(r.invalid_sample);
  EXPECT_TRUE(r.complete);
  EXPECT_DOUBLE_EQ(r.log_ratios.at(0), std::log(80.0 / 100.0));  // only validated outputs enter a median
}

// Blocks recorded beyond the one where the procedure decided mean compare did not stop when it should have.
TEST(verify_comparison_test, a_replay_that_decides_before_the_last_block_is_a_problem) {
  kwb::stats::SequentialGate gate;
  gate.min_blocks = 10;
  std::vector<double> clear_win(40, std::log(0.5));
  for (size_t i = 0; i < clear_win.size(); ++i) clear_win[i] += (i % 2 ? 1e-3 : -1e-3);
  std::vector<std::string> problems;
  const kwb::Replay r = kwb::replay_procedure(clear_win, gate, 1, "w", problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].rfind("w: the procedure decides after block 10, yet 40 blocks were timed", 0), 0u)
      << problems[0];
  EXPECT_EQ(r.verdict, kwb::stats::Verdict::pass);
  ASSERT_TRUE(r.estimate.has_value());
  EXPECT_NEAR(r.estimate->improvement_pct, 50.0, 1.0);  // B takes half the time: 50% less

  problems.clear();
  const std::vector<double> first_look(clear_win.begin(), clear_win.begin() + 10);
  EXPECT_EQ(kwb::replay_procedure(first_look, gate, 1, "w", problems).verdict, kwb::stats::Verdict::pass);
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems);
}

}  // namespace
