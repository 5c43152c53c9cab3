// Adversarial candidate. Class: speed that changes as the process ages (issue 39, item 2; a cache that fills, a
// structure that grows, a leak, or code fast only while it is young).
// Cheat: correct on every call, but fast only for its first 64 calls in a process; after that each call does its
// work 30 times over. A comparison whose visits are all shorter than 64 calls (compare --samples 20 gives visits of
// about 50) times only its youth and reads it fast.
// Defense: every 4th block gives both arms long visits (3x the timed calls, timed from start to end), and each
// arm's late timed calls are compared with its early ones, relative to the other arm's (stats/aging.h); an arm that
// ages makes the comparison INVALID, with no metric.
// Expected: compare INVALID (reason: "speed changes as its process ages"); its control aging_control.cpp, the same
// kernel always fast, reads its true figure (a verdict with a metric; faster than the six-pass baseline on some
// machines, slower on others).
#include "rmsnorm_common.h"

KWB_CANDIDATE_ABI

namespace {

#ifndef KWB_AGING_YOUNG_CALLS
#define KWB_AGING_YOUNG_CALLS 64
#endif
long g_calls = 0;

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<corpus::Rmsnorm> p = corpus::unpack(*call);
  if (!p) return 1;
  const int repeats = ++g_calls <= KWB_AGING_YOUNG_CALLS ? 1 : 30;
  for (int i = 0; i < repeats; ++i) corpus::rmsnorm(*p, p->y);
  return 0;
}
