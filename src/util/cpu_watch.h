// What a timed sample charges (docs/timing.md, "What a sample charges"): the go-to-done window the parent times, plus
// every nanosecond of CPU the worker's threads used outside it on the call's data (session/worker_session.h). Here,
// not in the session, because verify (record/verify.cpp) re-derives every sample from the figures samples.csv
// records (window_ns, pre_cpu_ns, post_cpu_ns).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kwb::cpu_watch {

// A sample: the window, plus the worker's CPU from just before the call's inputs were written to ready (beyond the
// parent's own reaction, while the worker only spins for go), plus its CPU while the parent captured the outputs
// after done. -1 (not watched per window: no exact CPU clock, the profile worker) charges nothing. Work moved out of
// the window is charged as CPU, a thread's worth at a time: spreading it over threads before go costs more, never
// less, than doing it inside.
//
// Less the block's floor (Floor: the medians over the reference arm's calls of the block before, record/samples.h),
// from compare.json version 7 on: kwb's own protocol costs the worker CPU
// in both places whatever the implementation does (its futex wake-up before ready, its way back to sleep after done,
// the parent's reads of its CPU clock while it runs), and on a host whose kernel mitigates speculative attacks at
// every entry that is microseconds, the same for both arms: charged whole it added 5 us to a 1.4 us decode call and
// read a 4.6% difference as 1% (docs/timing.md, "What a sample charges").
struct Floor {
  int64_t pre_ns = 0;
  int64_t post_ns = 0;
};

inline int64_t charged_ns(int64_t window_ns, int64_t pre_cpu_ns, int64_t post_cpu_ns, const Floor& floor = {}) {
  return window_ns + std::max<int64_t>(0, pre_cpu_ns - floor.pre_ns) +
         std::max<int64_t>(0, post_cpu_ns - floor.post_ns);
}

// The median of `v` as one of its values (the lower middle one for an even count), 0 for none: a floor is a value
// the reference's calls took, never a mean between two.
inline int64_t median_ns(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>((v.size() - 1) / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// Between calls (the previous call's capture to this call's inputs) the worker answers, reads the next request and
// arms: kwb's own protocol work, the same for every implementation. Its median over a worker's calls is bounded, not
// charged (charging it would add tens of microseconds of protocol to every call of a 5 us kernel). No data of the
// next call is there yet, so the bound only has to catch gross misuse (a thread that never stops), and it must not
// reject an honest worker on a loaded host: the task clock counts the time the host takes a vCPU away from a
// running worker (steal), and with two validates on a 2-vCPU VM an honest baseline's median reached 1.02 ms (75-180
// us when quiet, bench/run_handshake.sh). 10 ms leaves that noise a tenfold margin.
inline constexpr int64_t k_gap_cpu_median_bound_ns = 10'000'000;

// Device backends. Outside its window a device worker does kwb's own work on the call's data: it uploads the inputs
// and the outputs' poison before go, and reads the outputs back after done, before the parent captures them. That
// work is large next to a small kernel and noisy (PoCL: a median of 60 us of CPU and 160 us of wall time per decode
// call, with a tail past 250 us, against windows of 150 us), the same for both arms, and not charged: charged beyond
// the other arm's, it tripled the A/A interval on decode (docs/timing.md, "What a sample charges"). It is recorded
// (outside_cpu_ns, outside_wall_ns). What is charged is the CPU during the capture, when the worker sleeps.
inline int64_t device_charged_ns(int64_t window_ns, int64_t post_cpu_ns) {
  return window_ns + std::max<int64_t>(0, post_cpu_ns);
}

}  // namespace kwb::cpu_watch
