#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace kwb {

// SHA-256 (OpenSSL libcrypto) as 64 lowercase hex digits.
std::string sha256_hex(std::span<const unsigned char> bytes);
std::string sha256_hex(std::string_view text);
std::string sha256_file(const std::filesystem::path& path);  // throws DataError naming the path when unreadable

// Incremental hashing for large or composite inputs.
class Sha256 {
public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;  // the EVP context is a single-owner resource
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const unsigned char> bytes);
  void update(std::string_view text);
  std::string hex_digest();

private:
  void* m_ctx;
};

}  // namespace kwb
