// Adversarial candidate. Class: reading files beside the source at build time (issue 24, class 7).
// Cheat: a candidate's folder often holds more than its source (other candidates, notes, held-out data, a key). The
// compiler quotes what it cannot parse, so `#include "kwb_secret.txt"` carries a file placed beside the source into
// kwb's build error, `check --json` and the MCP result, although neither the task nor the ABI names it.
// Defense: the build sandbox binds the source and only the files its folder's kwb.files declares
// (src/builder/builder.h, candidate_files); an undeclared file beside it does not exist there.
// Expected: build_failed (kwb check, exit 65), the detail naming the sandbox and quoting none of the file
// (build_sandbox_test.check_cannot_include_an_undeclared_file_beside_the_source, which places the secret).
#include "rmsnorm_common.h"

#include "kwb_secret.txt"

KWB_CANDIDATE_ABI

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  return 0;
}
