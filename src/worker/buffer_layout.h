// Where tensor data sits inside a shared buffer, agreed by parent and worker.
//
//   [guard page, PROT_NONE] [head canary .. | data (page aligned) | .. tail canary] [guard page, PROT_NONE]
//                           ^ the memfd, `total` bytes
//
// The guards exist only in the worker's address space; the canaries live in the memfd, so the parent sees a
// stray write that stays within the memfd, and the worker faults on one that leaves it.
#pragma once

#include <cstddef>

namespace kwb {

inline constexpr size_t k_page = 4096;
inline constexpr size_t k_min_tail_canary = 256;

struct BufferLayout {
  size_t data_offset = 0;  // from the start of the memfd
  size_t nbytes = 0;
  size_t total = 0;  // memfd size, a multiple of k_page

  // `page_offset` (below k_page) moves the data within its first page: layout randomization (stats/layout.h).
  static BufferLayout for_bytes(size_t nbytes, size_t page_offset = 0) {
    BufferLayout l;
    l.data_offset = k_page + page_offset % k_page;
    l.nbytes = nbytes;
    size_t end = l.data_offset + nbytes + k_min_tail_canary;
    l.total = (end + k_page - 1) / k_page * k_page;
    return l;
  }
};

}  // namespace kwb
