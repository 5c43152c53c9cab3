// Cold mode on the cpu backend, done by the parent: before each timed call, every cache line of the call's tensors
// is flushed (clflush reaches every core's caches for the physical line, so the worker's view of the same memfd is
// evicted too), then a buffer of twice the last-level cache is written to push out whatever else the call would
// find warm. It runs in the parent while the worker is asleep, so no candidate code can skip or shorten it
// (docs/threat-model.md, docs/timing.md).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace kwb {

class ColdFlush {
public:
  // The process's one eviction buffer, made on first use. A worker session lives for one visit, and allocating and
  // faulting in twice the last-level cache for every visit cost more than the visit's calls.
  static ColdFlush& shared();

  ColdFlush();
  // Flushes each range's lines, then evicts the last-level cache.
  void flush(const std::vector<std::span<const unsigned char>>& ranges);

private:
  std::vector<unsigned char> m_evict;
  unsigned char m_value = 0;
};

}  // namespace kwb
