// How many seeds an experiment needs (experiment/study_plan.h): the paired t's sample size, checked against the
// normal-approximation formula it must exceed by the t correction, against a simulation of the analysis it plans for,
// and the pilot's pooled within-task spread.
#include "experiment/study_plan.h"

#include "stats/distributions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kwb {
namespace {

TEST(StudyPlan, the_seeds_are_the_smallest_number_at_which_the_asked_power_is_reached) {
  StudyPlanInput in;
  in.effect_ratio = 1.2;
  in.sd = 0.25;
  in.tasks = 1;
  const StudyPlan p = plan_study(in);
  // The normal approximation n = ((z_.975 + z_.8) sigma / delta)^2 = 14.8; the t quantiles at few df ask a few more.
  const double z = (stats::normal_quantile(0.975) + stats::normal_quantile(0.8)) * in.sd / std::log(1.2);
  EXPECT_GE(p.pairs, static_cast<int>(std::ceil(z * z)));
  EXPECT_LE(p.pairs, static_cast<int>(std::ceil(z * z)) + 3);
  EXPECT_GE(p.power, 0.8);
  EXPECT_FALSE(p.capped);
  // One seed fewer does not reach it, and power grows with the seeds.
  EXPECT_LT(study_power(in, p.seeds - 1), 0.8);
  EXPECT_DOUBLE_EQ(study_power(in, p.seeds), p.power);
  EXPECT_GT(study_power(in, p.seeds + 5), p.power);
  EXPECT_EQ(p.df, p.seeds - 1.0);
  // More tasks share the pairs: 4 tasks need about a quarter of the seeds each.
  StudyPlanInput four = in;
  four.tasks = 4;
  const StudyPlan q = plan_study(four);
  EXPECT_LE(q.seeds, (p.seeds + 3) / 4 + 1);
  EXPECT_EQ(q.pairs, 4 * q.seeds);
  // A bigger effect or a smaller spread needs fewer; too small an effect is capped, not looped on.
  StudyPlanInput big = in;
  big.effect_ratio = 2.0;
  // 2x at sigma 0.25: two seeds leave 1 df (t = 12.7), so even this clear an effect needs four.
  EXPECT_EQ(plan_study(big).seeds, 4);
  EXPECT_LT(study_power(big, 3), 0.8);
  StudyPlanInput tiny = in;
  tiny.effect_ratio = 1.0001;
  EXPECT_TRUE(plan_study(tiny).capped);
  StudyPlanInput bad = in;
  bad.effect_ratio = 0.9;
  EXPECT_THROW(plan_study(bad), std::invalid_argument);
  bad = in;
  bad.sd = 0.0;
  EXPECT_THROW(plan_study(bad), std::invalid_argument);
}

TEST(StudyPlan, a_simulated_experiment_at_the_planned_size_shows_the_effect_about_as_often_as_planned) {
  StudyPlanInput in;
  in.effect_ratio = 1.25;
  in.sd = 0.3;
  in.tasks = 3;
  const StudyPlan p = plan_study(in);
  std::mt19937_64 rng(20261205);
  std::normal_distribution<double> noise(std::log(in.effect_ratio), in.sd);
  int shown = 0;
  const int runs = 4000;
  for (int r = 0; r < runs; ++r) {
    // The analysis's stratified interval, tasks weighted equally, equal seeds per task.
    double mean = 0.0, var = 0.0;
    for (int t = 0; t < in.tasks; ++t) {
      std::vector<double> d(static_cast<size_t>(p.seeds));
      for (double& v : d) v = noise(rng);
      double m = 0.0;
      for (double v : d) m += v / p.seeds;
      double s = 0.0;
      for (double v : d) s += (v - m) * (v - m);
      mean += m / in.tasks;
      var += s / (p.seeds - 1) / (in.tasks * in.tasks * p.seeds);
    }
    const double low = mean - stats::student_t_quantile(0.975, p.df) * std::sqrt(var);
    shown += low > 0.0;
  }
  // 4000 runs: the share's standard error is about 0.6 points; the approximation is good to about a point.
  EXPECT_NEAR(static_cast<double>(shown) / runs, p.power, 0.03) << p.seeds << " seeds";
  EXPECT_GE(static_cast<double>(shown) / runs, 0.77);
}

TEST(StudyPlan, a_pilots_spread_is_pooled_within_tasks_and_falls_back_to_all_pairs) {
  const nlohmann::json two_tasks = {
      {"by_task", {{{"task", "a"}, {"d", {0.1, 0.3}}}, {{"task", "b"}, {"d", {1.0, 1.4, 1.2}}}}}};
  const std::optional<PilotSpread> s = pilot_spread(two_tasks);
  ASSERT_TRUE(s);
  // ss: a 0.02, b 0.08 over 1 + 2 df: the task means' difference does not count.
  EXPECT_NEAR(s->sd, std::sqrt(0.1 / 3.0), 1e-12);
  EXPECT_EQ(s->df, 3.0);
  EXPECT_EQ(s->from, "within tasks");
  const nlohmann::json one_seed = {{"by_task", {{{"task", "a"}, {"d", {0.1}}}, {{"task", "b"}, {"d", {0.5}}}}}};
  const std::optional<PilotSpread> all = pilot_spread(one_seed);
  ASSERT_TRUE(all);
  EXPECT_NEAR(all->sd, std::sqrt(0.08), 1e-12);
  EXPECT_EQ(all->from, "over all pairs");
  EXPECT_FALSE(pilot_spread({{"by_task", {{{"task", "a"}, {"d", {0.1}}}}}}));
}

}  // namespace
}  // namespace kwb
