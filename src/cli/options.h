// The flags of the verbs that check and time, and what they parse into: the pipeline's option structs. Every
// default comes from pipeline/defaults.h, and every option compare, validate and revalidate share is a row of
// util/option_table.h (flag, kind, range, help), registered here from the row; tests/unit/defaults_test.cpp parses
// command lines without flags and holds the results to the defaults table.
#pragma once

#include "pipeline/check.h"
#include "pipeline/compare.h"
#include "pipeline/defaults.h"
#include "pipeline/validate.h"
#include "util/option_table.h"

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

// The ranges of the numeric options and the rows of validate's options: util/option_table.h.

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

// ---- what compare and validate share: gates, budgets, timing, and the checks they run
// ----------------------------------

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

// ---- compare
// ----------------------------------------------------------------------------------------------------------

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

// ---- validate
// ---------------------------------------------------------------------------------------------------------

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
