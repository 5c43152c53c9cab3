// The flags of the verbs that check and time, and what they parse into: the pipeline's option structs. Every
// default comes from pipeline/defaults.h, and compare and validate register the flags they share through one
// function, so their --help cannot disagree; tests/unit/defaults_test.cpp parses command lines without flags and
// holds the results to the table.
#pragma once

#include "pipeline/check.h"
#include "pipeline/compare.h"
#include "pipeline/defaults.h"
#include "pipeline/validate.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kwb::cli {

// --timeout-seconds takes seconds.
inline constexpr double k_default_timeout_seconds = std::chrono::duration<double>(defaults::k_timeout).count();
// Never overflows: the seconds are clamped to k_timeout_range first (a NaN to its minimum).
std::chrono::milliseconds timeout_from_seconds(double seconds);

// The closed range of every numeric option, on the command line and over kwb mcp (one table, so the two cannot
// disagree). A value outside it, or not finite ("nan", "inf", "1e308"), is a usage error (exit 64) naming the
// option and this range, never a number that overflows a deadline or a budget further on.
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
inline constexpr OptionRange k_max_minutes_range{"--max-minutes", 0.001, 10080.0, false};  // a week per workload
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
// Why `text` is not a value of `range`'s option ("" when it is): "--timeout-seconds must be a finite number from
// 0.001 to 86400 (got nan)".
std::string out_of_range(const OptionRange& range, const std::string& text);
// The CLI11 check for a numeric option (an option's value is checked as text, before it is converted).
CLI::Validator in_range(const OptionRange& range);
// --backend, one of util/backend_kind.h.
void add_backend_option(CLI::App& app, BackendKind& backend);

// "ci" or "point", as --gate spells them.
std::string gate_name(stats::GateKind kind);
// Every value --gate takes.
std::vector<std::string> gate_names();

// ---- check ----------------------------------------------------------------------------------------------------------

struct CheckArgs {
  std::string task_dir;
  std::string impl;
  std::string control;  // instead of impl: one of the task's controls, by name
  BackendKind backend = BackendKind::cpu;
  bool json = false;
  double timeout_seconds = k_default_timeout_seconds;
  uint64_t seed = 0;
  int calls = defaults::k_check_calls;
  std::vector<std::string> cases;
  bool held_out = false;
  bool exhaustive = defaults::k_exhaustive;
  bool until_rejected = false;  // with control: stop once its expected reason is seen
};

void add_check_options(CLI::App& app, CheckArgs& a);
CheckOptions check_options(const CheckArgs& a);

// ---- what compare and validate share: gates, budgets, timing, and the checks they run ----------------------------------

struct TimingArgs {
  BackendKind backend = BackendKind::cpu;
  std::string gate = gate_name(defaults::k_gate);
  double min_improvement_pct = defaults::k_min_improvement_pct;
  double max_aa_difference_pct = defaults::k_max_aa_difference_pct;
  std::optional<double> same_margin_pct;  // none: the task's same_margin_pct, else defaults::k_same_margin_pct
  size_t repetitions = defaults::k_repetitions;
  size_t max_blocks = defaults::k_max_blocks;
  int warmups = defaults::k_warmups;
  int samples = defaults::k_samples;
  double max_minutes = defaults::k_max_minutes;
  double timeout_seconds = k_default_timeout_seconds;
  std::optional<double> lock_timeout_seconds;  // none: wait for the timing lock as long as it takes
  std::vector<std::string> workloads;
  bool cold = defaults::k_cold;
  bool exhaustive = defaults::k_exhaustive;
  int layouts = defaults::k_layouts;
};

void add_timing_options(CLI::App& app, TimingArgs& a);
GateConfig gate_config(const TimingArgs& a, CompareMode mode);
// The A/B's margin of no practical difference: --same-margin-pct, else the task's, else the default.
double same_margin_pct(const TimingArgs& a, const Task& task);
Budget budget(const TimingArgs& a);
TimingOptions timing_options(const TimingArgs& a);

// ---- compare ----------------------------------------------------------------------------------------------------------

struct CompareArgs {
  std::string task_dir;
  std::string baseline;
  std::string candidate;
  std::string output_dir;
  bool aa = false;
  bool json = false;
  uint64_t seed = defaults::k_compare_seed;
  TimingArgs timing;
};

void add_compare_options(CLI::App& app, CompareArgs& a);
// Everything but the arms and their labels, which need the builds.
CompareRequest compare_request(const CompareArgs& a);

// ---- validate ---------------------------------------------------------------------------------------------------------

struct ValidateArgs {
  std::string task_dir;
  std::string candidate;
  std::string baseline;
  std::string output_dir;
  bool json = false;
  std::optional<uint64_t> seed;  // none: drawn at random and recorded in the plan
  std::string against;           // "incumbent": the baseline is the ledger's incumbent (cli/ledger.h)
  bool no_profile = false;
  // A campaign's or experiment's nonce for one job attempt (64 hex digits, drawn by kwb): validate does nothing with
  // it but record it, in plan.json's signed command line, so that the job takes only a bundle its own run made.
  std::string job_nonce;
  TimingArgs timing;
};

void add_validate_options(CLI::App& app, ValidateArgs& a);
// What validate and revalidate share: the bundle folder, the timing options, the seed, --no-profile, --json.
void add_validate_run_options(CLI::App& app, ValidateArgs& a);
// Everything but the device and argv, which the verb fills in.
ValidateOptions validate_options(const ValidateArgs& a);

}  // namespace kwb::cli
