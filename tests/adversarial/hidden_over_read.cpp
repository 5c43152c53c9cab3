// Adversarial candidate. Class: an over-read hidden from the fence.
// Cheat: tests/candidates/read_past_input.cpp's read of the 16 floats past x, under a SIGSEGV/SIGBUS handler of its
// own, set inside kwb_run, that jumps back over the faulting read (hidden_over_read.h). Without a defense kwb check
// read PASS: the worker's fault handler, which reports out_of_bounds_read, had been replaced.
// Defense: the worker sets its fault handlers again as the run phase begins, and a seccomp filter of their own then
// makes setting an action for SIGSEGV, SIGBUS, SIGILL or SIGFPE fail with EPERM (worker/sandbox.cpp): the fault
// reaches the worker's handler.
// Expected reason: out_of_bounds_read, naming x (kwb check, cpu).
#include "hidden_over_read.h"

KWB_CANDIDATE_ABI

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) { return corpus::hidden_over_read(call, 1, 0); }
