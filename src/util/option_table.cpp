#include "util/option_table.h"

#include "util/error.h"

#include <fmt/format.h>

namespace kwb {

const OptionRange* option_range(std::string_view flag) {
  static constexpr const OptionRange* k_all[] = {
      &k_timeout_range, &k_min_improvement_range, &k_max_aa_range,     &k_same_margin_range,  &k_max_minutes_range,
      &k_calls_range,   &k_repetitions_range,     &k_max_blocks_range, &k_warmups_range,      &k_samples_range,
      &k_layouts_range, &k_callgrind_calls_range, &k_seed_range,       &k_lock_timeout_range, &k_limit_range};
  for (const OptionRange* r : k_all) {
    if (flag == r->flag) return r;
  }
  return nullptr;
}

const std::vector<OptionRow>& option_rows() {
  using K = OptionKind;
  constexpr unsigned both = k_mcp | k_campaign;
  // [validate]'s keys keep this order: a campaign job's identity hashes its flags in it (campaign/runner.h).
  static const std::vector<OptionRow> rows = {
      {"workloads", "--workload", K::texts, nullptr,
       "Only these timing cases (repeatable; default: every timing case of the task)", "workloads = [\"decode\"]",
       both},
      {"gate",
       "--gate",
       K::text,
       nullptr,
       "ci: the whole interval must clear the bar; point: the median must (legacy)",
       "gate = \"ci\"",
       both,
       {"ci", "point"}},
      {"min_improvement_pct", "--min-improvement-pct", K::number, &k_min_improvement_range,
       "Improvement the candidate must show on every workload, in percent", "min_improvement_pct = 2.0", both},
      {"max_aa_difference_pct", "--max-aa-difference-pct", K::number, &k_max_aa_range,
       "A/A: largest |A' vs A| accepted as the noise floor, in percent", "max_aa_difference_pct = 1.0", both},
      {"same_margin_pct", "--same-margin-pct", K::number, &k_same_margin_range,
       "A/B: an interval wholly within +-this is SAME, no practical difference, in percent (default: the task's "
       "same_margin_pct, else 1; 0: no SAME)",
       "same_margin_pct = 1.0", both},
      {"max_minutes", "--max-minutes", K::number, &k_max_minutes_range,
       "Timing budget per workload comparison, in minutes", "max_minutes = 2.0", both},
      {"repetitions", "--repetitions", K::integer, &k_repetitions_range,
       "Minimum blocks per comparison (the first look)", "repetitions = 10", both},
      {"max_blocks", "--max-blocks", K::integer, &k_max_blocks_range, "Block cap per workload comparison",
       "max_blocks = 2000", k_campaign},
      {"warmups", "--warmups", K::integer, &k_warmups_range, "Untimed calls per visit", "", 0},
      {"samples", "--samples", K::integer, &k_samples_range, "Timed calls per visit; 0 = sized by a pilot", "", 0},
      {"timeout_seconds", "--timeout-seconds", K::number, &k_timeout_range, "Per call, timed or checked",
       "timeout_seconds = 10", both},
      {"lock_timeout_seconds", "--lock-timeout", K::number, &k_lock_timeout_range,
       "Give up (exit 75, try again later) after waiting this many seconds for the timing lock (default: wait as "
       "long as it takes)",
       "", k_mcp},
      {"layouts", "--layouts", K::integer, &k_layouts_range,
       "Builds per arm in the layout pool (0: 8 on cpu, 1 on devices; 1: one fixed layout, no offsets)", "layouts = 8",
       both},
      {"seed", "--seed", K::integer, &k_seed_range,
       "Seed for block orders and layouts (default: drawn and recorded in the plan); the data comes from a secret "
       "drawn at run time, committed to in the plan",
       "seed = 7", both},
      {"cold", "--cold", K::flag, nullptr, "Flush caches before every timed call, outside the timer (default: warm)",
       "cold = true", both},
      {"exhaustive", "--exhaustive", K::flag, nullptr,
       "Checks run every case even after a worker failure (default: they stop there)", "", 0},
      {"no_profile", "--no-profile", K::flag, nullptr,
       "Skip the profile stage: it is descriptive, the decision never depends on it, and under valgrind it is the "
       "slowest part of a short validate",
       "no_profile = true", both},
  };
  return rows;
}

const OptionRow& option_row(std::string_view key) {
  for (const OptionRow& r : option_rows()) {
    if (key == r.key) return r;
  }
  throw InternalError(fmt::format("option_row: no row has the key '{}'", key));
}

}  // namespace kwb
