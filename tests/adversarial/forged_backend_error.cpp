// Adversarial candidate. Class: forged protocol messages.
// Cheat: from its constructor, which runs while the worker loads it, answers the parent's load request itself with
// the error the worker sends when the user's device selection names nothing (`backend_usage`). The parent used to
// take that for the user's mistake: `kwb check` exited 64 quoting the candidate's text, and validate's candidate
// check became a stage error, so the decision was INVALID instead of KEEP_BASELINE.
// Defense: the backend is opened, and a device selection checked, before any implementation is loaded (the probe,
// then the worker's load opens the backend before dlopen). So at load, a usage error, or on cpu any backend error,
// can only be the implementation's forgery: its `protocol` failure.
// Expected reason: protocol (exit 1, never 64 or 70).
#include "rmsnorm_common.h"

#include <sys/socket.h>

#include <cstring>

KWB_CANDIDATE_ABI

namespace {

__attribute__((constructor)) void forge_backend_error() {
  const char* json = R"({"type":"error","reason":"backend_usage","detail":"KWB_OPENCL_DEVICE=3: no such device"})";
  (void)!::send(3, json, std::strlen(json), MSG_NOSIGNAL);
}

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  return 0;
}
