#include "stats/gate.h"

#include "stats/checks.h"
#include "util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kwb::stats {

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::pass:
      return "PASS";
    case Verdict::fail:
      return "FAIL";
    case Verdict::inconclusive:
      return "INCONCLUSIVE";
    case Verdict::invalid:
      return "INVALID";
    case Verdict::refused:
      return "REFUSED";
    case Verdict::interrupted:
      return "INTERRUPTED";
    case Verdict::same:
      return "SAME";
  }
  throw std::invalid_argument("to_string: unknown Verdict " + std::to_string(static_cast<int>(verdict)));
}

std::optional<Verdict> parse_verdict(std::string_view name) {
  for (Verdict v : {Verdict::pass, Verdict::fail, Verdict::inconclusive, Verdict::invalid, Verdict::refused,
                    Verdict::interrupted, Verdict::same}) {
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

double improvement_net_of_bias_pct(double ci_low_pct, double bias_log) {
  return 100.0 * (1.0 - (1.0 - ci_low_pct / 100.0) * std::exp(bias_log));
}

std::optional<double> aa_interval_bias_log(double ci_low_pct, double ci_high_pct) {
  const double lo = 1.0 - ci_high_pct / 100.0, hi = 1.0 - ci_low_pct / 100.0;  // the other's time over the reference's
  if (!(lo > 0.0) || !(hi > 0.0)) return std::nullopt;
  return std::max(std::abs(std::log(lo)), std::abs(std::log(hi)));
}

Verdict improvement_verdict(const EffectEstimate& effect, double min_improvement_pct, GateKind kind, double bias_log) {
  const Verdict plain = improvement_verdict(effect, min_improvement_pct, kind);
  if (kind != GateKind::ci || bias_log == 0.0) return plain;
  if (!(std::isfinite(bias_log) && bias_log > 0.0)) {
    throw std::invalid_argument("improvement_verdict: bias_log must be finite and >= 0, got " +
                                detail::format_number(bias_log));
  }
  if (plain == Verdict::pass && improvement_net_of_bias_pct(effect.ci_low_pct, bias_log) < min_improvement_pct) {
    return Verdict::inconclusive;
  }
  return plain;
}

Verdict ab_verdict(const EffectEstimate& effect, double min_improvement_pct, GateKind kind, double bias_log,
                   double same_margin_pct) {
  if (!(std::isfinite(same_margin_pct) && same_margin_pct >= 0.0)) {
    throw std::invalid_argument("ab_verdict: same_margin_pct must be finite and >= 0, got " +
                                detail::format_number(same_margin_pct));
  }
  const Verdict v = improvement_verdict(effect, min_improvement_pct, kind, bias_log);
  if (v == Verdict::pass || kind != GateKind::ci || same_margin_pct == 0.0) return v;
  if (effect.ci_low_pct >= -same_margin_pct && effect.ci_high_pct <= same_margin_pct) return Verdict::same;
  return v;
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
