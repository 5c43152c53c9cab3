// The layout lottery: the very same naive gemm as data_prediction_control.cpp, with nothing changed but where its
// code lands. A pad of never-run code before the kernel moves every address of its loop, as an agent does that
// resubmits one kernel with trivial edits until a draw of layouts reads faster. The naive gemm's speed swings by a
// quarter with its layout (docs/timing.md, "The layout floor"), so a comparison that treats the builds' effects as
// block noise calls such a draw a gain. kwb counts the layouts' sampling error in the interval: never a PASS.
#define KWB_HONEST_ONLY

extern "C" __attribute__((used, noinline)) void kwb_layout_lottery_pad(void) {
  __asm__ volatile(".skip 1552, 0x90");
}

#include "data_prediction.cpp"
