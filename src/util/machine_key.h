// The machine key: an Ed25519 key pair (OpenSSL libcrypto, EVP_PKEY_ED25519) with which kwb signs the bundles it
// writes, so that a bundle that travels to another machine can show who made it (docs/evidence-bundle.md,
// "Authenticity"). The private key never leaves its folder and no worker can read it:
//   - the folder is $KWB_KEY_DIR, else $XDG_CONFIG_HOME/kwb/keys, else $HOME/.config/kwb/keys; kwb creates it mode
//     0700 and refuses one that is a symlink, not its own, or open to group or others (a worker started by root runs
//     as another user, and a timing worker's Landlock opens nothing but its artifact);
//   - machine.key (PEM, PKCS#8, mode 0600) is created on first use; machine.pub holds its public key as 64 hex digits,
//     the form another machine's trusted/ folder takes;
//   - trusted/*.pub are the public keys of other machines whose bundles this one trusts (the user copies them in).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

// The key folder (see above); not created.
std::filesystem::path key_dir();

// A public key as 64 lowercase hex digits (the 32 raw bytes of an Ed25519 key).
using PublicKeyHex = std::string;

class SigningKey {
public:
  // A fresh key pair in memory (tests, and machine_key's first use).
  static SigningKey generate();
  // Reads a PEM private key; Error(io_error) naming the file when it is not an Ed25519 key or is open to others.
  static SigningKey load(const std::filesystem::path& pem);
  SigningKey(SigningKey&& other) noexcept;
  SigningKey& operator=(SigningKey&& other) noexcept;
  SigningKey(const SigningKey&) = delete;
  SigningKey& operator=(const SigningKey&) = delete;
  ~SigningKey();

  PublicKeyHex public_key() const;
  // The Ed25519 signature of `message`, as 128 hex digits.
  std::string sign(std::string_view message) const;
  // PEM (PKCS#8) text of the private key.
  std::string private_pem() const;

private:
  explicit SigningKey(void* pkey) : m_pkey(pkey) {}
  void* m_pkey = nullptr;  // EVP_PKEY*
};

// Whether `signature_hex` is a valid Ed25519 signature of `message` under `public_key`; false for malformed hex too.
bool verify_signature(const PublicKeyHex& public_key, std::string_view message, const std::string& signature_hex);

// This machine's key, from key_dir(), created (folder 0700, machine.key 0600, machine.pub) when missing.
// Error(io_error) naming the folder or file and the fix when the folder is unsafe or the key cannot be read or made.
SigningKey machine_key();

// The public keys this machine trusts: its own (when machine.key exists; never created here) and every
// trusted/*.pub. Files that are not a 64-hex-digit key are skipped and named in `skipped`.
struct TrustedKeys {
  std::optional<PublicKeyHex> own;
  std::vector<PublicKeyHex> others;
  std::vector<std::filesystem::path> files;  // the trusted/*.pub file of each of `others`, in the same order
  std::vector<std::string> skipped;
  bool trusts(const PublicKeyHex& key) const;
};
TrustedKeys trusted_keys();

// Enrols another machine's public key: `key` is 64 hex digits (a machine.pub's text), written to
// key_dir()/trusted/<name>.pub (the folder made 0700 when missing). `name`: letters, digits, '-', '_' and '.', as a
// node's name. Returns the file. DataError when the key is not one or the name is not safe; Error(io_error) when the
// key folder is unsafe or cannot be written.
std::filesystem::path trust_key(const std::string& key, const std::string& name);

}  // namespace kwb
