// Records kwb writes and later believes (a campaign's campaign.json, an experiment's trajectory.json), sealed when
// written: the machine key's Ed25519 signature of the document (its compact JSON text without the seal), in the
// document's own "seal" field, so that one atomic write holds both. A reader checks the seal against the keys this
// machine trusts before it believes a field: a record edited after kwb wrote it is named, never rendered or resumed.
#pragma once

#include "util/machine_key.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kwb {

// `doc` (an object) with "seal": "<public key hex>:<signature hex>" over `kind` and its other fields.
nlohmann::json sealed_json(nlohmann::json doc, const std::string& kind, const SigningKey& key);

// "" when `doc` carries a seal a trusted key made over `kind` and exactly its other fields; else why not.
std::string sealed_json_problem(const nlohmann::json& doc, const std::string& kind, const TrustedKeys& keys);

}  // namespace kwb
