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
  EXPECT_EQ(decide(in).reasons, std::vector<std::string>{"the candidate fails the oracle check"});
  // With the check's reasons (a source that does not compile), the decision names them.
  in.candidate_check_reasons = {"build_failed"};
  EXPECT_EQ(decide(in).reasons, std::vector<std::string>{"the candidate fails the oracle check (build_failed)"});
  EXPECT_EQ(to_json(in)["candidate_check_reasons"], nlohmann::json::array({"build_failed"}));
}

// An INVALID comparison's own reason (the arm, the failure, where) reaches the decision's words.
TEST(decision_test, an_invalid_comparison_says_which_arm_failed_and_why) {
  DecisionInputs in = all_good();
  in.aa[0].verdict = stats::Verdict::invalid;
  in.aa[0].detail = "block 3: arm A' failed validation during timing (numeric_mismatch at decode call 2)";
  const Decision d = decide(in);
  EXPECT_EQ(d.decision, DecisionKind::invalid);
  ASSERT_FALSE(d.reasons.empty());
  EXPECT_NE(d.reasons[0].find("arm A' failed validation during timing (numeric_mismatch at decode call 2)"),
            std::string::npos)
      << d.reasons[0];
}

// An A/A that did not settle still bounds the harness's bias by its interval: the candidate is kept when, charged
// the worst bias in that interval, it still clears the bar on that workload (the gemm baseline's layout swings of
// 14-20% leave its A/A unresolved at +-5%, next to an A/B of +94% [+94.28, +95.50]).
TEST(decision_test, an_unsettled_aa_small_next_to_the_ab_margin_does_not_stop_a_keep) {
  DecisionInputs in = all_good();
  in.min_improvement_pct = 10;
  in.aa[0] = {"decode", stats::Verdict::inconclusive, -5.42, 5.50};
  in.ab[0] = {"decode", stats::Verdict::pass, 94.28, 95.50};
  const Decision d = decide(in);
  EXPECT_EQ(d.decision, DecisionKind::keep_candidate);
  ASSERT_EQ(d.reasons.size(), 2u);
  EXPECT_NE(d.reasons[1].find("A/A on 'decode' did not settle"), std::string::npos) << d.reasons[1];
  // t_B / t_A <= 0.0572, times a bias factor of 1/0.945: at least +93.95%.
  EXPECT_NEAR(*improvement_net_of_aa_bias(in.ab[0], in.aa[0]), 93.952, 0.01);
}

