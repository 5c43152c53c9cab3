// The one decision procedure (stats/sequential.h) that compare runs and verify replays.
#include "stats/sequential.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

using namespace kwb::stats;

std::vector<double> ratios(size_t n, double mean_log, double spread) {
  std::vector<double> d;
  for (size_t i = 0; i < n; ++i) d.push_back(mean_log + spread * (static_cast<double>((i * 7) % 5) - 2.0));
  return d;
}

TEST(sequential_test, a_clear_effect_decides_at_the_first_look_and_stops) {
  SequentialGate g;
  g.min_blocks = 10;
  SequentialProcedure p(g, 3);
  const auto d = ratios(40, std::log(0.5), 0.01);  // B twice as fast
  size_t stopped = 0;
  for (size_t i = 0; i < d.size() && stopped == 0; ++i) {
    if (p.add(d[i])) stopped = i + 1;
  }
  EXPECT_EQ(stopped, 10u);
  const auto out = p.finish();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->verdict, Verdict::pass);
  EXPECT_FALSE(out->final_analysis);
  EXPECT_EQ(p.looks().size(), 1u);
}

TEST(sequential_test, a_budget_ending_between_looks_gets_one_final_analysis) {
  SequentialGate g;
  g.aa = true;
  g.max_aa_difference_pct = 1.0;
  g.min_blocks = 10;
  SequentialProcedure p(g, 3);
  for (double r : ratios(12, 0.0, 0.05)) EXPECT_FALSE(p.add(r));  // too noisy to settle +-1%
  const auto out = p.finish();
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(out->final_analysis);
  EXPECT_EQ(out->blocks, 12u);
  EXPECT_EQ(out->verdict, Verdict::inconclusive);
  // The final analysis spends the alpha the first look left: 0.05 - 0.015198.
  EXPECT_NEAR(out->confidence, 1.0 - (0.05 - (1.0 - p.looks().front().confidence)), 1e-12);
  EXPECT_EQ(p.looks().size(), 2u);
  // Replaying the same ratios gives the same outcome (what verify relies on).
  SequentialProcedure again(g, 3);
  for (double r : ratios(12, 0.0, 0.05)) again.add(r);
  EXPECT_EQ(again.finish()->estimate.ci_low_pct, out->estimate.ci_low_pct);
}

TEST(sequential_test, a_budget_ending_on_a_look_still_gets_the_reserved_final_analysis) {
  SequentialGate g;
  g.aa = true;
  g.max_aa_difference_pct = 1.0;
  g.min_blocks = 10;
  SequentialProcedure p(g, 3);
  for (double r : ratios(10, 0.0, 0.05)) EXPECT_FALSE(p.add(r));
  ASSERT_EQ(p.looks().size(), 1u);
  EXPECT_FALSE(p.looks().back().final_analysis);
  const auto out = p.finish();
  ASSERT_TRUE(out.has_value());
  // The same ten blocks, judged again with the alpha the look left: a narrower interval.
  EXPECT_TRUE(out->final_analysis);
  EXPECT_EQ(out->blocks, 10u);
  EXPECT_LT(out->confidence, p.looks().front().confidence);
  EXPECT_LT(out->estimate.ci_high_pct - out->estimate.ci_low_pct,
            p.looks().front().estimate.ci_high_pct - p.looks().front().estimate.ci_low_pct);
  // finish() twice gives the same outcome, with no third look.
  EXPECT_EQ(p.finish()->confidence, out->confidence);
  EXPECT_EQ(p.looks().size(), 2u);
}

// Equal arms and a margin: the procedure stops at the first look whose interval lies within +-margin, as it stops for
// PASS and FAIL; without the margin the same blocks run to the budget.
TEST(sequential_test, no_practical_difference_stops_at_a_look_like_a_pass) {
  SequentialGate g;
  g.min_improvement_pct = 0.0;  // "faster at all": equal arms straddle it forever
  g.same_margin_pct = 1.0;
  g.min_blocks = 10;
  SequentialProcedure p(g, 3);
  const auto d = ratios(200, 0.0, 0.001);  // equal, +-0.2% per block
  size_t stopped = 0;
  for (size_t i = 0; i < d.size() && stopped == 0; ++i) {
    if (p.add(d[i])) stopped = i + 1;
  }
  EXPECT_EQ(stopped, 10u);
  ASSERT_TRUE(p.finish().has_value());
  EXPECT_EQ(p.finish()->verdict, Verdict::same);
  g.same_margin_pct = 0.0;
  SequentialProcedure without(g, 3);
  for (double r : d) EXPECT_FALSE(without.add(r));
  EXPECT_EQ(without.finish()->verdict, Verdict::inconclusive);
}

TEST(sequential_test, fewer_than_two_blocks_give_no_interval) {
  SequentialProcedure p(SequentialGate{}, 1);
  p.add(0.1);
  EXPECT_FALSE(p.finish().has_value());
}

}  // namespace
