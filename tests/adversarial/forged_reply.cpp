// Adversarial candidate. Class: forged protocol messages.
// Cheat: writes messages of its own onto the worker's socket (fd 3): from its constructor a `mapped` answer with no
// buffers (the parent used to take the worker's real answer to the next request for it and stop with an internal
// error, exit 70), and from kwb_run a `ran` answer in the middle of the call.
// Defense: every message from the worker is checked against the request it answers; anything else is the
// candidate's `protocol` failure, with the message as evidence, never kwb's internal error.
// Expected reason: protocol (exit 1, never 70).
#include "rmsnorm_common.h"

#include <sys/socket.h>

#include <cstring>

KWB_CANDIDATE_ABI

namespace {

void say(const char* json) { (void)!::send(3, json, std::strlen(json), MSG_NOSIGNAL); }

__attribute__((constructor)) void forge_early() { say(R"({"type":"mapped","buffers":[{"id":"?"}]})"); }

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  say(R"({"type":"ran","call":"one","descriptors_intact":"yes"})");
  return 0;
}
