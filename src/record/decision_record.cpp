#include "record/decision_record.h"

namespace kwb {

namespace json_fields {

template <>
struct EnumCodec<DecisionKind> {
  static std::string_view name(DecisionKind d) { return to_string(d); }
  static std::optional<DecisionKind> parse(std::string_view s) { return parse_decision(s); }
  static std::string choices() { return "KEEP_CANDIDATE, KEEP_BASELINE, INCONCLUSIVE, INVALID"; }
};

}  // namespace json_fields

nlohmann::json to_json(const DecisionRecord& d) {
  return json_fields::encode_file(d, k_decision_schema, k_bundle_schema_version);
}

DecisionRecord decision_record_from_json(const nlohmann::json& j) {
  DecisionRecord d = json_fields::decode_file<DecisionRecord>(j, k_decision_schema, k_bundle_schema_version);
  if (!d.inputs.is_object()) throw json_fields::FormatError("field 'inputs' must be an object");
  return d;
}

}  // namespace kwb
