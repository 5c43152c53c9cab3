#include "util/sealed_json.h"

#include <fmt/format.h>

namespace kwb {

namespace {

// What a seal signs: the kind, and the document without its seal as compact JSON (nlohmann writes an object's keys
// sorted, and numbers as they round-trip, so a parsed record gives the same text again).
std::string sealed_message(nlohmann::json doc, const std::string& kind) {
  if (doc.is_object()) doc.erase("seal");
  return fmt::format("kwb record seal v1\n{}\n{}", kind,
                     doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

nlohmann::json sealed_json(nlohmann::json doc, const std::string& kind, const SigningKey& key) {
  const std::string message = sealed_message(doc, kind);
  doc["seal"] = key.public_key() + ":" + key.sign(message);
  return doc;
}

std::string sealed_json_problem(const nlohmann::json& doc, const std::string& kind, const TrustedKeys& keys) {
  if (!doc.is_object() || !doc.contains("seal") || !doc["seal"].is_string()) return "it has no seal";
  const std::string seal = doc["seal"].get<std::string>();
  const size_t colon = seal.find(':');
  if (colon == std::string::npos) return "its seal is not <public key>:<signature>";
  const std::string key = seal.substr(0, colon);
  if (!keys.trusts(key)) return fmt::format("its seal was made by a key this machine does not trust ({})", key);
  if (!verify_signature(key, sealed_message(doc, kind), seal.substr(colon + 1))) {
    return "its seal does not match what it holds: it was changed after kwb wrote it";
  }
  return "";
}

}  // namespace kwb
