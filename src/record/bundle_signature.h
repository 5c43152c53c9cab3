// A bundle's signature (docs/evidence-bundle.md, "Authenticity"): signature.json, beside MANIFEST.sha256 and not
// listed in it (a signature cannot be inside what it signs). It holds the machine key's Ed25519 signature
// (util/machine_key.h) of the manifest's digest, the plan digest and the decision, with the public key, so that
// every byte of the bundle is bound to the machine that wrote it: a file changed after the run changes the
// manifest, and a manifest rewritten to match changes its digest, which only the machine key can sign again.
#pragma once

#include "util/machine_key.h"

#include <filesystem>
#include <optional>
#include <string>

namespace kwb {

inline constexpr const char* k_signature_file = "signature.json";
inline constexpr const char* k_signature_schema = "kwb.signature";

// What a signature binds: the SHA-256 of MANIFEST.sha256's bytes, of plan.json's bytes (the plan digest), and the
// decision ("" when the run stopped before one).
struct BundleSeal {
  std::string manifest_sha256;
  std::string plan_digest;
  std::string decision;
};

// The exact bytes that are signed.
std::string signed_message(const BundleSeal& seal);

// signature.json's text for `seal`, signed with `key`.
std::string signature_json(const BundleSeal& seal, const SigningKey& key);

// Writes signature.json into a bundle whose manifest is written: the manifest's digest is taken from the file.
void sign_bundle(const std::filesystem::path& dir, const SigningKey& key, const std::string& plan_digest,
                 const std::string& decision);

struct SignatureCheck {
  enum class State {
    absent,     // no signature.json
    invalid,    // malformed, or it does not sign this bundle's manifest, plan and decision: the bundle was changed
    untrusted,  // valid, under a key this machine does not trust
    trusted,    // valid, under this machine's key or one in its trusted/ folder
  };
  State state = State::absent;
  std::string public_key;  // as signature.json names it ("" when absent or malformed)
  std::string detail;      // one sentence for people
};

// Checks signature.json's text (nullopt: absent) against what the bundle holds.
SignatureCheck check_signature(const std::optional<std::string>& signature_text, const BundleSeal& seal,
                               const TrustedKeys& trusted);

const char* to_string(SignatureCheck::State s);

}  // namespace kwb
