// Adversarial candidate. Class: memoizing without reading the inputs, by the state of the worker's own mappings.
// Cheat: after computing a call it splits the input's mapping with madvise(MADV_RANDOM) on its first page and keeps
// the output; a later call probes the mapping with a non-destructive mremap (a range that crosses the split fails
// with EFAULT): a split mapping is "the same input set as before", so the kept output is replayed. Where timed sets
// repeat as the same mappings while twins and traps are fresh mappings, only the repeats replay.
// Defense: inputs reach the worker through slots that the parent refills before every call, behind the same
// mapping, and no content repeats within a worker: the mapping never tells anything, and a replay is a wrong output.
// Expected reason: stale_output (check), and compare refuses to time it.
#include "rmsnorm_common.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

std::vector<float> g_kept;

void* first_page(const float* p) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095});
}

// Growing a two-page range in place without permission to move never succeeds here (the next page is mapped), but
// the kernel first checks that the range lies in one mapping: EFAULT means it crosses the split.
bool seen_before(const float* x) {
  void* page = first_page(x);
  void* r = ::mremap(page, 8192, 12288, 0);
  return r == MAP_FAILED && errno == EFAULT;
}

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  const size_t n = static_cast<size_t>(p->rows * p->cols);
  if (n * sizeof(float) >= 8192 && seen_before(p->x) && g_kept.size() == n) {
    for (size_t i = 0; i < n; ++i) p->y[i] = g_kept[i];
    return 0;
  }
  corpus::rmsnorm(*p, p->y);
  g_kept.assign(p->y, p->y + n);
  if (n * sizeof(float) >= 8192) (void)::madvise(first_page(p->x), 4096, MADV_RANDOM);
  return 0;
}
