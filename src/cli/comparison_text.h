// What a person reads of a comparison (compare's terminal output, validate's summary): per workload, each arm's
// time per call, the speedup factor with its interval, the improvement with its interval, the detectable effect and
// the verdict; then a warning block when the result is noisy. Built from the comparison's JSON (to_json of a
// CompareReport, or a bundle's comparisons/<tag>.json), so both commands show the same thing.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace kwb::cli {

// A/B time ratio as a factor: improvement +75% is "4.00x faster", -406% is "5.06x slower".
std::string speedup_text(double improvement_pct);

// A decision's figures for its first line, from decision.json's A/B inputs: per workload with an estimate,
// "decode +57.20% [+55.10, +59.30] (2.34x faster)", joined by "; "; empty when no workload has one (INVALID, not
// built, identical).
std::string decision_figures(const nlohmann::json& decision);

// The table, one row per workload; `other` labels the second arm (B, or A' in an A/A).
std::string comparison_table(const nlohmann::json& comparison, std::string_view other);

// What makes the result noisy or weak, one line per finding: heavy tails; a detectable effect above 5% that left the
// result open or is larger than the effect seen; a budget that ran out before the interval settled; an arm whose
// speed depends on its layout by more than 10% (the spread's interval
// above 10%). Empty when none.
std::vector<std::string> noise_warnings(const nlohmann::json& comparison, std::string_view other);

// The warning block as printed (empty when there is nothing to warn about).
std::string warning_block(const std::vector<std::string>& warnings,
                          std::string_view title = "this result is noisy or weak");

}  // namespace kwb::cli
