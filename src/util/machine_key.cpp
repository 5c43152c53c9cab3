#include "util/machine_key.h"

#include "util/error.h"
#include "util/fd.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace kwb {

namespace fs = std::filesystem;

namespace {

constexpr size_t k_key_bytes = 32;
constexpr size_t k_signature_bytes = 64;

EVP_PKEY* pkey_of(void* p) { return static_cast<EVP_PKEY*>(p); }

std::string to_hex(const unsigned char* bytes, size_t n) {
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", bytes[i]);
  return out;
}

// The bytes of exactly `n` lowercase or uppercase hex pairs; nullopt for anything else.
std::optional<std::vector<unsigned char>> from_hex(std::string_view hex, size_t n) {
  if (hex.size() != 2 * n) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<unsigned char> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return out;
}

// Why `st` (an lstat of the key folder or a key file) is not safe to hold a private key; "" when it is.
std::string unsafe(const struct stat& st, bool directory) {
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return directory ? "is not a folder (a symlink or a file)" : "is not a regular file (a symlink or a folder)";
  }
  if (st.st_uid != ::geteuid())
    return fmt::format("belongs to uid {}, not to this user (uid {})", st.st_uid, ::geteuid());
  if ((st.st_mode & 077) != 0) {
    return fmt::format("is open to group or others (mode {:04o}); a worker could read it", st.st_mode & 07777);
  }
  return "";
}

void require_safe_dir(const fs::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    throw Error(ExitCode::io_error, fmt::format("key folder {}: {} (set KWB_KEY_DIR to a folder kwb may create)",
                                                dir.string(), std::strerror(errno)));
  }
  if (const std::string why = unsafe(st, true); !why.empty()) {
    throw Error(ExitCode::io_error, fmt::format("key folder {} {}: chmod 700 it and own it, or set KWB_KEY_DIR to "
                                                "another folder",
                                                dir.string(), why));
  }
}

// Writes the new key's PEM beside `path` and links it in, so that two kwb processes creating the key at once agree
// on one: the loser's link fails with EEXIST and it reads the winner's.
void install_private_key(const SigningKey& key, const fs::path& path) {
  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) {
    throw_system_error("getrandom", __FILE__, __LINE__, errno);
  }
  const fs::path tmp = path.string() + fmt::format(".tmp.{:016x}", nonce);
  const std::string pem = key.private_pem();
  {
    UniqueFd fd(KWB_POSIX_CALL(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)));
    size_t done = 0;
    while (done < pem.size()) {
      const ssize_t n = KWB_POSIX_CALL(::write(fd.get(), pem.data() + done, pem.size() - done));
      done += static_cast<size_t>(n);
    }
    KWB_POSIX_CALL(::fsync(fd.get()));
  }
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && err != EEXIST) throw_system_error("link(machine.key)", __FILE__, __LINE__, err);
}

}  // namespace

fs::path key_dir() {
  if (const char* env = std::getenv("KWB_KEY_DIR"); env != nullptr && *env != '\0') return env;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg != '\0') {
    return fs::path(xdg) / "kwb" / "keys";
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    throw Error(ExitCode::io_error,
                "no key folder: HOME is not set (set KWB_KEY_DIR to a folder for kwb's machine key)");
  }
  return fs::path(home) / ".config" / "kwb" / "keys";
}

SigningKey SigningKey::generate() {
  EVP_PKEY* p = nullptr;
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  const bool ok = ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_keygen(ctx, &p) == 1;
  EVP_PKEY_CTX_free(ctx);
  if (!ok) throw InternalError("OpenSSL: cannot generate an Ed25519 key");
  return SigningKey(p);
}

SigningKey SigningKey::load(const fs::path& pem) {
  struct stat st {};
  UniqueFd fd(::open(pem.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    throw Error(ExitCode::io_error, fmt::format("machine key {}: {}", pem.string(), std::strerror(errno)));
  }
  if (const std::string why = unsafe(st, false); !why.empty()) {
    throw Error(ExitCode::io_error,
                fmt::format("machine key {} {}: chmod 600 it (or remove it: kwb makes a new one)", pem.string(), why));
  }
  std::string text(static_cast<size_t>(std::min<off_t>(st.st_size, off_t{64} * 1024)), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = KWB_POSIX_CALL(::read(fd.get(), text.data() + done, text.size() - done));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  BIO* bio = BIO_new_mem_buf(text.data(), static_cast<int>(text.size()));
  EVP_PKEY* p = bio != nullptr ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(bio);
  if (p == nullptr || EVP_PKEY_get_id(p) != EVP_PKEY_ED25519) {
    EVP_PKEY_free(p);
    throw Error(ExitCode::io_error, fmt::format("machine key {}: not a PEM Ed25519 private key (remove it: kwb makes "
                                                "a new one, and bundles signed with the old one are no longer "
                                                "authentic here)",
                                                pem.string()));
  }
  return SigningKey(p);
}

SigningKey::SigningKey(SigningKey&& other) noexcept : m_pkey(std::exchange(other.m_pkey, nullptr)) {}

SigningKey& SigningKey::operator=(SigningKey&& other) noexcept {
  if (this != &other) {
    EVP_PKEY_free(pkey_of(m_pkey));
    m_pkey = std::exchange(other.m_pkey, nullptr);
  }
  return *this;
}

SigningKey::~SigningKey() { EVP_PKEY_free(pkey_of(m_pkey)); }

PublicKeyHex SigningKey::public_key() const {
  unsigned char raw[k_key_bytes];
  size_t n = sizeof raw;
  if (EVP_PKEY_get_raw_public_key(pkey_of(m_pkey), raw, &n) != 1 || n != k_key_bytes) {
    throw InternalError("OpenSSL: cannot read the Ed25519 public key");
  }
  return to_hex(raw, n);
}

std::string SigningKey::sign(std::string_view message) const {
  unsigned char sig[k_signature_bytes];
  size_t n = sizeof sig;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      ctx != nullptr && EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, pkey_of(m_pkey)) == 1 &&
      EVP_DigestSign(ctx, sig, &n, reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok || n != k_signature_bytes) throw InternalError("OpenSSL: Ed25519 signing failed");
  return to_hex(sig, n);
}

std::string SigningKey::private_pem() const {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr || PEM_write_bio_PrivateKey(bio, pkey_of(m_pkey), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    BIO_free(bio);
    throw InternalError("OpenSSL: cannot encode the Ed25519 private key");
  }
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(len));
  BIO_free(bio);
  return out;
}

