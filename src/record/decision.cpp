#include "record/decision.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace kwb {

// Precedence: INVALID (the referee itself cannot be trusted: broken baseline, weak grader, changed artifacts,
// broken noise floor) before KEEP_BASELINE (the candidate is wrong or not fast enough) before INCONCLUSIVE (the
// data could not settle it) before KEEP_CANDIDATE (everything passed). Missing evidence is never a pass.
std::string_view to_string(DecisionKind d) {
  switch (d) {
    case DecisionKind::keep_candidate:
      return "KEEP_CANDIDATE";
    case DecisionKind::keep_baseline:
      return "KEEP_BASELINE";
    case DecisionKind::inconclusive:
      return "INCONCLUSIVE";
    case DecisionKind::invalid:
      return "INVALID";
  }
  return "?";
}

std::optional<DecisionKind> parse_decision(std::string_view name) {
  for (DecisionKind d :
       {DecisionKind::keep_candidate, DecisionKind::keep_baseline, DecisionKind::inconclusive, DecisionKind::invalid}) {
    if (to_string(d) == name) return d;
  }
  return std::nullopt;
}

std::optional<double> aa_bias_log(const WorkloadVerdict& aa) {
  if (aa.verdict != stats::Verdict::inconclusive || !aa.ci_low_pct || !aa.ci_high_pct) return std::nullopt;
  return stats::aa_interval_bias_log(*aa.ci_low_pct, *aa.ci_high_pct);
}

std::optional<double> improvement_net_of_aa_bias(const WorkloadVerdict& ab, const WorkloadVerdict& aa) {
  if (!ab.ci_low_pct || !aa.ci_low_pct || !aa.ci_high_pct) return std::nullopt;
  if (!(*ab.ci_low_pct < 100.0)) return std::nullopt;  // the slowest t_B / t_A the A/B interval allows must be > 0
  const std::optional<double> bias = stats::aa_interval_bias_log(*aa.ci_low_pct, *aa.ci_high_pct);
  if (!bias) return std::nullopt;
  return stats::improvement_net_of_bias_pct(*ab.ci_low_pct, *bias);
}

namespace {

// The reasons of one kind, each with its stable code (docs/evidence-bundle.md, "The decision").
struct Reasons {
  std::vector<std::string> codes, texts;
  void add(std::string code, std::string text) {
    codes.push_back(std::move(code));
    texts.push_back(std::move(text));
  }
  bool empty() const { return codes.empty(); }
  Decision decide(DecisionKind kind, int exit_code) const { return {kind, texts, exit_code, codes}; }
};

// A workload's estimate and detectable effect, for its reason: " (estimate +1.20% [-3.10%, +5.40%], MDE 6.80%)".
std::string estimate_text(const WorkloadVerdict& w) {
  if (!w.improvement_pct || !w.ci_low_pct || !w.ci_high_pct) return "";
  std::string s =
      fmt::format(" (estimate {:+.2f}% [{:+.2f}%, {:+.2f}%]", *w.improvement_pct, *w.ci_low_pct, *w.ci_high_pct);
  if (w.mde_pct) s += fmt::format(", MDE {:.2f}%", *w.mde_pct);
  return s + ")";
}

// An unsettled A/B whose detectable effect, at the budget's end, is wider than the margin of no practical
// difference: the interval can neither clear the bar nor fit inside the margin without much more timing.
bool below_resolution(const WorkloadVerdict& w, double same_margin_pct) {
  return w.verdict == stats::Verdict::inconclusive && same_margin_pct > 0.0 && w.mde_pct &&
         *w.mde_pct > same_margin_pct;
}

// decide's reasons by kind, gathered stage by stage in the plan's order (docs/evidence-bundle.md, "The decision").
class Judge {
public:
  explicit Judge(const DecisionInputs& in) : in_(in) {}

  Decision run() {
    referee_faults();
    if (std::optional<Decision> early = decided_without_checking()) return *early;
    baseline_and_controls();
    candidate_check();
    if (in_.candidate_check_pass.value_or(false)) {
      if (in_.baseline_copy_check_pass.has_value() && !*in_.baseline_copy_check_pass) {
        invalid_.add("baseline_copy_fails_check", "the separately built baseline copy (A') fails the check");
      }
      if (in_.aa.empty()) unsure_.add("no_aa", "no A/A calibration");
      for (const WorkloadVerdict& w : in_.aa) calibration(w);
      if (in_.ab.empty()) unsure_.add("no_ab", "no A/B comparison");
      for (const WorkloadVerdict& w : in_.ab) timing(w);
      final_check();
    }
    return verdict();
  }

private:
  void referee_faults() {
    for (const std::string& e : in_.stage_errors) invalid_.add("stage_error", "stage error: " + e);
    for (const std::string& m : in_.identity_mismatches) invalid_.add("identity_mismatch", "identity mismatch: " + m);
    for (const std::string& m : in_.environment_mismatches)
      invalid_.add("environment_changed", "environment changed: " + m);
  }

