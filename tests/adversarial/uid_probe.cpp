// Adversarial candidate (a probe). Class: privileges inside the worker, and workers sharing a user.
// It is an honest RMSNorm that fails the call (returns 3) unless it runs, real and effective, as the user of
// its own that a root kwb gives each worker: 2^31 - 2^24 plus its process id (util/worker_user.h), never root and
// never a user another live worker has. Run by a root kwb, it must pass in every worker that loads candidate code
// (check, compare, profile).
#include "rmsnorm_common.h"

#include <unistd.h>

KWB_CANDIDATE_ABI

namespace {

// Through the calls the timing worker's run filter allows (getresuid is not one of them).
bool own_user() {
  const uid_t expected = (1u << 31) - (1u << 24) + static_cast<uid_t>(::getpid());
  return ::getuid() == expected && ::geteuid() == expected && ::getgid() == expected && ::getegid() == expected;
}

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  if (!own_user()) return 3;
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  return 0;
}