bool verify_signature(const PublicKeyHex& public_key, std::string_view message, const std::string& signature_hex) {
  const std::optional<std::vector<unsigned char>> key = from_hex(public_key, k_key_bytes);
  const std::optional<std::vector<unsigned char>> sig = from_hex(signature_hex, k_signature_bytes);
  if (!key || !sig) return false;
  EVP_PKEY* p = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, key->data(), key->size());
  if (p == nullptr) return false;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok = ctx != nullptr && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, p) == 1 &&
                  EVP_DigestVerify(ctx, sig->data(), sig->size(),
                                   reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(p);
  return ok;
}

SigningKey machine_key() {
  const fs::path dir = key_dir();
  std::error_code ec;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw Error(ExitCode::io_error, fmt::format("key folder {}: cannot create it: {} (set KWB_KEY_DIR to a folder "
                                                "kwb may create)",
                                                dir.string(), std::strerror(errno)));
  }
  require_safe_dir(dir);
  const fs::path key_file = dir / "machine.key";
  if (::access(key_file.c_str(), F_OK) != 0) install_private_key(SigningKey::generate(), key_file);
  SigningKey key = SigningKey::load(key_file);
  const fs::path pub = dir / "machine.pub";
  const std::string pub_text = key.public_key() + "\n";
  std::error_code read_ec;
  if (!fs::is_regular_file(pub, read_ec) || read_file(pub) != pub_text) write_file_atomic(pub, pub_text);
  return key;
}

bool TrustedKeys::trusts(const PublicKeyHex& key) const {
  return (own && *own == key) || std::find(others.begin(), others.end(), key) != others.end();
}

TrustedKeys trusted_keys() {
  TrustedKeys t;
  fs::path dir;
  try {
    dir = key_dir();
  } catch (const Error& e) {
    t.skipped.push_back(e.what());
    return t;
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return t;  // no key folder yet: nothing is trusted
  if (const std::string why = unsafe(st, true); !why.empty()) {
    t.skipped.push_back(fmt::format("{} {}: no key in it is trusted", dir.string(), why));
    return t;
  }
  const fs::path key_file = dir / "machine.key";
  if (::access(key_file.c_str(), F_OK) == 0) {
    try {
      t.own = SigningKey::load(key_file).public_key();
    } catch (const Error& e) {
      t.skipped.push_back(e.what());
    }
  }
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir / "trusted", ec)) {
    if (e.path().extension() != ".pub") continue;
    std::string text;
    try {
      text = e.is_regular_file() && e.file_size() < 4096 ? read_file(e.path()) : "";
    } catch (const std::exception&) {
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (from_hex(text, k_key_bytes)) {
      t.others.push_back(text);
      t.files.push_back(e.path());
    } else {
      t.skipped.push_back(
          fmt::format("{}: not a public key (64 hex digits, as in another machine's machine.pub)", e.path().string()));
    }
  }
  return t;
}

fs::path trust_key(const std::string& given, const std::string& name) {
  std::string key = given;
  while (!key.empty() && (key.back() == '\n' || key.back() == ' ' || key.back() == '\r')) key.pop_back();
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!from_hex(key, k_key_bytes)) {
    throw DataError(
        fmt::format("'{}' is not a public key: give 64 hex digits, the text of the node's machine.pub "
                    "(kwb doctor on the node prints it)",
                    given.substr(0, 80)));
  }
  if (name.empty() || name.size() > 64 || name.front() == '.' ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
          std::string::npos) {
    throw DataError(
        fmt::format("'{}' is not a name for a trusted key: use letters, digits, '-', '_' and '.', such as "
                    "the node's name",
                    name));
  }
  const fs::path dir = key_dir();
  std::error_code ec;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw Error(ExitCode::io_error,
                fmt::format("key folder {}: cannot create it: {}", dir.string(), std::strerror(errno)));
  }
  require_safe_dir(dir);
  const fs::path trusted = dir / "trusted";
  if (::mkdir(trusted.c_str(), 0700) != 0 && errno != EEXIST) {
    throw Error(ExitCode::io_error, fmt::format("{}: cannot create it: {}", trusted.string(), std::strerror(errno)));
  }
  fs::path file = trusted / (name + ".pub");
  write_file_atomic(file, key + "\n");
  return file;
}

}  // namespace kwb
