// Every default of checking, timing and the statistics, in one table. The option structs (check.h, compare.h,
// validate.h) and every verb (src/cli/cmd_*.cpp, through src/cli/options.cpp) take theirs from here, so `kwb
// compare --help` and `kwb validate --help` show the same values; the layers below (session, profile, stats)
// carry none of their own and are always given one. docs/timing.md has the same table with the reasons in full;
// tests/unit/defaults_test.cpp holds the CLI to it.
#pragma once

#include "stats/gate.h"

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace kwb::defaults {

// ---- checks (check, and the checks compare, validate and profile run) ----------------------------------------------

// Per call, every verb: far above any honest call of the shipped tasks (the largest moves 256 MiB), on a loaded
// machine too; a check stops at its first timeout, so a hang costs it once.
inline constexpr std::chrono::seconds k_timeout{60};
// Calls per checked case, each on its own input set: two fresh sets and two twins (the replay traps).
inline constexpr int k_check_calls = 4;
// A check stops at the first worker failure: the verdict is already FAIL, and a hang would cost a timeout per case.
inline constexpr bool k_exhaustive = false;

// ---- timing (compare, and validate's A/A and A/B) ------------------------------------------------------------------

// Untimed calls per visit: the first call of a fresh worker pays first-touch faults and lazy binding.
inline constexpr int k_warmups = 2;
// Timed calls per visit. A block interleaves its two visits' calls (docs/timing.md, "Interleaved calls"), so the
// machine's drift cancels within the block and what is left per block is the calls' own noise and the process's:
// more calls per visit pay off until the calls' share is small. Measured on this 2-vCPU VM (rmsnorm's A/A, 3 x 10 s
// per setting, rotated): prefill's per-block sd of the log ratio 7.4% at 10 calls, 5.7% at 20, 2.3% at 40; decode's
// 23% at 5, 15% at 20, 5.2% at 40. 20 keeps a block of prefill near a quarter of a second, so the first look (10
// blocks) comes within seconds; docs/timing.md "Visit size" has the table. 0 sizes visits by a pilot to ~50 ms of
// kernel time (5 to 100 calls).
inline constexpr int k_samples = 20;
// Warm caches: kernels called in a loop run warm; --cold answers another question.
inline constexpr bool k_cold = false;
// Builds per arm in the layout pool; 0 picks by backend: 8 on cpu (stats::k_cpu_layouts: four 16-byte slots of a
// line twice, eight page offsets), 1 on device backends (the driver places device code and buffers).
inline constexpr int k_layouts = 0;

// ---- budgets and stopping ------------------------------------------------------------------------------------------

// --repetitions, the first look: at 5 blocks (the rule's smallest) the interval is 1.8x as wide as at 10.
inline constexpr size_t k_repetitions = 10;
// --max-blocks: a cap the time budget reaches first; it bounds memory if the budget is made huge.
inline constexpr size_t k_max_blocks = 100000;
// --max-minutes, per workload comparison: ~120 blocks at PoCL's ~0.5 s per block here, the 7th look.
inline constexpr double k_max_minutes = 1.0;

// ---- gates and statistics ------------------------------------------------------------------------------------------

// The family-wise false-positive rate, spent over all looks.
inline constexpr double k_alpha = 0.05;
// --gate ci: decides only when the whole interval is on one side of the bar (error-controlled).
inline constexpr stats::GateKind k_gate = stats::GateKind::ci;
// --same-margin-pct: an A/B interval wholly within +-1% is SAME, no practical difference, and stops the comparison:
// the A/A's bound, below the effects worth deciding on, and 3-5x the A/A floor of the shipped tasks on this machine
// (docs/timing.md, "No practical difference"). A task may set its own (task.toml same_margin_pct).
inline constexpr double k_same_margin_pct = 1.0;
// --min-improvement-pct: faster by more than the margin of no practical difference. At 0 ("faster at all") a loop
// of equal candidates kept about 1 in 20 (docs/experiments.md): an interval of identical code ends above 0 as often
// as alpha allows, and a real but immaterial layout effect more often still. At the margin, identical code is kept
// only if its interval misses the truth by 1%, and a 5% gain still clears it once its interval is +-4% wide.
inline constexpr double k_min_improvement_pct = 1.0;
// --max-aa-difference-pct: identical code must measure within 1%, below the effects worth deciding on.
inline constexpr double k_max_aa_difference_pct = 1.0;

// ---- seeds (the one default compare and validate do not share) ----------------------------------------------------

// compare: a fixed seed, so repeated runs of an optimization loop time the same data in the same block orders.
// validate has no default: it draws a seed and records it in plan.json.
inline constexpr uint64_t k_compare_seed = 1;

}  // namespace kwb::defaults
