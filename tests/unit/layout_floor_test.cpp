// The layout floor of an A/B interval (stats/layout_floor.h): the builds' analysis of variance, the F test it rests
// on, and what the floor does to an estimate and to the procedure.
#include "stats/layout_floor.h"
#include "stats/distributions.h"
#include "stats/effect.h"
#include "stats/layout.h"
#include "stats/sequential.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace {

using namespace kwb::stats;

TEST(layout_floor_test, f_upper_tail_matches_tables) {
  // 5% points of F (Abramowitz & Stegun, table 26.9).
  EXPECT_NEAR(f_upper_tail(4.9646, 1, 10), 0.05, 5e-5);
  EXPECT_NEAR(f_upper_tail(3.0984, 3, 20), 0.05, 5e-5);
  EXPECT_NEAR(f_upper_tail(2.6060, 4, 40), 0.05, 5e-5);
  EXPECT_NEAR(f_upper_tail(1.0, 1, 1), 0.5, 1e-12);  // F(1, 1) is symmetric about 1 in log
  EXPECT_EQ(f_upper_tail(0.0, 3, 20), 1.0);
  EXPECT_EQ(f_upper_tail(std::numeric_limits<double>::infinity(), 3, 20), 0.0);
  EXPECT_THROW(f_upper_tail(1.0, 0, 20), std::invalid_argument);
  EXPECT_THROW(f_upper_tail(std::nan(""), 3, 20), std::invalid_argument);
}

// Four builds, eight blocks each, with a build effect and a small noise that repeats within each build.
TEST(layout_floor_test, build_effect_recovers_a_between_build_variance) {
  const double effect[4] = {0.1, -0.1, 0.05, -0.05};  // sample variance 0.025 / 3
  std::vector<double> d;
  std::vector<int> builds;
  for (int i = 0; i < 32; ++i) {
    builds.push_back(i % 4);
    d.push_back(effect[i % 4] + 0.001 * static_cast<double>((i / 4) % 3 - 1));
  }
  const BuildEffect e = build_effect(d, builds);
  EXPECT_EQ(e.groups, 4u);
  EXPECT_LT(e.p_value, 1e-12);
  EXPECT_NEAR(e.variance, 0.025 / 3.0, 2e-5);
  EXPECT_GT(e.variance_df, 2.9);     // little within-build noise: about the 3 degrees of freedom between builds
  EXPECT_DOUBLE_EQ(e.weight, 0.25);  // balanced: 1 / builds
}

TEST(layout_floor_test, builds_that_explain_nothing_add_nothing) {
  // Every build holds the same values: the build means are equal.
  const std::vector<double> values = {0.01, -0.02, 0.005, 0.0};
  std::vector<double> d;
  std::vector<int> builds;
  for (int b = 0; b < 4; ++b) {
    for (const double v : values) {
      d.push_back(v);
      builds.push_back(b);
    }
  }
  const BuildEffect e = build_effect(d, builds);
  EXPECT_DOUBLE_EQ(e.p_value, 1.0);
  EXPECT_EQ(e.variance, 0.0);
  EXPECT_EQ(e.variance_df, 0.0);
  const LayoutFloor f = layout_floor(d, builds, builds);
  EXPECT_FALSE(f.applied);
  EXPECT_EQ(f.variance_log, 0.0);
}

TEST(layout_floor_test, one_build_or_bad_input_is_no_test_or_an_error) {
  const std::vector<double> d = {0.01, 0.02, 0.03};
  const BuildEffect one = build_effect(d, std::vector<int>{2, 2, 2});
  EXPECT_EQ(one.groups, 1u);
  EXPECT_DOUBLE_EQ(one.p_value, 1.0);
  EXPECT_EQ(one.variance, 0.0);
  EXPECT_THROW(build_effect(d, std::vector<int>{0, 1}), std::invalid_argument);
  EXPECT_THROW(build_effect(d, std::vector<int>{0, -1, 1}), std::invalid_argument);
  EXPECT_THROW(layout_floor(std::vector<double>{0.1}, std::vector<int>{0}, std::vector<int>{0}), std::invalid_argument);
}

