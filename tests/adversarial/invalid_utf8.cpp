// Adversarial candidate. Class: bytes kwb must carry as text.
// Cheat: computes RMSNorm, then prints bytes that are not UTF-8 (and a terminal escape) to stdout and stderr and
// aborts. The worker's output tail goes into the failure's detail; JSON cannot hold those bytes, and kwb used to
// stop with an internal error (exit 70) while writing the check report, and validate lost the candidate's check.
// Defense: every JSON kwb writes replaces invalid bytes (U+FFFD); human output shows control bytes as \xNN.
// Expected reason: crash (exit 1, never 70), with a check report that parses.
#include "rmsnorm_common.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

KWB_CANDIDATE_ABI

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  static const char bytes[] = "\xff\xfe\xc3\x28 not utf-8 \x1b]0;owned\x07\x1b[2J\r\n";
  (void)!::write(1, bytes, sizeof bytes - 1);
  (void)!::write(2, bytes, sizeof bytes - 1);
  std::abort();
}
