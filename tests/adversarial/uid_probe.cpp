// Adversarial candidate (a probe). Class: privileges inside the worker.
// It is an honest RMSNorm that fails the call (returns 3) whenever it runs as root, real or effective: run as root,
// kwb must pass it in every worker that loads candidate code (check, compare, profile), which shows that every
// worker runs as an unprivileged user.
#include "rmsnorm_common.h"

#include <unistd.h>

KWB_CANDIDATE_ABI

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  if (::getuid() == 0 || ::geteuid() == 0) return 3;
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  return 0;
}
