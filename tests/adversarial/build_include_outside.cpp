// Adversarial candidate. Class: reading files at build time (issue 11, class 6).
// Cheat: the compiler runs before any worker sandbox, as the invoking user. `#include "/etc/passwd"` makes the
// compiler quote the file's lines in its error messages, which kwb carries into the build_failed detail of
// `check --json` and into bundles; with a file shaped like C it would be compiled in and printed at run time.
// Defense: the compiler runs in the build sandbox (src/builder/build_sandbox.h), which can read only the toolchain,
// the system headers, kwb's include folder and the candidate's own folder; /etc/passwd does not exist there.
// Expected: build_failed (kwb check, exit 65), the detail naming the sandbox and quoting none of the file.
#include "rmsnorm_common.h"

#include "/etc/passwd"

KWB_CANDIDATE_ABI

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  return 0;
}
