#include "experiment/study_plan.h"

#include "stats/distributions.h"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace kwb {

namespace {

double power_at(double delta, double sd, int tasks, int seeds, double confidence) {
  const double df = static_cast<double>(tasks) * (seeds - 1);
  const double se = sd / std::sqrt(static_cast<double>(tasks) * seeds);
  const double crit = stats::student_t_quantile(1.0 - (1.0 - confidence) / 2.0, df);
  return 1.0 - stats::student_t_cdf(crit - delta / se, df);
}

}  // namespace

double study_power(const StudyPlanInput& in, int seeds) {
  return power_at(std::log(in.effect_ratio), in.sd, in.tasks, seeds, in.confidence);
}

StudyPlan plan_study(const StudyPlanInput& in) {
  if (!(in.effect_ratio > 1.0)) throw std::invalid_argument("the effect must be a ratio above 1, e.g. 1.2 (1.2x)");
  if (!(in.sd > 0.0)) throw std::invalid_argument("the standard deviation of d must be above 0");
  if (!(in.power > 0.0 && in.power < 1.0)) throw std::invalid_argument("the power must lie in (0, 1), e.g. 0.8");
  if (!(in.confidence > 0.0 && in.confidence < 1.0)) throw std::invalid_argument("the confidence must lie in (0, 1)");
  if (in.tasks < 1) throw std::invalid_argument("an experiment has at least one task");
  const double delta = std::log(in.effect_ratio);
  StudyPlan p;
  for (int seeds = 2; seeds <= 10000; ++seeds) {
    p.seeds = seeds;
    p.power = power_at(delta, in.sd, in.tasks, seeds, in.confidence);
    if (p.power >= in.power) break;
  }
  p.capped = p.power < in.power;
  p.pairs = in.tasks * p.seeds;
  p.df = static_cast<double>(in.tasks) * (p.seeds - 1);
  p.half_width = stats::student_t_quantile(1.0 - (1.0 - in.confidence) / 2.0, p.df) * in.sd /
                 std::sqrt(static_cast<double>(p.pairs));
  return p;
}

std::optional<PilotSpread> pilot_spread(const nlohmann::json& analysis) {
  double ss = 0.0, df = 0.0;
  std::vector<double> all;
  for (const nlohmann::json& t : analysis.value("by_task", nlohmann::json::array())) {
    std::vector<double> d;
    for (const nlohmann::json& v : t.value("d", nlohmann::json::array())) {
      if (v.is_number()) d.push_back(v.get<double>());
    }
    all.insert(all.end(), d.begin(), d.end());
    if (d.size() < 2) continue;
    double mean = 0.0;
    for (double v : d) mean += v / static_cast<double>(d.size());
    for (double v : d) ss += (v - mean) * (v - mean);
    df += static_cast<double>(d.size() - 1);
  }
  if (df > 0.0) return PilotSpread{std::sqrt(ss / df), df, "within tasks"};
  if (all.size() < 2) return std::nullopt;
  double mean = 0.0;
  for (double v : all) mean += v / static_cast<double>(all.size());
  double s = 0.0;
  for (double v : all) s += (v - mean) * (v - mean);
  return PilotSpread{std::sqrt(s / static_cast<double>(all.size() - 1)), static_cast<double>(all.size() - 1),
                     "over all pairs"};
}

}  // namespace kwb
