#include "util/sha256.h"

#include "util/error.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <array>
#include <fstream>

namespace kwb {

Sha256::Sha256() : m_ctx(EVP_MD_CTX_new()) {
  if (m_ctx == nullptr || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(m_ctx), EVP_sha256(), nullptr) != 1) {
    throw InternalError("OpenSSL: cannot initialise SHA-256");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(m_ctx)); }

void Sha256::update(std::span<const unsigned char> bytes) {
  if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(m_ctx), bytes.data(), bytes.size()) != 1) {
    throw InternalError("OpenSSL: SHA-256 update failed");
  }
}

void Sha256::update(std::string_view text) {
  update(std::span(reinterpret_cast<const unsigned char*>(text.data()), text.size()));
}

std::string Sha256::hex_digest() {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(m_ctx), digest.data(), &length) != 1) {
    throw InternalError("OpenSSL: SHA-256 final failed");
  }
  std::string hex;
  hex.reserve(2 * static_cast<size_t>(length));
  for (unsigned int i = 0; i < length; ++i) {
    hex += fmt::format("{:02x}", digest[i]);
  }
  return hex;
}

std::string sha256_hex(std::span<const unsigned char> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex_digest();
}

std::string sha256_hex(std::string_view text) {
  Sha256 h;
  h.update(text);
  return h.hex_digest();
}

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError(fmt::format("{}: cannot be read (does it exist, and is it readable?)", path.string()));
  }
  Sha256 h;
  std::array<char, 1 << 16> buffer{};
  while (in) {
    in.read(buffer.data(), buffer.size());
    h.update(std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
  }
  return h.hex_digest();
}

}  // namespace kwb
