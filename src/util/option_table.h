// validate's options (and compare's and revalidate's, which share them), declared once. Each row is one option: its
// key (an MCP tool's argument, a campaign's or experiment's [validate] key), its flag on the command line, its kind,
// its range, its help, and the surfaces that offer it. cli/options.cpp registers the command-line options from the
// rows, cli/mcp_tools.cpp builds the tools' input schemas from them, and campaign/campaign_file.cpp reads [validate]
// with them, so the three cannot drift apart; tests/unit/option_table_test.cpp turns every row into each of the
// three and parses it with kwb's own readers. The defaults are pipeline/defaults.h's (one table too).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kwb {

// The closed range of every numeric option, on the command line, over kwb mcp and in [validate]. A value outside
// it, or not finite ("nan", "inf", "1e308"), is a usage error (exit 64) naming the option and this range, never a
// number that overflows a deadline or a budget further on.
struct OptionRange {
  const char* flag;
  double min, max;
  bool integer;
};
inline constexpr OptionRange k_timeout_range{"--timeout-seconds", 0.001, 86400.0, false};  // a day per call
inline constexpr OptionRange k_min_improvement_range{"--min-improvement-pct", -99.0, 1000.0, false};
inline constexpr OptionRange k_max_aa_range{"--max-aa-difference-pct", 0.001, 100.0, false};
// 0: no SAME verdict (the A/B decides only PASS, FAIL or INCONCLUSIVE, as before the margin existed).
inline constexpr OptionRange k_same_margin_range{"--same-margin-pct", 0.0, 100.0, false};
inline constexpr OptionRange k_max_minutes_range{"--max-minutes", 0.001, 10080.0, false};   // a week per workload
inline constexpr OptionRange k_lock_timeout_range{"--lock-timeout", 0.0, 604800.0, false};  // 0: do not wait
inline constexpr OptionRange k_calls_range{"--calls", 1, 1000, true};
inline constexpr OptionRange k_limit_range{"--limit", 1, 1'000'000'000, true};  // history --runs
inline constexpr OptionRange k_repetitions_range{"--repetitions", 2, 1'000'000, true};
inline constexpr OptionRange k_max_blocks_range{"--max-blocks", 2, 10'000'000, true};
inline constexpr OptionRange k_warmups_range{"--warmups", 0, 100'000, true};
inline constexpr OptionRange k_samples_range{"--samples", 0, 1'000'000, true};
inline constexpr OptionRange k_layouts_range{"--layouts", 0, 64, true};
inline constexpr OptionRange k_callgrind_calls_range{"--callgrind-calls", 1, 100, true};
// --seed takes any integer from 0 to 2^64 - 1.
inline constexpr OptionRange k_seed_range{"--seed", 0, 18446744073709551615.0, true};

// The range of a numeric flag, or nullptr for a flag that takes no number.
const OptionRange* option_range(std::string_view flag);

enum class OptionKind {
  number,   // a finite number in its range
  integer,  // a whole number in its range
  text,     // one string (one of `choices` when there are any)
  texts,    // a repeatable flag: a list of strings
  flag,     // on or off; the flag is given when on
};

// Where a row is offered. The command line offers every row; the others are chosen per row.
enum OptionSurface : unsigned {
  k_mcp = 1u << 0,       // an argument of the validate, revalidate and compare tools
  k_campaign = 1u << 1,  // a [validate] key of campaign and experiment files
};

struct OptionRow {
  const char* key;   // max_minutes
  const char* flag;  // --max-minutes
  OptionKind kind;
  const OptionRange* range;  // number and integer rows; nullptr otherwise
  const char* help;
  const char* example;  // a [validate] line, "max_minutes = 2.0" ("" where campaigns do not offer the row)
  unsigned surfaces;    // OptionSurface bits
  std::vector<std::string> choices = {};  // a text row's only values
};

// The rows, in the order --help, the tools' schemas and [validate] list them.
const std::vector<OptionRow>& option_rows();
// The row of `key`; InternalError for a key no row has (a typo in kwb's own code).
const OptionRow& option_row(std::string_view key);

}  // namespace kwb
