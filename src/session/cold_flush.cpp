#include "session/cold_flush.h"

#include <unistd.h>

#include <cstring>

namespace kwb {

namespace {
constexpr size_t k_line = 64;
}

ColdFlush& ColdFlush::shared() {
  static ColdFlush instance;
  return instance;
}

ColdFlush::ColdFlush() {
  long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  m_evict.resize(llc > 0 ? 2 * static_cast<size_t>(llc) : size_t{64} << 20);
}

void ColdFlush::flush(const std::vector<std::span<const unsigned char>>& ranges) {
  for (const auto& r : ranges) {
#if defined(__x86_64__) || defined(__i386__)
    for (size_t off = 0; off < r.size(); off += k_line) __builtin_ia32_clflush(r.data() + off);
    if (!r.empty()) __builtin_ia32_clflush(r.data() + r.size() - 1);
#else
    (void)r;  // no portable line flush: the eviction buffer below does the work alone
#endif
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_mfence();
#endif
  ++m_value;
  std::memset(m_evict.data(), m_value, m_evict.size());
  __asm__ volatile("" : : "r"(m_evict.data()) : "memory");  // the stores must happen
}

}  // namespace kwb
