// The decision rule, as a pure function of what the stages found. validate calls it to decide; verify calls it on
// what it re-derives from the bundle, so a decision that does not follow from the evidence is caught.
#pragma once

#include "stats/gate.h"
#include "util/error.h"
#include "util/failure_reason.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

struct ControlOutcome {
  std::string name;
  FailureReason expect = FailureReason::numeric_mismatch;  // the reason the control must provoke
  bool rejected = false;                                   // its check failed
  bool expected_reason_seen = false;
  bool timing_refused = false;       // a timing request for it yielded no metric
  std::vector<std::string> reasons;  // the reasons its check reported, each once in the order first seen
};

struct WorkloadVerdict {
  std::string workload;
  stats::Verdict verdict = stats::Verdict::inconclusive;  // pass, fail, same (A/B), inconclusive or invalid
  // The interval of the improvement estimate (percent), when the comparison has one.
  std::optional<double> ci_low_pct, ci_high_pct;
  // An INVALID comparison's own reason (which arm failed validation during timing, why, where), for the decision's
  // words; empty otherwise.
  std::string detail = {};
  // The estimate itself and the effect detectable with its blocks (percent), for the decision's words.
  std::optional<double> improvement_pct = {}, mde_pct = {};
  // Why an INVALID comparison is INVALID when no output failed: "speed_changes_with_age" (stats/aging.h) or
  // "work_outside_window" (stats/outside_window.h); empty for a failed output.
  std::string invalid_code = {};
};

struct DecisionInputs {
  std::optional<bool> baseline_check_pass;
  std::optional<bool> baseline_copy_check_pass;  // A'
  std::optional<bool> candidate_check_pass;
  // Whether the candidate's plain build compiled (the plan says): false decides KEEP_BASELINE at once, since a
  // candidate that does not build replaces nothing (validate then skips the baseline's check, the profile and the
  // controls). Empty for bundles that predate it.
  std::optional<bool> candidate_built;
  // The candidate's plain build maps the baseline's code byte for byte (util/elf_code.h; verify re-derives it from
  // the bundle's two artifacts). Decided at once: KEEP_BASELINE, identical_to_baseline, nothing timed.
  std::optional<bool> candidate_identical;
  // Why the candidate's check failed, each reason once in the order first seen (build_failed, numeric_mismatch...),
  // so the decision names it; empty when it passed or the reasons are not known (a bundle that predates them).
  std::vector<std::string> candidate_check_reasons;
  std::vector<ControlOutcome> controls;
  std::vector<WorkloadVerdict> aa;  // empty when the stage did not run
  std::vector<WorkloadVerdict> ab;
  double min_improvement_pct = 0.0;  // the plan's bar, which the A/B gate used
  double same_margin_pct = 0.0;      // the plan's margin of no practical difference (SAME), 0 for none
  std::optional<bool> final_check_pass;
  std::vector<std::string> identity_mismatches;
  std::vector<std::string> environment_mismatches;
  std::vector<std::string> stage_errors;  // a stage that could not run for reasons outside the implementations
};

// What validate decides (docs/evidence-bundle.md, "The decision"): the candidate replaces the baseline, or it does
// not, or the evidence cannot settle it, or the evidence itself is broken.
enum class DecisionKind { keep_candidate, keep_baseline, inconclusive, invalid };

std::string_view to_string(DecisionKind d);  // "KEEP_CANDIDATE", "KEEP_BASELINE", "INCONCLUSIVE", "INVALID"
std::optional<DecisionKind> parse_decision(std::string_view name);

// JSON holds the name (util/backend_kind.h says why).
template <typename BasicJson>
void to_json(BasicJson& j, const DecisionKind& d) {
  j = std::string(to_string(d));
}
template <typename BasicJson>
void from_json(const BasicJson& j, DecisionKind& d) {
  const std::string name = j.template get<std::string>();
  const std::optional<DecisionKind> parsed = parse_decision(name);
  if (!parsed) throw DataError("JSON decision: unknown decision '" + name + "'");
  d = *parsed;
}

struct Decision {
  DecisionKind decision = DecisionKind::invalid;
  std::vector<std::string> reasons;
  int exit_code = 3;
  // One stable code per reason, in the same order (candidate_not_built, ab_below_bar, aa_unsettled, ...): what a
  // program branches on; the reasons are for people (docs/evidence-bundle.md, "The decision").
  std::vector<std::string> reason_codes = {};
};

Decision decide(const DecisionInputs& in);

// The least improvement (percent) the A/B interval allows once the worst harness bias the A/A interval allows is
// charged against the candidate: with r = t_B / t_A <= 1 - ab.ci_low / 100 and a bias factor up to
// exp(max |log(1 - aa / 100)|) over the A/A interval's ends, 100 * (1 - r * factor). None without both intervals.
std::optional<double> improvement_net_of_aa_bias(const WorkloadVerdict& ab, const WorkloadVerdict& aa);

// The bias a workload's A/B must be charged because its A/A did not settle (stats::aa_interval_bias_log of the A/A
// interval): validate's A/B stage gates with it, verify re-derives it from the A/A it replayed. None when the A/A
// passed, failed or has no interval.
std::optional<double> aa_bias_log(const WorkloadVerdict& aa);

nlohmann::json to_json(const DecisionInputs& in);

}  // namespace kwb

template <>
struct fmt::formatter<kwb::DecisionKind> : fmt::formatter<std::string_view> {
  auto format(kwb::DecisionKind d, format_context& ctx) const -> decltype(ctx.out()) {
    return fmt::formatter<std::string_view>::format(kwb::to_string(d), ctx);
  }
};
