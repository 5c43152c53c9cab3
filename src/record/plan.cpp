#include "record/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <set>

namespace kwb {

namespace {

constexpr std::array k_impl_roles = {ImplRole::baseline, ImplRole::candidate, ImplRole::baseline_layout,
                                     ImplRole::candidate_layout, ImplRole::control};

bool is_hex_digest(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string identity_text(const nlohmann::json& id, const char* key, const std::string& where) {
  if (!id.is_object() || !id.contains(key) || !id[key].is_string()) {
    throw json_fields::FormatError(fmt::format("field '{}.{}' must be a string", where, key));
  }
  return id[key].get<std::string>();
}

// What the declaration cannot say: the relations between fields.
void check_invariants(const Plan& p) {
  using json_fields::FormatError;
  for (ImplRole arm : {ImplRole::baseline, ImplRole::candidate}) {
    if (p.impl(arm) == nullptr) throw FormatError(fmt::format("no implementation with role '{}'", to_string(arm)));
  }
  std::set<std::string> controls;
  for (size_t i = 0; i < p.implementations.size(); ++i) {
    const PlannedImpl& im = p.implementations[i];
    const std::string where = fmt::format("implementations[{}]", i);
    if ((im.role == ImplRole::control) != im.expect.has_value()) {
      throw FormatError(
          fmt::format("field '{}.expect' must name a failure reason for a control and be null otherwise", where));
    }
    if (im.role == ImplRole::control && !controls.insert(im.name).second) {
      throw FormatError(fmt::format("control '{}' is planned twice", im.name));
    }
    if (!is_hex_digest(identity_text(im.identity, "source_sha256", where + ".identity"))) {
      throw FormatError(fmt::format("field '{}.identity.source_sha256' must be 64 hex digits", where));
    }
    identity_text(im.identity, "key", where + ".identity");
    const std::string artifact = identity_text(im.identity, "artifact_sha256", where + ".identity");
    if (im.built && (!is_hex_digest(artifact) || im.bundle_artifact.empty())) {
      throw FormatError(
          fmt::format("{} ({}) is built but has no artifact digest or no bundle_artifact", where, im.name));
    }
  }
  const PlanOracle& o = p.task.oracle;
  if (!is_hex_digest(o.source_sha256)) {
    throw FormatError(fmt::format("field 'task.oracle.source_sha256' must be 64 hex digits, is '{}'", o.source_sha256));
  }
  if (identity_text(o.identity, "source_sha256", "task.oracle.identity") != o.source_sha256 ||
      identity_text(o.identity, "key", "task.oracle.identity").empty()) {
    throw FormatError("task.oracle.identity does not describe a build of task.oracle.source_sha256");
  }
  if (!(p.gates.alpha > 0 && p.gates.alpha < 1)) throw FormatError("field 'gates.alpha' must lie in (0, 1)");
  if (p.layout.layouts < 1 || p.layout.layouts > 64) throw FormatError("field 'layout.layouts' must be 1..64");
}

}  // namespace

namespace json_fields {

template <>
struct EnumCodec<ImplRole> {
  static std::string_view name(ImplRole r) { return to_string(r); }
  static std::optional<ImplRole> parse(std::string_view s) { return parse_impl_role(s); }
  static std::string choices() { return "baseline, candidate, baseline_layout, candidate_layout, control"; }
};

template <>
struct EnumCodec<CaseRole> {
  static std::string_view name(CaseRole r) { return to_string(r); }
  static std::optional<CaseRole> parse(std::string_view s) {
    for (CaseRole r : {CaseRole::timing, CaseRole::correctness}) {
      if (to_string(r) == s) return r;
    }
    return std::nullopt;
  }
  static std::string choices() { return "timing, correctness"; }
};

template <>
struct EnumCodec<stats::GateKind> {
  static std::string_view name(stats::GateKind k) { return k == stats::GateKind::ci ? "ci" : "point"; }
  static std::optional<stats::GateKind> parse(std::string_view s) {
    if (s == "ci") return stats::GateKind::ci;
    if (s == "point") return stats::GateKind::point;
    return std::nullopt;
  }
  static std::string choices() { return "ci, point"; }
};

template <>
struct EnumCodec<BackendKind> {
  static std::string_view name(BackendKind b) { return to_string(b); }
  static std::optional<BackendKind> parse(std::string_view s) { return parse_backend(s); }
  static std::string choices() { return fmt::format("{}", fmt::join(backend_names(), ", ")); }
};

template <>
struct EnumCodec<FailureReason> {
  static std::string_view name(FailureReason r) { return to_string(r); }
  static std::optional<FailureReason> parse(std::string_view s) { return parse_failure_reason(s); }
  static std::string choices() { return "a failure reason kwb knows (docs/checking.md)"; }
};

}  // namespace json_fields

std::string_view to_string(ImplRole r) {
  switch (r) {
    case ImplRole::baseline:
      return "baseline";
    case ImplRole::candidate:
      return "candidate";
    case ImplRole::baseline_layout:
      return "baseline_layout";
    case ImplRole::candidate_layout:
      return "candidate_layout";
    case ImplRole::control:
      return "control";
  }
  return "?";
}

std::optional<ImplRole> parse_impl_role(std::string_view name) {
  for (ImplRole r : k_impl_roles) {
    if (to_string(r) == name) return r;
  }
  return std::nullopt;
}

ImplRole layout_role(ImplRole arm) {
  return arm == ImplRole::candidate ? ImplRole::candidate_layout : ImplRole::baseline_layout;
}

namespace {
std::string identity_field(const nlohmann::json& id, const char* key) {
  return id.is_object() && id.contains(key) && id[key].is_string() ? id[key].get<std::string>() : "";
}
}  // namespace

std::string PlannedImpl::source_sha256() const { return identity_field(identity, "source_sha256"); }
std::string PlannedImpl::artifact_sha256() const { return identity_field(identity, "artifact_sha256"); }
std::string PlannedImpl::identity_key() const { return identity_field(identity, "key"); }

const PlannedImpl* Plan::impl(ImplRole role, std::string_view name) const {
  for (const PlannedImpl& p : implementations) {
    if (p.role == role && (name.empty() || p.name == name)) return &p;
  }
  return nullptr;
}

std::vector<size_t> Plan::pool(ImplRole arm) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < implementations.size(); ++i) {
    if (implementations[i].role == arm) {
      out.push_back(i);
      break;
    }
  }
  const ImplRole padded = layout_role(arm);
  for (int v = 1; v < layout.layouts; ++v) {
    for (size_t i = 0; i < implementations.size(); ++i) {
      const PlannedImpl& p = implementations[i];
      if (p.role == padded && p.layout == v && p.built) out.push_back(i);
    }
  }
  return out;
}