  // A candidate that does not build, or builds to the baseline's code, is decided before anything is checked.
  std::optional<Decision> decided_without_checking() {
    if (in_.candidate_built.has_value() && !*in_.candidate_built) {
      if (!invalid_.empty()) return invalid_.decide(DecisionKind::invalid, 3);
      reject_.add("candidate_not_built",
                  "the candidate does not build (build_failed): there is nothing to check, time or keep; its compiler "
                  "output is in checks/candidate.json and plan.json");
      return reject_.decide(DecisionKind::keep_baseline, 1);
    }
    if (in_.candidate_identical.value_or(false)) {
      if (!invalid_.empty()) return invalid_.decide(DecisionKind::invalid, 3);
      reject_.add("identical_to_baseline",
                  "the candidate builds to the baseline's code: what the loader maps of the two artifacts is the "
                  "same, byte for byte (a comment, a dead variable or another file name changes nothing the machine "
                  "runs), so there is nothing to time and nothing to keep");
      return reject_.decide(DecisionKind::keep_baseline, 1);
    }
    return std::nullopt;
  }

  void baseline_and_controls() {
    if (!in_.baseline_check_pass) {
      invalid_.add("baseline_not_checked", "the baseline was not checked");
    } else if (!*in_.baseline_check_pass) {
      invalid_.add("baseline_fails_check", "the baseline fails the oracle check: nothing can be judged against it");
    }
    for (const ControlOutcome& c : in_.controls) {
      if (!c.rejected) {
        invalid_.add("control_passed",
                     fmt::format("control '{}' passed the check: the grader is too weak to judge", c.name));
      } else if (!c.expected_reason_seen) {
        invalid_.add("control_wrong_reason",
                     fmt::format("control '{}' was rejected, but not for '{}' as its task requires (its check "
                                 "reported {})",
                                 c.name, c.expect,
                                 c.reasons.empty() ? "no reason" : fmt::format("{}", fmt::join(c.reasons, ", "))));
      }
      if (!c.timing_refused)
        invalid_.add("control_timed", fmt::format("control '{}' was timed: rejected code got a metric", c.name));
    }
  }

  void candidate_check() {
    if (!in_.candidate_check_pass) {
      unsure_.add("candidate_not_checked", "the candidate was not checked");
    } else if (!*in_.candidate_check_pass) {
      reject_.add("candidate_fails_check", in_.candidate_check_reasons.empty()
                                               ? std::string("the candidate fails the oracle check")
                                               : fmt::format("the candidate fails the oracle check ({})",
                                                             fmt::join(in_.candidate_check_reasons, ", ")));
    }
  }

  const WorkloadVerdict* ab_of(const std::string& workload) const {
    for (const WorkloadVerdict& w : in_.ab) {
      if (w.workload == workload) return &w;
    }
    return nullptr;
  }

  // One workload's A/A.
  void calibration(const WorkloadVerdict& w) {
    if (w.verdict == stats::Verdict::fail) {
      invalid_.add("aa_broken_noise_floor",
                   fmt::format("A/A on '{}' found a difference between identical code: the noise floor is "
                               "broken on this machine",
                               w.workload));
    } else if (w.verdict == stats::Verdict::invalid) {
      invalid_.add("aa_invalid", fmt::format("A/A on '{}' {}{}{}", w.workload,
                                             w.invalid_code.empty() ? "failed validation during timing" : "is INVALID",
                                             w.detail.empty() ? "" : ": ", w.detail));
    } else if (w.verdict != stats::Verdict::pass) {
      // An A/A that did not settle within its bound still bounds the harness's bias by its interval. If the
      // candidate clears the bar even when charged the worst bias in it, the calibration cannot change this
      // workload's outcome (docs/timing.md, "When the A/A does not settle").
      const WorkloadVerdict* ab = ab_of(w.workload);
      const std::optional<double> net =
          ab && ab->verdict == stats::Verdict::pass ? improvement_net_of_aa_bias(*ab, w) : std::nullopt;
      if (w.verdict == stats::Verdict::inconclusive && net && *net >= in_.min_improvement_pct) {
        notes_.add("aa_unsettled_bias_charged",
                   fmt::format("A/A on '{}' did not settle within its bound (interval [{:+.2f}%, {:+.2f}%]), "
                               "but charged the worst bias in it the candidate still improves by at least "
                               "{:+.2f}%, at or above the bar of {}%",
                               w.workload, *w.ci_low_pct, *w.ci_high_pct, *net, in_.min_improvement_pct));
      } else {
        unsure_.add("aa_unsettled", fmt::format("A/A on '{}' could not confirm the noise floor within bounds, and its "
                                                "interval is not small next to the A/B margin over the bar",
                                                w.workload));
      }
    }
  }

