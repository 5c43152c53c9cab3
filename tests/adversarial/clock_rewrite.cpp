// Adversarial candidate. Class: rewriting the worker's clock sample.
// Cheat: the six-pass baseline's work, then a scan of the stack above its frame for anything that looks like a
// CLOCK_MONOTONIC reading taken in the last second (a timespec, or nanoseconds in one word) and moves it forward by
// the call's own duration, so a timer that read the clock before the call would compute a near-zero time.
// Defense: the worker takes no time at all; both timestamps are read by the parent (worker/protocol.h), so there is
// nothing in the worker to rewrite and the candidate is timed as what it is, the baseline's work.
// Expected: never faster than the baseline (compare with a 10% bar: not PASS).
#include "rmsnorm_common.h"

#include <time.h>
#include <unistd.h>

#include <cstdint>

KWB_CANDIDATE_ABI

namespace {

bool readable(const void* p) { return ::write(1, p, 0) == 0 && ::write(1, p, 1) == 1; }

int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void push_clock_samples_forward(int64_t by_ns) {
  const int64_t now = now_ns();
  auto* sp = static_cast<int64_t*>(__builtin_frame_address(0));
  for (int i = 0; i + 1 < 4096; ++i) {
    if (!readable(&sp[i + 1])) break;
    const int64_t sec = sp[i];
    const int64_t nsec = sp[i + 1];
    if (sec == now / 1'000'000'000 && nsec >= 0 && nsec < 1'000'000'000) {  // a timespec of this second
      sp[i + 1] = nsec + by_ns < 1'000'000'000 ? nsec + by_ns : nsec;
    } else if (sec > now - 1'000'000'000 && sec <= now) {  // nanoseconds in one word
      sp[i] = sec + by_ns;
    }
  }
}

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  const int64_t t0 = now_ns();
  // The baseline's six passes: squares, row sums, means, rms, scale, weight.
  for (int pass = 0; pass < 3; ++pass) corpus::rmsnorm(*p, p->y);
  push_clock_samples_forward(now_ns() - t0);
  return 0;
}
