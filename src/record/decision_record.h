// decision.json: its one type, written by validate and read by verify, the reports and the ledger. Its fields are
// declared once (describe, record/json_fields.h), like plan.json's (record/plan.h).
#pragma once

#include "record/decision.h"
#include "record/json_fields.h"
#include "record/schema.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace kwb {

// What the decision is about, and where it holds.
struct DecisionScope {
  std::string task;
  std::string machine;  // the CPU model, or "unknown"
  std::string host;     // the host name, or "unknown"
  std::string backend;
  std::string device;  // the backend's device; empty on cpu
  std::vector<std::string> dtypes;
  std::vector<std::string> workloads;  // those compared in A/B
};

struct DecisionRecord {
  DecisionKind decision = DecisionKind::invalid;
  int exit_code = 3;
  std::vector<std::string> reasons;
  std::vector<std::string> reason_codes;  // one stable code per reason (Decision::reason_codes)
  std::string plan_digest;                // SHA-256 of plan.json; empty when the freeze failed
  DecisionScope scope;
  nlohmann::json inputs;  // what the decision rule read (to_json(DecisionInputs)); verify re-derives them
  std::string created;    // UTC, ISO 8601
  // The secret the run's timed and held-out data came from (util/data_secret.h), revealed once the run is over:
  // verify checks it against the plan's data_commitment and re-derives the nonces from it.
  std::string data_secret;
};

nlohmann::json to_json(const DecisionRecord& d);
// Strict, like plan_from_json: schema "kwb.decision" at k_bundle_schema_version, every declared field with its type
// and nothing else. Throws json_fields::FormatError naming the field.
DecisionRecord decision_record_from_json(const nlohmann::json& j);

template <typename V>
void describe(V& v, DecisionScope& x) {
  v("task", x.task);
  v("machine", x.machine);
  v("host", x.host);
  v("backend", x.backend);
  v("device", x.device);
  v("dtypes", x.dtypes);
  v("workloads", x.workloads);
}

template <typename V>
void describe(V& v, DecisionRecord& x) {
  v("decision", x.decision);
  v("exit_code", x.exit_code);
  v("reasons", x.reasons);
  v("reason_codes", x.reason_codes);
  v("plan_digest", x.plan_digest);
  v("scope", x.scope);
  v("inputs", x.inputs);
  v("created", x.created);
  v("data_secret", x.data_secret);
}

}  // namespace kwb
