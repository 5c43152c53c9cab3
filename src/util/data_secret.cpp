#include "util/data_secret.h"

#include "util/error.h"
#include "util/sha256.h"

#include <fmt/format.h>

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace kwb {

namespace {

constexpr std::string_view k_commitment_tag = "kwb.data_secret.commitment.v1";
constexpr std::string_view k_nonce_tag = "kwb.data_secret.nonce.v1";

uint64_t first_word(const std::string& hex_digest) {
  uint64_t v = 0;
  for (size_t i = 0; i < 16; ++i) {
    const char c = hex_digest[i];
    v = (v << 4) | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return v;
}

}  // namespace

DataSecret DataSecret::draw() {
  DataSecret s;
  size_t got = 0;
  while (got < k_bytes) {
    const ssize_t n = ::getrandom(s.m_bytes.data() + got, k_bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw InternalError(
          fmt::format("getrandom: {} (the data secret needs the OS's random source)", std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  return s;
}

std::optional<DataSecret> DataSecret::from_hex(std::string_view hex) {
  if (hex.size() != 2 * k_bytes) return std::nullopt;
  DataSecret s;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < k_bytes; ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    s.m_bytes[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return s;
}

std::string DataSecret::hex() const {
  std::string out;
  out.reserve(2 * k_bytes);
  for (unsigned char b : m_bytes) out += fmt::format("{:02x}", b);
  return out;
}

std::string DataSecret::commitment() const {
  Sha256 h;
  h.update(k_commitment_tag);
  h.update(std::string_view("\0", 1));
  h.update(m_bytes);
  return h.hex_digest();
}

uint64_t DataSecret::nonce(std::string_view purpose) const {
  Sha256 h;
  h.update(k_nonce_tag);
  h.update(std::string_view("\0", 1));
  h.update(m_bytes);
  h.update(purpose);
  const uint64_t v = first_word(h.hex_digest());
  return v == 0 ? 1 : v;
}

uint64_t sha256_u64(std::string_view tag, std::initializer_list<uint64_t> words) {
  Sha256 h;
  h.update(tag);
  h.update(std::string_view("\0", 1));
  for (uint64_t w : words) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(w >> (8 * i));
    h.update(bytes);
  }
  return first_word(h.hex_digest());
}

}  // namespace kwb
