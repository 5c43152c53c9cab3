// Shared by hidden_over_read.cpp and hidden_over_read_late.cpp: an honest RMSNorm that then reads past the end of its
// input x under a SIGSEGV/SIGBUS handler of its own that siglongjmps back, so that the fence's fault never reaches
// the worker and the call returns with every element of y right. The two files differ only in when and how far.
#pragma once

#include "rmsnorm_common.h"

#include <csetjmp>
#include <csignal>
#include <cstdint>

namespace corpus {

inline sigjmp_buf g_back;
inline void jump_back(int) { siglongjmp(g_back, 1); }

// From the process's `from_call`-th call on, reads 16 floats starting `past` floats after the end of x.
inline int hidden_over_read(const kwb_call* call, int from_call, int64_t past) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  rmsnorm(*p, p->y);
  static int calls = 0;
  if (++calls < from_call) return 0;
  struct sigaction sa {};
  sa.sa_handler = jump_back;
  ::sigaction(SIGSEGV, &sa, nullptr);
  ::sigaction(SIGBUS, &sa, nullptr);
  if (sigsetjmp(g_back, 1) == 0) {
    volatile float sink = 0.0f;
    for (int64_t k = 0; k < 16; ++k) sink = sink + p->x[p->rows * p->cols + past + k];
  }
  return 0;
}

}  // namespace corpus
