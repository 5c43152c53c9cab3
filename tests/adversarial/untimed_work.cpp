// Adversarial candidate. Class: untimed calls as free time (issue 39, item 4).
// Cheat: kwb's visits used to follow a fixed pattern: two warm-ups, then a re-warm call and a timed call in turn, so
// the call index said which calls were timed. This kernel computes honestly on every call, and on every call it
// believes untimed (the first two, then every other one) does its work 30 times over: time kwb never measured, with
// no comment (the held-out round's candidate spent a median of 229 ms in each untimed call). Read against the
// baseline it was as fast as its honest kernel.
// Defense: each visit's warm-ups and re-warm calls are drawn from a secret, so its guesses land on timed calls too;
// and each arm's untimed calls are judged against its timed ones, relative to the other arm's
// (stats/outside_window.h, untimed_check): INVALID, untimed_work.
// Expected: compare never PASS (INVALID untimed_work, or FAIL where the guesses made its timed calls slow); its
// control aging_control.cpp, the same kernel without the extra work, reads its true figure (PASS).
#include "rmsnorm_common.h"

KWB_CANDIDATE_ABI

namespace {

long g_calls = 0;

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<corpus::Rmsnorm> p = corpus::unpack(*call);
  if (!p) return 1;
  const long index = g_calls++;
  const bool believed_untimed = index < 2 || (index - 2) % 2 == 0;
  const int repeats = believed_untimed ? 30 : 1;
  for (int i = 0; i < repeats; ++i) corpus::rmsnorm(*p, p->y);
  return 0;
}
