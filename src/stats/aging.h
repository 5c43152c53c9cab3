// The steady state, sampled (docs/timing.md, "The steady state"). A visit is a fresh worker process, so a
// comparison of short visits only ever times a process's first calls. A kernel whose speed changes as its process
// ages (a cache that fills, a structure that grows, a leak, or code fast only for its first N calls) would be judged
// on its youth. Every k_long_block_period-th block therefore gives both arms long visits, k_long_visit_factor times
// the usual number of timed calls, timed from start to end; and in each such block, each arm's late timed calls are
// compared with its early ones. Because the two arms' calls alternate within a block, whatever the machine does to
// one arm's late calls it does to the other's: the difference of the two arms' drifts isolates the code.
//
// Not quite: a loaded machine hits a small kernel that lives in the core's caches far harder than a large one (a
// neighbour's burst took a 1.4 us kernel to 4.6 us and a 17 us one to 19 us, in the late half of one long visit).
// One long block is therefore never evidence: a long block past the bar makes the next block long too, and an arm
// ages only when k_aging_min_trips long blocks say so in one direction and they are k_aging_share of all the long
// blocks. Code that ages does so in every long visit, and is found three long blocks later; a burst does not recur
// on cue.
#pragma once

#include "stats/gate.h"

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kwb::stats {

inline constexpr int k_long_block_period = 4;
inline constexpr int k_long_visit_factor = 3;
// An arm whose late calls are this much slower (or faster) than its early ones, relative to the other arm's, in
// at least k_aging_share of the long blocks, ages: its comparison is INVALID (no metric).
inline constexpr double k_aging_bar = 0.25;
inline constexpr double k_aging_share = 0.75;
// Fewer long blocks past the bar in one direction than this: no finding, at most a suspicion (reported as such).
inline constexpr size_t k_aging_min_trips = 3;
// Calls in each half of a long visit for the block to be evidence at all, and so the fewest timed calls a long
// visit gets where the pool has room (pipeline/compare.cpp). Halves of 4 calls (--samples 1, long visits of 9) made
// an honest 6-pass baseline against its fused kernel, cold, on opencl, trip 3 long blocks running in 2 of 9 compares:
// a median of 4 noisy calls moves by more than the bar.
inline constexpr size_t k_aging_min_half_calls = 8;
// A long block trips only when the drifts' difference passes the bar by this many of its standard errors, estimated
// from the halves' own spread: with cold opencl calls scattering by a third, honest drifts of +-0.3 (log) came and
// went, and 1 of 18 honest compares read INVALID at halves of 8 with the bar alone.
inline constexpr double k_aging_noise_se = 2.0;

// Blocks 1, 5, 9, ...: long by the schedule. Public on purpose: a worker is a fresh process per visit and cannot
// know its block.
inline bool long_block(int block) { return block >= 0 && block % k_long_block_period == 1; }

// One arm's timed, validated calls in one visit: (call index within the visit, nanoseconds).
using AgingVisit = std::vector<std::pair<int64_t, double>>;

struct AgingCheck {
  size_t long_blocks = 0;   // long blocks with at least 2 x k_aging_min_half_calls timed calls per arm
  size_t aging_blocks = 0;  // of those, the ones past the bar in the majority's direction
  // Medians over the long blocks: each arm's log(late median / early median), and their difference (other - A).
  double drift_a_log = 0.0, drift_other_log = 0.0, difference_log = 0.0;
  bool ages = false;
  // The long blocks past the bar are k_aging_share of them, but fewer than k_aging_min_trips: the next block is long
  // (next_block_long), and a comparison that ends suspected cannot PASS.
  bool suspected = false;
};

// Whether `block` is long: by the schedule, or because the long blocks before it left the comparison suspected.
// verify replays this from samples.csv in block order.
inline bool next_block_long(int block, const AgingCheck& so_far) { return long_block(block) || so_far.suspected; }

// `blocks`: per long block, the visits of A and of the other arm.
AgingCheck aging_check(const std::vector<std::array<AgingVisit, 2>>& blocks);

// A comparison that ends with its suspicion unresolved (the budget ran out before the long blocks it asked for) has
// not shown that the code holds its speed: an A/B PASS reads INCONCLUSIVE. Every other verdict stands, and so does
// an A/A's (identical code ages alike; its calibration is about the machine).
inline Verdict aging_unresolved(Verdict v, const AgingCheck& a, bool aa) {
  return a.suspected && !aa && v == Verdict::pass ? Verdict::inconclusive : v;
}

// "arm B's late calls ran 30.0x its early ones (arm A's 1.01x) in 3 of 3 long visits" (for a reason line).
std::string describe_aging(const AgingCheck& a, const std::string& other_label);

}  // namespace kwb::stats
