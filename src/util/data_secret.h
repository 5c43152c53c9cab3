// The secret that a run's timed and held-out data derive from (docs/timing.md, "Timed data from a secret").
//
// Timed inputs used to follow from a published seed, so a candidate could carry kwb's generator, build the pool's
// input sets itself and answer timed calls from a table. Every verb that times or re-checks now draws 32 bytes from
// the OS at run time; `--seed` chooses only what should be reproducible (block orders, layouts). The plan commits to
// the secret by hash before anything runs, and the bundle reveals it after the run, so that verify re-derives every
// nonce and a reviewer can show the data was not chosen after the fact.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace kwb {

class DataSecret {
public:
  static constexpr size_t k_bytes = 32;
  // 32 bytes from getrandom(2); throws InternalError when the OS gives none.
  static DataSecret draw();
  // The 64 hex digits hex() writes; empty when `hex` is anything else.
  static std::optional<DataSecret> from_hex(std::string_view hex);

  std::string hex() const;
  // The commitment a plan carries: SHA-256 of a domain tag and the secret, as 64 hex digits.
  std::string commitment() const;
  // The data nonce for one purpose ("timing", "final", "profile"): 64 bits of SHA-256 of the secret and the
  // purpose, never 0 (0 means the task's published seeds everywhere a nonce is taken).
  uint64_t nonce(std::string_view purpose) const;

private:
  std::array<unsigned char, k_bytes> m_bytes{};
};

// 64 bits of SHA-256 over a domain tag and a list of words (little-endian): a keyed derivation whose output, even
// when recovered from the data it seeds, says nothing about its inputs or about any other output.
uint64_t sha256_u64(std::string_view tag, std::initializer_list<uint64_t> words);

}  // namespace kwb
