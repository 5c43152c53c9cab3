// Verdicts from an EffectEstimate. A verdict is only as strong as the interval behind it: when the interval
// straddles the threshold the answer is INCONCLUSIVE, never a forced PASS or FAIL: no silent statistics.
#pragma once

#include "stats/effect.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>

namespace kwb::stats {

enum class GateKind { ci, point };
// A workload's or a comparison's verdict. The gates below answer pass, fail, same (A/B: no practical difference)
// or inconclusive; the pipeline adds why a comparison has no metric: invalid (an output failed validation while
// timed), refused (an arm failed its check before timing), interrupted (kwb was stopped by a signal).
enum class Verdict { pass, fail, inconclusive, invalid, refused, interrupted, same };

// "PASS", "FAIL", "INCONCLUSIVE", "INVALID", "REFUSED", "INTERRUPTED", "SAME"
std::string_view to_string(Verdict verdict);
std::optional<Verdict> parse_verdict(std::string_view name);
// A name in a file kwb reads back: one it does not know throws DataError naming `where`.
Verdict parse_verdict_field(std::string_view name, std::string_view where);

// JSON holds the name (util/backend_kind.h says why).
template <typename BasicJson>
void to_json(BasicJson& j, const Verdict& v) {
  j = std::string(to_string(v));
}
template <typename BasicJson>
void from_json(const BasicJson& j, Verdict& v) {
  v = parse_verdict_field(j.template get<std::string>(), "JSON verdict");
}

// Is the candidate faster by at least X = min_improvement_pct?
// ci:    PASS when ci_low_pct >= X, FAIL when ci_high_pct < X, else INCONCLUSIVE.
// point: PASS when improvement_pct >= X, else FAIL (the legacy rule: ignores noise, never INCONCLUSIVE).
Verdict improvement_verdict(const EffectEstimate& effect, double min_improvement_pct, GateKind kind);

// The improvement an A/B interval's lower end still guarantees when the harness may be biased by up to a factor
// exp(bias_log) between two arms: the candidate's time ratio is at most 1 - ci_low_pct / 100, times exp(bias_log).
double improvement_net_of_bias_pct(double ci_low_pct, double bias_log);

// The largest |log| of an A/A interval's two ends (as improvements in %): the bias between two arms of identical code
// that the interval cannot rule out. nullopt when an end is at or below -100% of the other's time.
std::optional<double> aa_interval_bias_log(double ci_low_pct, double ci_high_pct);

// improvement_verdict with the ci gate's PASS side charged an A/A bias (docs/timing.md, "When the A/A does not
// settle"): PASS only when improvement_net_of_bias_pct(ci_low, bias_log) >= X; FAIL, as without it, when
// ci_high_pct < X. bias_log = 0 is improvement_verdict. The point gate ignores it.
Verdict improvement_verdict(const EffectEstimate& effect, double min_improvement_pct, GateKind kind, double bias_log);

// The A/B gate with its equivalence side (docs/timing.md, "No practical difference"), margin D = same_margin_pct:
// PASS as above; else SAME when the whole interval lies within [-D, +D] (the interval form of TOST against the
// margin, as aa_verdict), which also takes precedence over a FAIL it overlaps: "no difference larger than D" says
// more than "below the bar"; else FAIL or INCONCLUSIVE as above. D = 0 (a comparison made before the margin
// existed) never answers SAME; the point gate never does either.
Verdict ab_verdict(const EffectEstimate& effect, double min_improvement_pct, GateKind kind, double bias_log,
                   double same_margin_pct);

// A/A equivalence gate, the interval form of TOST (Schuirmann 1987), Y = max_aa_difference_pct > 0:
// PASS when the whole interval lies within [-Y, +Y]; FAIL when it lies wholly above +Y or wholly below -Y;
// else INCONCLUSIVE. With the two-sided interval at confidence c each one-sided test runs at level (1 - c) / 2,
// so the gate is conservative compared with TOST's usual 1 - 2 alpha interval.
Verdict aa_verdict(const EffectEstimate& effect, double max_aa_difference_pct);

}  // namespace kwb::stats

template <>
struct fmt::formatter<kwb::stats::Verdict> : fmt::formatter<std::string_view> {
  auto format(kwb::stats::Verdict v, format_context& ctx) const -> decltype(ctx.out()) {
    return fmt::formatter<std::string_view>::format(kwb::stats::to_string(v), ctx);
  }
};
