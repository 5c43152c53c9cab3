// Verdicts from an EffectEstimate. A verdict is only as strong as the interval behind it: when the interval
// straddles the threshold the answer is INCONCLUSIVE, never a forced PASS or FAIL (STYLE.md: no silent statistics).
#pragma once

#include "stats/effect.h"

#include <string_view>

namespace kwb::stats {

enum class GateKind { ci, point };
enum class Verdict { pass, fail, inconclusive };

std::string_view to_string(Verdict verdict);  // "PASS", "FAIL", "INCONCLUSIVE"

// Is the candidate faster by at least X = min_improvement_pct?
// ci:    PASS when ci_low_pct >= X, FAIL when ci_high_pct < X, else INCONCLUSIVE.
// point: PASS when improvement_pct >= X, else FAIL (the legacy rule: ignores noise, never INCONCLUSIVE).
Verdict improvement_verdict(const EffectEstimate& effect, double min_improvement_pct, GateKind kind);

// A/A equivalence gate, the interval form of TOST (Schuirmann 1987), Y = max_aa_difference_pct > 0:
// PASS when the whole interval lies within [-Y, +Y]; FAIL when it lies wholly above +Y or wholly below -Y;
// else INCONCLUSIVE. With the two-sided interval at confidence c each one-sided test runs at level (1 - c) / 2,
// so the gate is conservative compared with TOST's usual 1 - 2 alpha interval.
Verdict aa_verdict(const EffectEstimate& effect, double max_aa_difference_pct);

}  // namespace kwb::stats
