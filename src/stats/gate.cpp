#include "stats/gate.h"

#include "stats/checks.h"
#include "util/error.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace kwb::stats {

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::pass: return "PASS";
    case Verdict::fail: return "FAIL";
    case Verdict::inconclusive: return "INCONCLUSIVE";
    case Verdict::invalid: return "INVALID";
    case Verdict::refused: return "REFUSED";
    case Verdict::interrupted: return "INTERRUPTED";
  }
  throw std::invalid_argument("to_string: unknown Verdict " + std::to_string(static_cast<int>(verdict)));
}

std::optional<Verdict> parse_verdict(std::string_view name) {
  for (Verdict v : {Verdict::pass, Verdict::fail, Verdict::inconclusive, Verdict::invalid, Verdict::refused,
                    Verdict::interrupted}) {
    if (to_string(v) == name) return v;
  }
  return std::nullopt;
}

Verdict parse_verdict_field(std::string_view name, std::string_view where) {
  if (std::optional<Verdict> v = parse_verdict(name)) return *v;
  throw DataError(fmt::format("{}: unknown verdict '{}'", where, name));
}

Verdict improvement_verdict(const EffectEstimate& effect, double min_improvement_pct, GateKind kind) {
  if (!std::isfinite(min_improvement_pct)) {
    throw std::invalid_argument("improvement_verdict: min_improvement_pct must be finite, got " +
                                detail::format_number(min_improvement_pct));
  }
  switch (kind) {
    case GateKind::ci:
      if (effect.ci_low_pct >= min_improvement_pct) return Verdict::pass;
      if (effect.ci_high_pct < min_improvement_pct) return Verdict::fail;
      return Verdict::inconclusive;
    case GateKind::point:
      return effect.improvement_pct >= min_improvement_pct ? Verdict::pass : Verdict::fail;
  }
  throw std::invalid_argument("improvement_verdict: unknown GateKind " + std::to_string(static_cast<int>(kind)));
}

Verdict aa_verdict(const EffectEstimate& effect, double max_aa_difference_pct) {
  if (!(std::isfinite(max_aa_difference_pct) && max_aa_difference_pct > 0.0)) {
    throw std::invalid_argument("aa_verdict: max_aa_difference_pct must be a positive finite margin (e.g. 1.0), got " +
                                detail::format_number(max_aa_difference_pct));
  }
  const double y = max_aa_difference_pct;
  if (effect.ci_low_pct >= -y && effect.ci_high_pct <= y) return Verdict::pass;
  if (effect.ci_low_pct > y || effect.ci_high_pct < -y) return Verdict::fail;
  return Verdict::inconclusive;
}

}  // namespace kwb::stats
