// Adversarial candidate. Class: ending the timed window early from inside the worker (the "rewrite the worker's
// clock sample" and "hijack the worker's objects" attacks, aimed at what the timer depends on now).
// Cheat: the worker keeps a pointer to the control page it shares with the parent on its own stack; the candidate
// scans the stack above its frame for it (probing each pointer with write(2), which fails with EFAULT instead of
// faulting), finds the word that says go, writes done into it before computing anything, and only then computes,
// so the parent's clock stops before the work starts.
// Defense: the parent reads the worker's exact CPU clock (perf task-clock) around the capture of the outputs after
// done: the work shows up there, and the outputs captured at done change afterwards.
// Expected reason: work_outside_timer or work_after_return (compare: INVALID, or REFUSED by the pre-timing check).
#include "rmsnorm_common.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

KWB_CANDIDATE_ABI

namespace {

// A readable 4-byte word at p, without risking a fault: write(2) to stdout copies from it or fails with EFAULT.
bool readable(const void* p) { return ::write(1, p, 0) == 0 && ::write(1, p, 1) == 1; }

// The phase nibble of the control word during kwb_run is go (4); the sequence number above it is small.
std::atomic<uint32_t>* find_control_word() {
  auto* sp = static_cast<uintptr_t*>(__builtin_frame_address(0));
  for (int i = 0; i < 4096; ++i) {
    const uintptr_t v = sp[i];
    if (v == 0 || (v & 0xFFF) != 0 || !readable(reinterpret_cast<void*>(v))) continue;
    const uint32_t w = *reinterpret_cast<const uint32_t*>(v);
    if ((w & 0xF) == 4 && (w >> 4) > 0 && (w >> 4) < 1000000) return reinterpret_cast<std::atomic<uint32_t>*>(v);
  }
  return nullptr;
}

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  if (std::atomic<uint32_t>* word = find_control_word()) {
    const uint32_t go = word->load();
    word->store((go & ~0xFu) | 5u);  // done, before any work
  }
  corpus::rmsnorm(*p, p->y);
  return 0;
}
