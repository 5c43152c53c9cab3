// The per-call bounds of the CPU watch (session/worker_session.h, outside_timer): how much CPU an honest worker may
// use outside the timed window of one call. Here, not in the session, because verify (record/verify.cpp) applies
// them again to the figures every timed call records in samples.csv (pre_cpu_ns, post_cpu_ns).
#pragma once

#include <cstdint>

namespace kwb::cpu_watch {

// Before go, beyond the parent's own reaction: only gross work is refused per call (a VM charges stolen time to a
// spinning worker; the median over a worker's calls is the finer bound, worker_session.h).
inline constexpr int64_t k_pre_cpu_bound_ns = 100'000'000;
// After done, while the outputs are captured and the worker only goes back to sleep.
inline constexpr int64_t k_post_cpu_bound_ns = 500'000;
// Calls of one worker beyond k_post_cpu_bound_ns that are forgiven (an interrupt, a lost vCPU); one more is work.
inline constexpr int k_post_cpu_excess_forgiven = 1;

}  // namespace kwb::cpu_watch
