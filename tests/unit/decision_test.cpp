#include "record/decision.h"

#include <gtest/gtest.h>

namespace kwb {
namespace {

DecisionInputs all_good() {
  DecisionInputs in;
  in.baseline_check_pass = true;
  in.baseline_copy_check_pass = true;
  in.candidate_check_pass = true;
  in.controls = {{"no_eps", FailureReason::numeric_mismatch, true, true, true}};
  in.aa = {{"decode", stats::Verdict::pass}, {"prefill", stats::Verdict::pass}};
  in.ab = {{"decode", stats::Verdict::pass}, {"prefill", stats::Verdict::pass}};
  in.final_check_pass = true;
  return in;
}

TEST(decision_test, everything_passing_keeps_the_candidate) {
  Decision d = decide(all_good());
  EXPECT_EQ(d.decision, DecisionKind::keep_candidate);
  EXPECT_EQ(d.exit_code, 0);
}

TEST(decision_test, one_failing_workload_keeps_the_baseline) {
  DecisionInputs in = all_good();
  in.ab[1].verdict = stats::Verdict::fail;
  Decision d = decide(in);
  EXPECT_EQ(d.decision, DecisionKind::keep_baseline);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_NE(d.reasons.at(0).find("prefill"), std::string::npos);
}

TEST(decision_test, candidate_failing_check_keeps_the_baseline_without_timing) {
  DecisionInputs in = all_good();
  in.candidate_check_pass = false;
  in.aa.clear();
  in.ab.clear();
  in.final_check_pass.reset();
  EXPECT_EQ(decide(in).decision, DecisionKind::keep_baseline);
}

TEST(decision_test, inconclusive_workload_is_inconclusive) {
  DecisionInputs in = all_good();
  in.ab[0].verdict = stats::Verdict::inconclusive;
  EXPECT_EQ(decide(in).decision, DecisionKind::inconclusive);
  EXPECT_EQ(decide(in).exit_code, 2);
}

TEST(decision_test, a_control_that_passes_makes_the_run_invalid) {
  DecisionInputs in = all_good();
  in.controls[0].rejected = false;
  Decision d = decide(in);
  EXPECT_EQ(d.decision, DecisionKind::invalid);
  EXPECT_EQ(d.exit_code, 3);
  EXPECT_NE(d.reasons.at(0).find("grader is too weak"), std::string::npos);
}

TEST(decision_test, a_control_rejected_for_another_reason_is_invalid) {
  DecisionInputs in = all_good();
  in.controls[0].expected_reason_seen = false;
  EXPECT_EQ(decide(in).decision, DecisionKind::invalid);
}

TEST(decision_test, a_timed_control_is_invalid) {
  DecisionInputs in = all_good();
  in.controls[0].timing_refused = false;
  EXPECT_EQ(decide(in).decision, DecisionKind::invalid);
}

TEST(decision_test, broken_noise_floor_is_invalid_even_if_ab_passes) {
  DecisionInputs in = all_good();
  in.aa[0].verdict = stats::Verdict::fail;
  EXPECT_EQ(decide(in).decision, DecisionKind::invalid);
}

TEST(decision_test, identity_or_environment_change_is_invalid) {
  DecisionInputs a = all_good();
  a.identity_mismatches = {"artifacts/x.so: plan 1 now 2"};
  EXPECT_EQ(decide(a).decision, DecisionKind::invalid);
  DecisionInputs b = all_good();
  b.environment_mismatches = {"governor: plan 'performance', now 'powersave'"};
  EXPECT_EQ(decide(b).decision, DecisionKind::invalid);
}

TEST(decision_test, missing_evidence_is_never_a_pass) {
  DecisionInputs in = all_good();
  in.final_check_pass.reset();
  EXPECT_EQ(decide(in).decision, DecisionKind::inconclusive);
  DecisionInputs none;
  EXPECT_EQ(decide(none).decision, DecisionKind::invalid);  // not even the baseline was checked
  DecisionInputs no_ab = all_good();
  no_ab.ab.clear();
  EXPECT_EQ(decide(no_ab).decision, DecisionKind::inconclusive);
}

TEST(decision_test, inputs_round_trip_through_json) {
  DecisionInputs in = all_good();
  in.identity_mismatches = {"x"};
  EXPECT_EQ(to_json(decision_inputs_from_json(to_json(in))), to_json(in));
}

}  // namespace
}  // namespace kwb
