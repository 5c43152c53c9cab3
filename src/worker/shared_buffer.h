// Parent side of a tensor buffer: a memfd laid out per BufferLayout, mapped here read-write (outputs) or sealed
// read-only (inputs). Sealing (F_SEAL_WRITE) means no process, the worker included, can map an input writable;
// sealing for others (F_SEAL_FUTURE_WRITE) keeps the parent's own writable view (input slots).
#pragma once

#include "util/fd.h"
#include "worker/buffer_layout.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace kwb {

class SharedBuffer {
public:
  SharedBuffer(const std::string& name, size_t nbytes, size_t page_offset = 0);
  ~SharedBuffer();
  SharedBuffer(const SharedBuffer&) = delete;  // owns a mapping and a descriptor
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&&) = delete;

  const BufferLayout& layout() const { return m_layout; }
  int fd() const { return m_fd.get(); }
  bool sealed() const { return m_sealed; }

  std::span<unsigned char> data();  // throws once sealed
  std::span<const unsigned char> data() const;

  // Makes the buffer immutable for everyone: unmaps the writable view, adds write/grow/shrink seals, maps it
  // again read-only.
  void seal();
  // Makes the buffer read-only for every other process, keeping this process's writable view (F_SEAL_FUTURE_WRITE):
  // an input slot the parent refills before each call and the worker can only map read-only, and never mprotect
  // writable.
  void seal_for_others();
  // True when no other process may write the buffer (seal() or seal_for_others()).
  bool read_only_for_others() const { return m_sealed || m_sealed_for_others; }

  // Canaries: bytes around the data, derived from `seed`. Returns the offset (from the memfd start) of the first
  // changed canary byte, if any.
  void write_canaries(uint64_t seed);
  std::optional<size_t> damaged_canary(uint64_t seed) const;

  // Fills every element with a pattern of `width` bytes (1, 2, 4 or 8): the low bytes of `pattern`.
  void fill_pattern(uint64_t pattern, size_t width);

private:
  std::span<unsigned char> whole();
  std::span<const unsigned char> whole() const;

  BufferLayout m_layout;
  UniqueFd m_fd;
  unsigned char* m_map = nullptr;
  bool m_sealed = false;
  bool m_sealed_for_others = false;
};

}  // namespace kwb
