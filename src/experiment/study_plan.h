// How many seeds an experiment needs (docs/experiments.md, "Planning an experiment"): `kwb experiment plan FILE
// --effect 1.2x`. The experiment's measure is d = ln(speedup_B) - ln(speedup_A) per (task, seed) pair, and its
// interval the stratified paired t over tasks weighted equally (experiment/analysis.h). With T tasks, S seeds each and
// a within-task standard deviation sigma of d, the mean's standard error is sigma / sqrt(T S) with T (S - 1) degrees
// of freedom; the plan is the smallest S (at least 2) at which a true effect delta = ln(effect) is shown (the
// interval's lower end above 0) with the asked power:
//   delta / (sigma / sqrt(T S)) >= t(1 - alpha/2, T(S-1)) + t(power, T(S-1))
// (the paired t's sample size, as in Julious 2004, "Sample sizes for clinical trials with Normal data", Stat Med 23;
// the achieved power printed with it is the shifted central t approximation of the noncentral t, good to about a
// percent at these sizes). sigma comes from a pilot (an experiment's storage folder: the pooled within-task standard
// deviation of its pairs' d) or is stated.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace kwb {

struct StudyPlanInput {
  double effect_ratio = 1.2;  // the smallest B/A worth finding: a ratio of speedups, > 1
  double sd = 0.0;            // sigma: the standard deviation of d within a task (> 0)
  int tasks = 1;
  double confidence = 0.95;  // the experiment's
  double power = 0.8;
};

struct StudyPlan {
  int seeds = 0;  // per task
  int pairs = 0;  // tasks x seeds
  double df = 0.0;
  double power = 0.0;       // achieved at that many seeds
  double half_width = 0.0;  // the interval's expected half-width in d (log) units at that size
  bool capped = false;      // 10 000 seeds were not enough: the effect is too small for this sigma
};

// Throws std::invalid_argument for an effect not above 1, a sigma not above 0, power or confidence outside (0, 1).
StudyPlan plan_study(const StudyPlanInput& in);
// The power of `in`'s test at `seeds` seeds per task (at least 2).
double study_power(const StudyPlanInput& in, int seeds);

// The pooled within-task standard deviation of d in an analysis (kwb.experiment_analysis's by_task[].d), and how many
// degrees of freedom it rests on; nullopt when no task has two pairs (then the spread over all pairs, when there are
// two; else none at all).
struct PilotSpread {
  double sd = 0.0;
  double df = 0.0;
  std::string from;  // "within tasks" or "over all pairs"
};
std::optional<PilotSpread> pilot_spread(const nlohmann::json& analysis);

}  // namespace kwb
