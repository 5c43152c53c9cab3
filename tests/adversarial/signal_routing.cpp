// Adversarial candidate. Class: a signal the sandbox missed.
// Cheat: in kwb_setup it asks the kernel to raise a signal in the worker whenever the protocol socket (fd 3) becomes
// readable (F_SETOWN, F_SETSIG, O_ASYNC): the handler then runs candidate code on every parent request, before any
// clock starts, and could compute the next output there.
// Defense: F_SETOWN, F_SETOWN_EX, F_SETSIG, F_SETFL with O_ASYNC, FIOASYNC, FIOSETOWN and SIOCSPGRP are denied in
// both sandbox phases.
// Expected reason: sandbox_violation naming fcntl.
#include "rmsnorm_common.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

KWB_CANDIDATE_ABI

namespace {
volatile sig_atomic_t g_signals = 0;
void on_io(int) { g_signals = g_signals + 1; }
}  // namespace

extern "C" KWB_EXPORT int kwb_setup(const kwb_context*) {
  struct sigaction sa {};
  sa.sa_handler = on_io;
  ::sigaction(SIGUSR1, &sa, nullptr);
  ::fcntl(3, F_SETOWN, ::getpid());
  ::fcntl(3, F_SETSIG, SIGUSR1);
  ::fcntl(3, F_SETFL, ::fcntl(3, F_GETFL) | O_ASYNC);
  return 0;
}

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  return 0;
}
