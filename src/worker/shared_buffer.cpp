#include "worker/shared_buffer.h"

#include "util/seed.h"
#include "util/error.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <cstring>
#include <stdexcept>
#include <utility>

namespace kwb {

SharedBuffer::SharedBuffer(const std::string& name, size_t nbytes, size_t page_offset)
    : m_layout(BufferLayout::for_bytes(nbytes, page_offset)) {
  m_fd = UniqueFd(KWB_POSIX_CALL(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  KWB_POSIX_CALL(::ftruncate(m_fd.get(), static_cast<off_t>(m_layout.total)));
  void* p = ::mmap(nullptr, m_layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, m_fd.get(), 0);
  if (p == MAP_FAILED) throw_system_error("mmap(shared buffer)", __FILE__, __LINE__, errno);
  m_map = static_cast<unsigned char*>(p);
}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : m_layout(other.m_layout), m_fd(std::move(other.m_fd)), m_map(std::exchange(other.m_map, nullptr)),
      m_sealed(other.m_sealed), m_sealed_for_others(other.m_sealed_for_others) {}

SharedBuffer::~SharedBuffer() {
  if (m_map != nullptr) ::munmap(m_map, m_layout.total);
}

std::span<unsigned char> SharedBuffer::whole() { return {m_map, m_layout.total}; }
std::span<const unsigned char> SharedBuffer::whole() const { return {m_map, m_layout.total}; }

std::span<unsigned char> SharedBuffer::data() {
  if (m_sealed) throw InternalError("SharedBuffer: write access to a sealed buffer");
  return whole().subspan(m_layout.data_offset, m_layout.nbytes);
}

std::span<const unsigned char> SharedBuffer::data() const {
  return whole().subspan(m_layout.data_offset, m_layout.nbytes);
}

void SharedBuffer::seal() {
  if (m_sealed) return;
  KWB_POSIX_CALL(::munmap(m_map, m_layout.total));
  m_map = nullptr;
  KWB_POSIX_CALL(::fcntl(m_fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL));
  void* p = ::mmap(nullptr, m_layout.total, PROT_READ, MAP_SHARED, m_fd.get(), 0);
  if (p == MAP_FAILED) throw_system_error("mmap(sealed buffer)", __FILE__, __LINE__, errno);
  m_map = static_cast<unsigned char*>(p);
  m_sealed = true;
}

void SharedBuffer::seal_for_others() {
  if (m_sealed || m_sealed_for_others) return;
  KWB_POSIX_CALL(::fcntl(m_fd.get(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL));
  m_sealed_for_others = true;
}

namespace {
unsigned char canary_byte(uint64_t seed, size_t offset) {
  // One 64-bit hash per 8 bytes: cheap, and unpredictable without the seed.
  uint64_t word = mix_seed(seed, offset / 8);
  return static_cast<unsigned char>(word >> (8 * (offset % 8)));
}
}  // namespace

void SharedBuffer::write_canaries(uint64_t seed) {
  if (m_sealed) throw InternalError("SharedBuffer: canaries on a sealed buffer");
  auto w = whole();
  const size_t data_end = m_layout.data_offset + m_layout.nbytes;
  for (size_t i = 0; i < m_layout.data_offset; ++i) w[i] = canary_byte(seed, i);
  for (size_t i = data_end; i < m_layout.total; ++i) w[i] = canary_byte(seed, i);
}

std::optional<size_t> SharedBuffer::damaged_canary(uint64_t seed) const {
  auto w = whole();
  const size_t data_end = m_layout.data_offset + m_layout.nbytes;
  for (size_t i = 0; i < m_layout.data_offset; ++i) {
    if (w[i] != canary_byte(seed, i)) return i;
  }
  for (size_t i = data_end; i < m_layout.total; ++i) {
    if (w[i] != canary_byte(seed, i)) return i;
  }
  return std::nullopt;
}

void SharedBuffer::fill_pattern(uint64_t pattern, size_t width) {
  auto d = data();
  if (width == 1) {
    std::memset(d.data(), static_cast<unsigned char>(pattern), d.size());
  } else if (width == 2) {
    const auto p16 = static_cast<uint16_t>(pattern);
    for (size_t i = 0; i + 2 <= d.size(); i += 2) std::memcpy(d.data() + i, &p16, 2);
  } else if (width == 4) {
    const auto p32 = static_cast<uint32_t>(pattern);
    for (size_t i = 0; i + 4 <= d.size(); i += 4) std::memcpy(d.data() + i, &p32, 4);
  } else if (width == 8) {
    for (size_t i = 0; i + 8 <= d.size(); i += 8) std::memcpy(d.data() + i, &pattern, 8);
  } else {
    throw std::invalid_argument("SharedBuffer::fill_pattern: width must be 1, 2, 4 or 8 bytes");
  }
}

}  // namespace kwb
