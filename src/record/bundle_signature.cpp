#include "record/bundle_signature.h"

#include "record/bundle_writer.h"
#include "util/fs.h"
#include "util/json_text.h"
#include "util/sha256.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kwb {

std::string signed_message(const BundleSeal& seal) {
  // One field a line, each named: no two different seals give the same bytes (a decision holds no newline).
  return fmt::format("kwb bundle signature v1\nmanifest_sha256 {}\nplan_digest {}\ndecision {}\n", seal.manifest_sha256,
                     seal.plan_digest, seal.decision);
}

std::string signature_json(const BundleSeal& seal, const SigningKey& key) {
  const nlohmann::json j = {
      {"schema", k_signature_schema},
      {"schema_version", 1},
      {"algorithm", "ed25519"},
      {"public_key", key.public_key()},
      {"signed",
       {{"manifest_sha256", seal.manifest_sha256}, {"plan_digest", seal.plan_digest}, {"decision", seal.decision}}},
      {"signature", key.sign(signed_message(seal))}};
  return json_text(j, 2) + "\n";
}

void sign_bundle(const std::filesystem::path& dir, const SigningKey& key, const std::string& plan_digest,
                 const std::string& decision) {
  const BundleSeal seal{sha256_file(dir / k_manifest_file), plan_digest, decision};
  write_file_atomic(dir / k_signature_file, signature_json(seal, key));
}

const char* to_string(SignatureCheck::State s) {
  switch (s) {
    case SignatureCheck::State::absent:
      return "absent";
    case SignatureCheck::State::invalid:
      return "invalid";
    case SignatureCheck::State::untrusted:
      return "untrusted";
    case SignatureCheck::State::trusted:
      return "trusted";
  }
  return "invalid";
}

SignatureCheck check_signature(const std::optional<std::string>& text, const BundleSeal& seal,
                               const TrustedKeys& trusted) {
  using State = SignatureCheck::State;
  SignatureCheck c;
  if (!text) {
    c.detail = fmt::format("no {}: nothing proves which machine wrote this bundle", k_signature_file);
    return c;
  }
  c.state = State::invalid;
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || j.value("schema", "") != k_signature_schema || j.value("algorithm", "") != "ed25519" ||
      !j.contains("public_key") || !j["public_key"].is_string() || !j.contains("signature") ||
      !j["signature"].is_string()) {
    c.detail = fmt::format("{}: not a kwb Ed25519 signature (schema {}, algorithm ed25519, public_key, signature)",
                           k_signature_file, k_signature_schema);
    return c;
  }
  c.public_key = j["public_key"].get<std::string>();
  if (!verify_signature(c.public_key, signed_message(seal), j["signature"].get<std::string>())) {
    c.detail = fmt::format(
        "{}: the signature does not sign this bundle's manifest (sha256 {}), plan digest and "
        "decision: the bundle was changed after it was signed",
        k_signature_file, seal.manifest_sha256);
    return c;
  }
  if (trusted.trusts(c.public_key)) {
    c.state = State::trusted;
    c.detail = fmt::format("signed by {} key {}", trusted.own == c.public_key ? "this machine's" : "the trusted",
                           c.public_key);
  } else {
    c.state = State::untrusted;
    c.detail = fmt::format(
        "validly signed, but by key {}, which this machine does not trust (its own machine.key, "
        "or a .pub in the key folder's trusted/)",
        c.public_key);
  }
  return c;
}

}  // namespace kwb
