#include "cli/comparison_text.h"

#include "cli/terminal.h"
#include "stats/descriptive.h"
#include "stats/layout.h"
#include "util/units.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

namespace kwb::cli {

namespace {

// Above these, a result says so (docs/timing.md, "Reading a result").
constexpr double k_noisy_mde_pct = 5.0;
constexpr double k_layout_spread_pct = 10.0;

bool number(const nlohmann::json& w, const char* key) { return w.contains(key) && w[key].is_number(); }

// A/B factor t_A / t_B from an improvement of (1 - t_B / t_A) * 100.
double factor(double improvement_pct) { return 1.0 / (1.0 - improvement_pct / 100.0); }

// An arm's time per call: the median of its block medians (nullopt without blocks).
std::optional<double> arm_ns(const nlohmann::json& w, const char* arm) {
  const nlohmann::json medians =
      w.value("block_median_ns", nlohmann::json::object()).value(arm, nlohmann::json::array());
  std::vector<double> v;
  for (const nlohmann::json& x : medians) {
    if (x.is_number()) v.push_back(x.get<double>());
  }
  if (v.empty()) return std::nullopt;
  return stats::median(v);
}

std::string arm_time(const nlohmann::json& w, const char* arm) {
  const std::optional<double> ns = arm_ns(w, arm);
  return ns ? time_text(*ns) : "-";
}

// The ratio of the arms' per-call medians, t_A / t_B, where it lies outside the paired speedup interval: the two
// estimators on one line disagree (arms that drifted apart over the run, blocks of very different sizes).
std::optional<double> medians_disagree(const nlohmann::json& w) {
  if (!number(w, "ci_low_pct") || !number(w, "ci_high_pct") || w["ci_high_pct"].get<double>() >= 100.0) {
    return std::nullopt;
  }
  const std::optional<double> a = arm_ns(w, "reference"), b = arm_ns(w, "other");
  if (!a || !b || !(*b > 0.0)) return std::nullopt;
  const double ratio = *a / *b;
  if (ratio >= factor(w["ci_low_pct"].get<double>()) && ratio <= factor(w["ci_high_pct"].get<double>())) {
    return std::nullopt;
  }
  return ratio;
}

}  // namespace

std::string speedup_text(double improvement_pct) {
  if (!(improvement_pct < 100.0)) return "-";
  const double f = factor(improvement_pct);
  if (std::fabs(f - 1.0) < 0.005) return "1.00x (same)";
  return f > 1.0 ? fmt::format("{:.2f}x faster", f) : fmt::format("{:.2f}x slower", 1.0 / f);
}

std::string decision_figures(const nlohmann::json& decision) {
  std::vector<std::string> parts;
  const nlohmann::json inputs = decision.value("inputs", nlohmann::json::object());
  for (const nlohmann::json& w : inputs.value("ab", nlohmann::json::array())) {
    if (!number(w, "improvement_pct") || !number(w, "ci_low_pct") || !number(w, "ci_high_pct")) continue;
    const double imp = w["improvement_pct"].get<double>();
    parts.push_back(fmt::format("{} {:+.2f}% [{:+.2f}, {:+.2f}] ({}, {})", w.value("workload", "?"), imp,
                                w["ci_low_pct"].get<double>(), w["ci_high_pct"].get<double>(), speedup_text(imp),
                                w.value("verdict", "?")));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string comparison_table(const nlohmann::json& comparison, std::string_view other) {
  std::vector<std::vector<std::string>> rows;
  for (const nlohmann::json& w : comparison.value("workloads", nlohmann::json::array())) {
    const bool est = number(w, "improvement_pct") && number(w, "ci_low_pct") && number(w, "ci_high_pct");
    const double imp = est ? w["improvement_pct"].get<double>() : 0.0;
    const double lo = est ? w["ci_low_pct"].get<double>() : 0.0, hi = est ? w["ci_high_pct"].get<double>() : 0.0;
    rows.push_back({w.value("name", "?"), arm_time(w, "reference"), arm_time(w, "other"), est ? speedup_text(imp) : "-",
                    est && hi < 100.0 ? fmt::format("[{:.2f}x, {:.2f}x]", factor(lo), factor(hi)) : "-",
                    est ? fmt::format("{:+.2f}% [{:+.2f}, {:+.2f}]", imp, lo, hi) : "-",
                    number(w, "mde_pct") ? fmt::format("{:.2f}%", w["mde_pct"].get<double>()) : "-",
                    fmt::format("{}", w.value("blocks", 0)), w.value("verdict", "-")});
  }
  const std::string o(other);
  // Two estimators share each row; the legend says which is which (the paired one decides).
  return format_table({"workload", "A per call", o + " per call", o + " vs A", "speedup interval",
                       "improvement [interval]", "MDE", "blocks", "verdict"},
                      rows) +
         fmt::format(
             "per call: each arm's median of its block medians; {} vs A and both intervals: the paired "
             "estimate over each block's {}/A ratio, which decides (docs/timing.md, \"Reading a result\")\n",
             o, o);
}

std::vector<std::string> noise_warnings(const nlohmann::json& comparison, std::string_view other) {
  std::vector<std::string> out;
  for (const nlohmann::json& w : comparison.value("workloads", nlohmann::json::array())) {
    const std::string name = w.value("name", "?");
    if (w.value("verdict", "") == "INVALID") continue;  // no metric to doubt
    if (w.value("heavy_tailed", false)) {
      out.push_back(
          fmt::format("{}: the block ratios are heavy-tailed (outlying blocks): the interval is the "
                      "signed-rank one, and the machine was likely disturbed while it ran",
                      name));
    }
    // A large detectable effect matters when it left the result open, or is larger than the effect seen.
    const bool open = w.value("verdict", "") == "INCONCLUSIVE";
    const double seen = number(w, "improvement_pct") ? std::fabs(w["improvement_pct"].get<double>()) : 0.0;
    if (number(w, "mde_pct") && w["mde_pct"].get<double>() > k_noisy_mde_pct &&
        (open || w["mde_pct"].get<double>() > seen)) {
      out.push_back(
          fmt::format("{}: with {} blocks, an effect smaller than {:.1f}% could go undetected (MDE): run "
                      "longer (--max-minutes) or on a quieter machine",
                      name, w.value("blocks", 0), w["mde_pct"].get<double>()));
    }
    if (const std::optional<double> ratio = medians_disagree(w)) {
      out.push_back(fmt::format(
          "{}: the per-call medians' ratio ({:.2f}x) lies outside the paired interval [{:.2f}x, "
          "{:.2f}x]: the arms' times moved apart over the run, and the paired estimate, which "
          "compares A and {} within each block, is the one to read",
          name, *ratio, factor(w["ci_low_pct"].get<double>()), factor(w["ci_high_pct"].get<double>()), other));
    }
    if (w.value("stopped_by_budget", false) && w.value("verdict", "") == "INCONCLUSIVE") {
      out.push_back(
          fmt::format("{}: the time budget ran out before the interval settled on either side of the gate", name));
    }
    const nlohmann::json floor = w.value("layout_floor", nlohmann::json::object());
    if (floor.value("applied", false) && number(floor, "variance_log")) {
      out.push_back(
          fmt::format("{}: the arms' builds explain part of the blocks, so the interval includes the layout floor "
                      "(+-{:.2f}% sd of the mean): a sample of {} layouts per arm, which more blocks do not narrow; "
                      "more layouts (--layouts) do",
                      name, 100.0 * std::sqrt(floor["variance_log"].get<double>()), w.value("layouts", 0)));
    }
    const nlohmann::json sens = w.value("layout_sensitivity", nlohmann::json::array());
    for (size_t arm = 0; arm < sens.size() && arm < 2; ++arm) {
      const nlohmann::json& l = sens[arm];
      // Only when the permutation test shows that layout matters and the interval itself clears the threshold: with
      // few visits per layout the spread of noisy medians is large by chance alone (docs/timing.md, "Layout
      // randomization").
      if (l.value("available", false) && number(l, "spread_pct") && number(l, "ci_low_pct") &&
          number(l, "ci_high_pct") && number(l, "p_value") && l["p_value"].get<double>() < stats::k_layout_alpha &&
          l["ci_low_pct"].get<double>() > k_layout_spread_pct) {
        out.push_back(
            fmt::format("{}: arm {}'s speed depends on where its code, stack and data land: its layouts' "
                        "medians spread by {:.1f}% [{:.1f}%, {:.1f}%]; the comparison draws layouts at random "
                        "to average it out",
                        name, arm == 0 ? std::string("A") : std::string(other), l["spread_pct"].get<double>(),
                        l["ci_low_pct"].get<double>(), l["ci_high_pct"].get<double>()));
      }
    }
  }
  return out;
}

std::string warning_block(const std::vector<std::string>& warnings, std::string_view title) {
  if (warnings.empty()) return "";
  std::string out = fmt::format("\nWARNING: {}:\n", title);
  for (const std::string& w : warnings) out += "  - " + w + "\n";
  return out;
}

}  // namespace kwb::cli
