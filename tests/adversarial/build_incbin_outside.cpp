// Adversarial candidate. Class: reading files at build time (issue 11, class 6).
// Cheat: the assembler's .incbin embeds any file the compiler can read (here /etc/passwd; as root, /etc/shadow)
// into the shared object; the kernel then prints it to stderr and fails, so the file's contents land in the failure
// detail that `check --json` and bundles carry.
// Defense: the compiler and assembler run in the build sandbox (src/builder/build_sandbox.h), which can read only
// the toolchain, the system headers, kwb's include folder and the candidate's own folder.
// Expected: build_failed (kwb check, exit 65), the detail naming the sandbox.
#include "rmsnorm_common.h"

#include <cstdio>

__asm__(".pushsection .rodata\n"
        ".global kwb_leaked_file\n"
        "kwb_leaked_file:\n"
        ".incbin \"/etc/passwd\"\n"
        ".byte 0\n"
        ".popsection\n");
extern "C" const char kwb_leaked_file[];

KWB_CANDIDATE_ABI

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  std::fputs(kwb_leaked_file, stderr);
  corpus::rmsnorm(*p, p->y);
  return 1;
}