  // One workload's A/B.
  void timing(const WorkloadVerdict& w) {
    if (w.verdict == stats::Verdict::fail) {
      reject_.add("ab_below_bar", fmt::format("'{}': the candidate does not clear the improvement bar{}", w.workload,
                                              estimate_text(w)));
    } else if (w.verdict == stats::Verdict::same) {
      reject_.add("no_practical_difference",
                  fmt::format("'{}': no practical difference: the whole interval lies within +-{}%{}, so the "
                              "candidate is not worth keeping; more timing would not change that",
                              w.workload, in_.same_margin_pct, estimate_text(w)));
    } else if (w.verdict == stats::Verdict::invalid && !w.invalid_code.empty()) {
      reject_.add("ab_" + w.invalid_code, fmt::format("'{}': {}", w.workload, w.detail));
    } else if (w.verdict == stats::Verdict::invalid) {
      reject_.add("ab_invalid", fmt::format("'{}': an output failed validation during timing{}{}", w.workload,
                                            w.detail.empty() ? "" : ": ", w.detail));
    } else if (w.verdict != stats::Verdict::pass && below_resolution(w, in_.same_margin_pct)) {
      // Advice that can work (docs/timing.md, "No practical difference"): with the budget spent, this machine
      // cannot resolve a difference the size of the margin, so more of the same timing would not settle it.
      unsure_.add("ab_below_resolution",
                  fmt::format("'{}': the difference is below what this machine resolves in this budget{}: the "
                              "smallest effect it detects is wider than the margin of no practical difference "
                              "(+-{}%); an optimization loop should keep the baseline",
                              w.workload, estimate_text(w), in_.same_margin_pct));
    } else if (w.verdict != stats::Verdict::pass) {
      unsure_.add("ab_unsettled", fmt::format("'{}': the interval does not settle the improvement bar{}; this machine "
                                              "resolves the margin, so timing longer (--max-minutes) settles it",
                                              w.workload, estimate_text(w)));
    }
  }

  void final_check() {
    if (!in_.final_check_pass) {
      unsure_.add("no_final_validation", "no final validation");
    } else if (!*in_.final_check_pass) {
      reject_.add("final_recheck_failed", "the candidate fails the final re-check with fresh data");
    }
  }

  // Precedence: INVALID before KEEP_BASELINE before INCONCLUSIVE before KEEP_CANDIDATE (the file's head says why).
  Decision verdict() const {
    if (!invalid_.empty()) return invalid_.decide(DecisionKind::invalid, 3);
    if (!reject_.empty()) return reject_.decide(DecisionKind::keep_baseline, 1);
    if (!unsure_.empty()) return unsure_.decide(DecisionKind::inconclusive, 2);
    Reasons why;
    why.add("all_passed", notes_.empty() ? "every check, control, calibration and workload gate passed"
                                         : "every check, control and workload gate passed");
    for (size_t i = 0; i < notes_.codes.size(); ++i) why.add(notes_.codes[i], notes_.texts[i]);
    return why.decide(DecisionKind::keep_candidate, 0);
  }

  const DecisionInputs& in_;
  Reasons invalid_, reject_, unsure_;
  Reasons notes_;  // why a KEEP_CANDIDATE stands although an A/A did not settle
};

}  // namespace

Decision decide(const DecisionInputs& in) { return Judge(in).run(); }

namespace {
nlohmann::json opt(const std::optional<bool>& b) { return b ? nlohmann::json(*b) : nlohmann::json(nullptr); }
nlohmann::json opt(const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); }
nlohmann::json verdicts(const std::vector<WorkloadVerdict>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& w : v) {
    a.push_back({{"workload", w.workload},
                 {"verdict", w.verdict},
                 {"ci_low_pct", opt(w.ci_low_pct)},
                 {"ci_high_pct", opt(w.ci_high_pct)},
                 {"improvement_pct", opt(w.improvement_pct)},
                 {"mde_pct", opt(w.mde_pct)}});
  }
  return a;
}
}  // namespace

nlohmann::json to_json(const DecisionInputs& in) {
  nlohmann::json controls = nlohmann::json::array();
  for (const ControlOutcome& c : in.controls) {
    controls.push_back({{"name", c.name},
                        {"expect", to_string(c.expect)},
                        {"rejected", c.rejected},
                        {"expected_reason_seen", c.expected_reason_seen},
                        {"timing_refused", c.timing_refused},
                        {"reasons", c.reasons}});
  }
  return {{"baseline_check_pass", opt(in.baseline_check_pass)},
          {"baseline_copy_check_pass", opt(in.baseline_copy_check_pass)},
          {"candidate_check_pass", opt(in.candidate_check_pass)},
          {"candidate_built", opt(in.candidate_built)},
          {"candidate_identical", opt(in.candidate_identical)},
          {"candidate_check_reasons", in.candidate_check_reasons},
          {"controls", controls},
          {"aa", verdicts(in.aa)},
          {"ab", verdicts(in.ab)},
          {"min_improvement_pct", in.min_improvement_pct},
          {"same_margin_pct", in.same_margin_pct},
          {"final_check_pass", opt(in.final_check_pass)},
          {"identity_mismatches", in.identity_mismatches},
          {"environment_mismatches", in.environment_mismatches},
          {"stage_errors", in.stage_errors}};
}

}  // namespace kwb