TEST(decision_test, an_unsettled_aa_as_wide_as_the_margin_keeps_the_decision_open) {
  DecisionInputs in = all_good();
  in.min_improvement_pct = 10;
  in.aa[0] = {"decode", stats::Verdict::inconclusive, -5.42, 5.50};
  in.ab[0] = {"decode", stats::Verdict::pass, 12.0, 15.0};  // 12% less a 5.7% bias: under the bar
  EXPECT_EQ(decide(in).decision, DecisionKind::inconclusive);
  // Without an interval there is nothing to weigh: missing evidence is never a pass.
  in.ab[0] = {"decode", stats::Verdict::pass, 94.28, 95.50};
  in.aa[0] = {"decode", stats::Verdict::inconclusive, std::nullopt, std::nullopt};
  EXPECT_EQ(decide(in).decision, DecisionKind::inconclusive);
  // An A/B that did not pass is never rescued, and an A/A that failed still means the machine cannot judge.
  in.aa[0] = {"decode", stats::Verdict::inconclusive, -0.5, 0.5};
  in.ab[0] = {"decode", stats::Verdict::inconclusive, 94.28, 95.50};
  EXPECT_EQ(decide(in).decision, DecisionKind::inconclusive);
  in.ab[0] = {"decode", stats::Verdict::pass, 94.28, 95.50};
  in.aa[0] = {"decode", stats::Verdict::fail, 6.0, 9.0};
  EXPECT_EQ(decide(in).decision, DecisionKind::invalid);
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

// Every reason has its stable code, in the same order; a workload's reason quotes its estimate and detectable
// effect, and an unsettled one says what would settle it.
TEST(decision_test, each_reason_has_a_stable_code_and_an_open_workload_says_how_to_settle_it) {
  Decision d = decide(all_good());
  EXPECT_EQ(d.reason_codes, std::vector<std::string>{"all_passed"});

  DecisionInputs in = all_good();
  in.ab[0].verdict = stats::Verdict::inconclusive;
  in.ab[0].improvement_pct = 1.2;
  in.ab[0].ci_low_pct = -3.1;
  in.ab[0].ci_high_pct = 5.4;
  in.ab[0].mde_pct = 6.8;
  in.final_check_pass.reset();
  d = decide(in);
  EXPECT_EQ(d.decision, DecisionKind::inconclusive);
  EXPECT_EQ(d.reason_codes, (std::vector<std::string>{"ab_unsettled", "no_final_validation"}));
  ASSERT_EQ(d.reasons.size(), d.reason_codes.size());
  EXPECT_NE(d.reasons[0].find("(estimate +1.20% [-3.10%, +5.40%], MDE 6.80%)"), std::string::npos) << d.reasons[0];
  EXPECT_NE(d.reasons[0].find("timing longer (--max-minutes) settles it"), std::string::npos) << d.reasons[0];
  // With a margin of no practical difference (issue 41): an MDE wider than it cannot be settled by more of the same
  // timing, and says so; one narrower than it can.
  in.same_margin_pct = 1.0;
  d = decide(in);
  EXPECT_EQ(d.decision, DecisionKind::inconclusive);
  EXPECT_EQ(d.reason_codes, (std::vector<std::string>{"ab_below_resolution", "no_final_validation"}));
  EXPECT_NE(d.reasons[0].find("below what this machine resolves"), std::string::npos) << d.reasons[0];
  in.same_margin_pct = 10.0;
  EXPECT_EQ(decide(in).reason_codes, (std::vector<std::string>{"ab_unsettled", "no_final_validation"}));
  // SAME: KEEP_BASELINE, no_practical_difference, with the interval.
  in = all_good();
  in.same_margin_pct = 1.0;
  in.ab[0].verdict = stats::Verdict::same;
  in.ab[0].improvement_pct = 0.1;
  in.ab[0].ci_low_pct = -0.4;
  in.ab[0].ci_high_pct = 0.6;
  in.ab[0].mde_pct = 0.7;
  d = decide(in);
  EXPECT_EQ(d.decision, DecisionKind::keep_baseline);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_EQ(d.reason_codes, std::vector<std::string>{"no_practical_difference"});
  EXPECT_NE(d.reasons[0].find("within +-1% (estimate +0.10% [-0.40%, +0.60%]"), std::string::npos) << d.reasons[0];

  in = all_good();
  in.candidate_built = false;
  EXPECT_EQ(decide(in).reason_codes, std::vector<std::string>{"candidate_not_built"});
  // The baseline's own code: KEEP_BASELINE at once, whatever a timing would have said; an INVALID run stays INVALID.
  in = all_good();
  in.candidate_identical = true;
  d = decide(in);
  EXPECT_EQ(d.decision, DecisionKind::keep_baseline);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_EQ(d.reason_codes, std::vector<std::string>{"identical_to_baseline"});
  in.identity_mismatches = {"candidate: artifact changed"};
  EXPECT_EQ(decide(in).decision, DecisionKind::invalid);
  in = all_good();
  in.controls[0].expected_reason_seen = false;
  in.controls[0].reasons = {"worker_crashed"};
  d = decide(in);
  EXPECT_EQ(d.reason_codes, std::vector<std::string>{"control_wrong_reason"});
  EXPECT_NE(d.reasons[0].find("(its check reported worker_crashed)"), std::string::npos) << d.reasons[0];
}

}  // namespace
}  // namespace kwb
