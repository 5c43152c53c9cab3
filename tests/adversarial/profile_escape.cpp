// Adversarial candidate. Class: escape through the profile worker.
// Cheat: honest wherever files cannot be opened (the timing worker, under Landlock), so it passes every check; where
// /proc/self/maps can be opened (the profile worker under valgrind, which used to run with no sandbox), its
// constructor forks a daemon in a session of its own that outlives the worker and leaves a marker file with the
// user it ran as (it would then read any file, or ptrace the baseline's timing workers to slow them).
// Defense: every process that loads candidate code is sandboxed; the profile worker gets a deny-list (no fork,
// no setsid, no ptrace, no signals to others; EPERM) and runs as nobody when kwb is root.
// Expected: profile (and validate's profile stage, the same code in the same worker) completes; no marker file
// exists afterwards; no process of it survives.
#include "rmsnorm_common.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

KWB_CANDIDATE_ABI

namespace {

__attribute__((constructor)) void escape() {
  const int maps = ::open("/proc/self/maps", O_RDONLY);
  if (maps < 0) return;  // the timing worker: behave
  ::close(maps);
  const pid_t child = ::fork();
  if (child != 0) return;
  ::setsid();
  if (FILE* f = std::fopen("/tmp/kwb-profile-escape", "w")) {
    std::fprintf(f, "escaped as uid %d\n", static_cast<int>(::getuid()));
    std::fclose(f);
  }
  ::sleep(30);
  ::_exit(0);
}

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  return 0;
}
