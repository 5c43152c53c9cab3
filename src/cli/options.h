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
#include <vector>

namespace kwb::cli {

// --timeout-seconds takes seconds.
inline constexpr double k_default_timeout_seconds = std::chrono::duration<double>(defaults::k_timeout).count();
std::chrono::milliseconds timeout_from_seconds(double seconds);
// --backend, one of util/backend_kind.h.
void add_backend_option(CLI::App& app, BackendKind& backend);

// "ci" or "point", as --gate spells them.
std::string gate_name(stats::GateKind kind);

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
};

void add_check_options(CLI::App& app, CheckArgs& a);
CheckOptions check_options(const CheckArgs& a);

// ---- what compare and validate share: gates, budgets, timing, and the checks they run ----------------------------------

struct TimingArgs {
  BackendKind backend = BackendKind::cpu;
  std::string gate = gate_name(defaults::k_gate);
  double min_improvement_pct = defaults::k_min_improvement_pct;
  double max_aa_difference_pct = defaults::k_max_aa_difference_pct;
  size_t repetitions = defaults::k_repetitions;
  size_t max_blocks = defaults::k_max_blocks;
  int warmups = defaults::k_warmups;
  int samples = defaults::k_samples;
  double max_minutes = defaults::k_max_minutes;
  double timeout_seconds = k_default_timeout_seconds;
  std::vector<std::string> workloads;
  bool cold = defaults::k_cold;
  bool exhaustive = defaults::k_exhaustive;
  int layouts = defaults::k_layouts;
};

void add_timing_options(CLI::App& app, TimingArgs& a);
GateConfig gate_config(const TimingArgs& a, CompareMode mode);
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
  TimingArgs timing;
};

void add_validate_options(CLI::App& app, ValidateArgs& a);
// What validate and revalidate share: the bundle folder, the timing options, the seed, --no-profile, --json.
void add_validate_run_options(CLI::App& app, ValidateArgs& a);
// Everything but the device and argv, which the verb fills in.
ValidateOptions validate_options(const ValidateArgs& a);

}  // namespace kwb::cli
