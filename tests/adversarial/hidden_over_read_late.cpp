// Adversarial candidate. Class: an over-read hidden from the fence, in timed calls only.
// Cheat: hidden_over_read.cpp's attack from its process's 100th call on (past what a check's worker runs: a candidate
// cannot know which calls count, this one bets on a count), and a page further out, 4 KiB past the end of x: timing
// places an input at its layout's offset, so the rest of its last page is readable there and only a read that leaves
// it meets the fence. Without the defense kwb check passed it and kwb compare timed it as honest (PASS, +7.5%).
// Defense: as hidden_over_read.cpp's.
// Expected: kwb check PASS (its calls stay under 100); kwb compare's timed call faults: out_of_bounds_read, naming x,
// and nothing is measured.
#include "hidden_over_read.h"

KWB_CANDIDATE_ABI

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) { return corpus::hidden_over_read(call, 100, 1024); }