// The case the floor exists for: the same kernel in both arms, whose speed moves with its layout. The candidate's
// eight builds happen to land faster on average (their mean effect is -4%, a draw of layouts), A's are all alike.
// Over 160 blocks the paired interval over blocks calls that a 4% gain, clear of a 1% bar; with the floor the
// interval holds 0.
struct LuckyLayouts {
  std::vector<double> d;
  std::vector<int> builds[2];
};

LuckyLayouts lucky_layouts(std::uint64_t seed, std::size_t blocks) {
  const double b_effect[8] = {-0.15, 0.10, -0.05, 0.08, -0.12, 0.06, -0.02, -0.22};  // mean -0.04
  LuckyLayouts out;
  for (std::size_t i = 0; i < blocks; ++i) {
    for (std::size_t arm = 0; arm < 2; ++arm) {
      out.builds[arm].push_back(visit_layout(seed, arm, static_cast<int>(i), 8, 0, false).variant);
    }
    const double noise = 0.002 * static_cast<double>(static_cast<int>((i * 7) % 5) - 2);
    out.d.push_back(b_effect[out.builds[1].back()] + noise);
  }
  return out;
}

TEST(layout_floor_test, the_floor_keeps_a_lucky_draw_of_layouts_from_reading_as_a_gain) {
  const LuckyLayouts l = lucky_layouts(11, 160);
  const EffectEstimate plain = estimate_effect(l.d, 0.95, 1);
  EXPECT_GT(plain.ci_low_pct, 1.0) << "without the floor the layouts' draw reads as a gain";
  const LayoutFloor floor = layout_floor(l.d, l.builds[0], l.builds[1]);
  ASSERT_TRUE(floor.applied);
  EXPECT_LT(floor.arm[1].p_value, 1e-6);
  EXPECT_NEAR(floor.arm[1].weight, 1.0 / 8.0, 1e-12);
  const EffectEstimate floored = estimate_effect(l.d, 0.95, 1, k_default_bootstrap_resamples, floor);
  EXPECT_TRUE(floored.layout.applied);
  EXPECT_EQ(floored.method, plain.method);
  EXPECT_DOUBLE_EQ(floored.improvement_pct, plain.improvement_pct);  // the same centre
  EXPECT_LT(floored.ci_low_pct, 0.0);
  EXPECT_GT(floored.ci_high_pct, 0.0);
  // Each side widened in quadrature: at least the floor's own half-width (t at its df, times its sd) beyond the centre.
  const double floor_half = student_t_quantile(0.975, floor.df) * std::sqrt(floor.variance_log);
  EXPECT_LE(floored.ci_low_pct,
            improvement_pct_from_log_ratio(std::log1p(-plain.improvement_pct / 100.0) + floor_half));
  EXPECT_GT(floored.mde_pct, plain.mde_pct);
  // The cross-check intervals stay the plain ones.
  EXPECT_DOUBLE_EQ(floored.t_ci_low_pct, plain.t_ci_low_pct);
  EXPECT_DOUBLE_EQ(floored.boot_ci_high_pct, plain.boot_ci_high_pct);
}

TEST(layout_floor_test, the_procedure_floors_an_ab_over_a_pool_and_never_an_aa) {
  const std::uint64_t seed = 11;
  const LuckyLayouts l = lucky_layouts(seed, 160);
  const auto run = [&](SequentialGate g) {
    g.min_blocks = 10;
    g.min_improvement_pct = 1.0;
    g.same_margin_pct = g.aa ? 0.0 : 1.0;
    SequentialProcedure p(g, seed);
    for (const double d : l.d) {
      if (p.add(d)) break;
    }
    return *p.finish();
  };
  SequentialGate ab;
  ab.layouts = 8;
  const SequentialLook floored = run(ab);
  EXPECT_TRUE(floored.estimate.layout.applied);
  EXPECT_NE(floored.verdict, Verdict::pass);
  EXPECT_NE(floored.verdict, Verdict::same);  // nor "no difference": the layouts' draw is as wide as +-10%
  SequentialGate aa = ab;
  aa.aa = true;
  aa.max_aa_difference_pct = 1.0;
  EXPECT_FALSE(run(aa).estimate.layout.applied);  // both arms from one pool: the draw cancels
  SequentialGate one_layout;                      // layouts = 1: a device backend, or a comparison made before
  EXPECT_FALSE(run(one_layout).estimate.layout.applied);
}

}  // namespace
