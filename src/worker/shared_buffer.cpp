#include "worker/shared_buffer.h"

#include "util/error.h"
#include "util/seed.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
    : m_layout(other.m_layout),
      m_fd(std::move(other.m_fd)),
      m_map(std::exchange(other.m_map, nullptr)),
      m_sealed(other.m_sealed),
      m_sealed_for_others(other.m_sealed_for_others) {}

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
  // F_SEAL_WRITE waits (about 150 ms) for pages something else holds a reference to and then fails with EBUSY: a
  // transient state of the kernel's memory management (seen once in a long opencl comparison on a 6.18 kernel, the
  // buffer freshly written by this process alone). Asked again, it succeeds once the reference is gone.
  constexpr int k_attempts = 10;
  for (int attempt = 1;; ++attempt) {
    if (::fcntl(m_fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) == 0) break;
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EBUSY || attempt == k_attempts) {
      throw_system_error("fcntl(F_ADD_SEALS) of a shared buffer", __FILE__, __LINE__, err);
    }
    ::usleep(20'000);
  }
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
// Byte `offset` of the canaries: byte offset % 8 of one 64-bit hash per 8 bytes, cheap and unpredictable without the
// seed. `each(offset, byte)` is called for every offset in [from, to), one hash per 8 bytes.
template <typename F>
void for_canary_bytes(uint64_t seed, size_t from, size_t to, F each) {
  size_t i = from;
  while (i < to) {
    const uint64_t word = mix_seed(seed, i / 8);
    const size_t end = std::min(to, (i / 8 + 1) * 8);
    for (; i < end; ++i) {
      if (!each(i, static_cast<unsigned char>(word >> (8 * (i % 8))))) return;
    }
  }
}
}  // namespace

void SharedBuffer::write_canaries(uint64_t seed) {
  if (m_sealed) throw InternalError("SharedBuffer: canaries on a sealed buffer");
  auto w = whole();
  auto put = [&](size_t i, unsigned char byte) {
    w[i] = byte;
    return true;
  };
  for_canary_bytes(seed, 0, m_layout.data_offset, put);
  for_canary_bytes(seed, m_layout.data_offset + m_layout.nbytes, m_layout.total, put);
}

std::optional<size_t> SharedBuffer::damaged_canary(uint64_t seed) const {
  auto w = whole();
  std::optional<size_t> damaged;
  auto same = [&](size_t i, unsigned char byte) {
    if (w[i] == byte) return true;
    damaged = i;
    return false;
  };
  for_canary_bytes(seed, 0, m_layout.data_offset, same);
  if (!damaged) for_canary_bytes(seed, m_layout.data_offset + m_layout.nbytes, m_layout.total, same);
  return damaged;
}

void SharedBuffer::fill_pattern(uint64_t pattern, size_t width) {
  if (width != 1 && width != 2 && width != 4 && width != 8) {
    throw std::invalid_argument("SharedBuffer::fill_pattern: width must be 1, 2, 4 or 8 bytes");
  }
  auto d = data();
  // One 64-byte line of the pattern at its width (little-endian, its low `width` bytes), then copies of what is
  // written, doubling: memcpy's vector stores do the bulk (a prefill output's MiB every call).
  unsigned char line[64];
  for (size_t i = 0; i < sizeof line; i += width) std::memcpy(line + i, &pattern, width);
  const size_t whole = d.size() - d.size() % width;  // a partial trailing element stays as it is
  size_t done = std::min(whole, sizeof line);
  std::memcpy(d.data(), line, done);
  while (done < whole) {
    const size_t n = std::min(done, whole - done);
    std::memcpy(d.data() + done, d.data(), n);
    done += n;
  }
}

}  // namespace kwb