std::vector<std::string> Plan::case_names() const {
  std::vector<std::string> out;
  for (const PlannedCase& c : task.cases) out.push_back(c.name);
  return out;
}

std::vector<std::string> Plan::timing_cases() const {
  std::vector<std::string> out;
  for (const PlannedCase& c : task.cases) {
    if (c.role == CaseRole::timing) out.push_back(c.name);
  }
  return out;
}

std::vector<std::string> Plan::effective_workloads() const { return workloads.empty() ? timing_cases() : workloads; }

std::string control_check_stem(std::string_view control_name) { return fmt::format("control_{}", control_name); }
std::string check_file(std::string_view stem) { return fmt::format("checks/{}.json", stem); }

nlohmann::json to_json(const Plan& plan) {
  return json_fields::encode_file(plan, k_plan_schema, k_bundle_schema_version);
}

Plan plan_from_json(const nlohmann::json& j) {
  Plan p = json_fields::decode_file<Plan>(j, k_plan_schema, k_bundle_schema_version);
  check_invariants(p);
  return p;
}

std::optional<std::string> provenance_warning(const Plan& plan) {
  if (!plan.kwb.git_dirty.value_or(false)) return std::nullopt;
  return fmt::format(
      "kwb was built from a modified git tree (commit {} plus uncommitted changes): that commit alone "
      "does not reproduce this run",
      plan.kwb.git_sha.empty() ? std::string("unknown") : plan.kwb.git_sha);
}

}  // namespace kwb
