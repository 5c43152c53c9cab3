#include "record/verify.h"

#include "record/bundle_reader.h"
#include "record/bundle_writer.h"
#include "record/control_margin.h"
#include "record/decision.h"
#include "record/schema.h"
#include "record/verify_comparison.h"
#include "stats/aging.h"
#include "stats/alpha_spending_rule.h"
#include "stats/descriptive.h"
#include "stats/effect.h"
#include "stats/gate.h"
#include "stats/layout.h"
#include "stats/outside_window.h"
#include "stats/random.h"
#include "stats/sequential.h"
#include "task/data.h"
#include "util/backend_kind.h"
#include "util/cpu_watch.h"
#include "util/data_secret.h"
#include "util/elf_code.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace kwb {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A field the plan or a derived file must have, with the type it must have. Thrown inside a verify step, caught by
// the step and reported as "<file>: <what>"; never a crash, never exit 70.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw FieldError(fmt::format("field '{}' is missing{}", key, where));
  return j[key];
}
std::string str_field(const json& j, const char* key, const std::string& where = "") {
  const json& v = field(j, key, where);
  if (!v.is_string()) throw FieldError(fmt::format("field '{}'{} must be a string, is {}", key, where, v.type_name()));
  return v.get<std::string>();
}
double num_field(const json& j, const char* key, const std::string& where = "") {
  const json& v = field(j, key, where);
  if (!v.is_number()) throw FieldError(fmt::format("field '{}'{} must be a number, is {}", key, where, v.type_name()));
  return v.get<double>();
}
uint64_t uint_field(const json& j, const char* key, const std::string& where = "") {
  const json& v = field(j, key, where);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    throw FieldError(fmt::format("field '{}'{} must be a non-negative integer, is {}", key, where, v.dump()));
  }
  return v.get<uint64_t>();
}
bool bool_field(const json& j, const char* key, const std::string& where = "") {
  const json& v = field(j, key, where);
  if (!v.is_boolean())
    throw FieldError(fmt::format("field '{}'{} must be true or false, is {}", key, where, v.type_name()));
  return v.get<bool>();
}
const json& array_field(const json& j, const char* key, const std::string& where = "") {
  const json& v = field(j, key, where);
  if (!v.is_array()) throw FieldError(fmt::format("field '{}'{} must be an array, is {}", key, where, v.type_name()));
  return v;
}
const json& object_field(const json& j, const char* key, const std::string& where = "") {
  const json& v = field(j, key, where);
  if (!v.is_object()) throw FieldError(fmt::format("field '{}'{} must be an object, is {}", key, where, v.type_name()));
  return v;
}

// What a check file must be, by its name in checks/.
struct ExpectedCheck {
  const PlannedImpl* impl = nullptr;
  std::optional<uint64_t> nonce;  // absent: not known (no revealed data secret, already a problem of its own)
  bool held_out = false;
  std::string stop_after;
};

class Verifier {
public:
  Verifier(const fs::path& dir, const StageGraph& graph) : m_dir(dir), m_graph(graph), m_b(read_bundle(dir)) {}

  VerifyReport run() {
    for (const std::string& p : m_b.problems) problem(p);
    if (!m_b.fs || !m_b.fs->ok()) return m_report;
    step("bundle folder", [&] { contents(); });
    step(k_manifest_file, [&] { manifest(); });
    step(k_signature_file, [&] { signature(); });
    step("schemas", [&] { schemas(); });
    step("plan.json", [&] { plan_digest(); });
    step("plan.json", [&] { read_plan(); });
    if (m_b.plan) {
      if (std::optional<std::string> w = provenance_warning(*m_b.plan)) m_report.warnings.push_back("plan.json: " + *w);
    }
    if (!m_plan_ok) {
      problem("plan.json: without a readable plan nothing else can be bound to it; verification stops here");
      return m_report;
    }
    step("decision.json", [&] { data_secret(); });
    step("artifacts", [&] { artifacts(); });
    step("checks", [&] { checks(); });
    step("controls.json", [&] { controls(); });
    step("comparisons/aa.json", [&] { comparison("aa", m_b.aa); });
    step("comparisons/ab.json", [&] { comparison("ab", m_b.ab); });
    step("samples.csv", [&] { samples_belong(); });
    step("stages.json", [&] { required_evidence(); });
    step("decision.json", [&] { decision(); });
    return m_report;
  }

private:
  void problem(const std::string& p) { m_report.problems.push_back(p); }
  void verified(const std::string& v) { m_report.verified.push_back(v); }

  // Each step stands alone: a malformed value in one file is that file's problem, and the others are still checked.
  template <typename F>
  void step(const std::string& file, F&& body) {
    try {
      body();
    } catch (const FieldError& e) {
      problem(fmt::format("{}: {}", file, e.what()));
    } catch (const json::exception& e) {
      problem(fmt::format("{}: a value has the wrong type ({})", file, e.what()));
    } catch (const std::exception& e) {
      problem(fmt::format("{}: cannot be verified ({})", file, e.what()));
    }
  }

  // A bundle holds regular files in folders, nothing else.
  void contents() {
    size_t odd = 0;
    for (const BundleFs::Entry& e : m_b.entries) {
      if (e.kind == BundleFs::Kind::symlink) {
        problem(fmt::format("{}: a symlink (a bundle holds regular files only; it was not followed)", e.rel));
        ++odd;
      } else if (e.kind == BundleFs::Kind::other) {
        problem(fmt::format("{}: not a regular file or folder (a FIFO, socket or device); not opened", e.rel));
        ++odd;
      }
    }
    if (m_b.entries_truncated) {
      problem(fmt::format("bundle folder: more than {} entries or deeper than {} levels; not a bundle kwb wrote",
                          k_bundle_max_entries, k_bundle_max_depth));
    }
    if (odd == 0 && !m_b.entries_truncated)
      verified(fmt::format("bundle folder: {} entries, regular files and folders only", m_b.entries.size()));
  }

  void manifest() {
    std::string why;
    std::optional<std::string> text = m_b.fs->read(k_manifest_file, why);
    if (!text) {
      problem(fmt::format("{}: {} (the run did not finish, or the file was removed)", k_manifest_file, why));
      return;
    }
    std::istringstream in(*text);
    std::string line;
    std::set<std::string> listed;
    size_t n = 0, bad = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.size() < 67 || line.substr(64, 2) != "  " || line.find_first_not_of("0123456789abcdef") < 64) {
        problem(fmt::format("{}:{}: not a 'sha256  path' line", k_manifest_file, n));
        ++bad;
        continue;
      }
      const std::string hash = line.substr(0, 64), path = line.substr(66);
      if (auto bad_path = BundleFs::bad_path(path)) {
        problem(fmt::format("{}:{}: refused path: {}", k_manifest_file, n, *bad_path));
        ++bad;
        continue;
      }
      if (!listed.insert(path).second) {
        problem(fmt::format("{}:{}: '{}' is listed twice", k_manifest_file, n, path));
        ++bad;
        continue;
      }
      std::optional<std::string> now = m_b.fs->sha256(path, why);
      if (!now) {
        problem(fmt::format("{}: listed in {} but {}", path, k_manifest_file, why));
        ++bad;
      } else if (*now != hash) {
        problem(fmt::format("{}: content changed (manifest {}, file {})", path, hash, *now));
        ++bad;
      }
    }
    for (const BundleFs::Entry& e : m_b.entries) {
      if (e.kind != BundleFs::Kind::file) continue;
      if (e.rel != k_manifest_file && e.rel != k_signature_file && !listed.contains(e.rel)) {
        problem(fmt::format("{}: present but not in {}", e.rel, k_manifest_file));
        ++bad;
      }
    }
    if (bad == 0) verified(fmt::format("{}: {} files, every hash matches", k_manifest_file, listed.size()));
  }

  // What the bundle's bytes are (the manifest's and the plan's digests, the decision it states), and whether a key
  // this machine trusts signed exactly that. A signature that does not match is a problem: kwb never writes one.
  void signature() {
    std::string why;
    m_report.seal.manifest_sha256 = m_b.fs->sha256(k_manifest_file, why).value_or("");
    m_report.seal.plan_digest = m_b.fs->sha256("plan.json", why).value_or("");
    m_report.seal.decision = m_b.decision ? std::string(to_string(m_b.decision->decision)) : "";
    std::optional<std::string> text;
    if (m_b.fs->kind(k_signature_file) != BundleFs::Kind::missing) {
      text = m_b.fs->read(k_signature_file, why, 64 * 1024UL);
      if (!text) text = "";  // a signature.json that cannot be read (a symlink, a FIFO, too large) is a bad one
    }
    m_report.signature = check_signature(text, m_report.seal, trusted_keys());
    if (m_report.signature.state == SignatureCheck::State::invalid) {
      problem(m_report.signature.detail);
    } else if (m_report.signature.state == SignatureCheck::State::trusted) {
      verified(fmt::format("{}: {}", k_signature_file, m_report.signature.detail));
    }
  }

  // `version`, or from `oldest` to `version` where given; -1: any version.
  void expect_schema(const std::string& file, const json& j, const std::string& schema, int version = -1,
                     int oldest = -1) {
    if (j.empty()) return;  // absence already reported
    const bool in_range = j.contains("schema_version") && j["schema_version"].is_number_integer() &&
                          (version < 0 || (j["schema_version"].get<int>() <= version &&
                                           j["schema_version"].get<int>() >= (oldest < 0 ? version : oldest)));
    if (!j.contains("schema") || !j["schema"].is_string() || j["schema"] != schema || !in_range) {
      problem(fmt::format("{}: schema is {} v{}, expected '{}'{}", file, j.value("schema", json()).dump(),
                          j.value("schema_version", json()).dump(), schema,
                          version >= 0 ? fmt::format(" v{} (written by another kwb version; re-run validate)", version)
                                       : " with a version"));
    }
  }

  void schemas() {
    expect_schema("environment.json", m_b.environment, "kwb.environment");
    expect_schema("stages.json", m_b.stages, "kwb.stages");
    if (!m_b.decision_problem.empty()) problem("decision.json: " + m_b.decision_problem);
    if (!m_b.controls.empty()) expect_schema("controls.json", m_b.controls, "kwb.controls");
    if (!m_b.final_.empty()) expect_schema("final.json", m_b.final_, "kwb.final");
    // Version 2 of a check report records what it was asked (nonce, held-out, stop reason): without it a report
    // cannot be bound to its role.
    for (const auto& [k, j] : m_b.checks)
      expect_schema("checks/" + k + ".json", j, k_check_schema, k_check_schema_version);
    if (m_b.aa) {
      expect_schema("comparisons/aa.json", *m_b.aa, "kwb.compare", k_compare_schema_version,
                    k_compare_schema_oldest_verified);
    }
    if (m_b.ab) {
      expect_schema("comparisons/ab.json", *m_b.ab, "kwb.compare", k_compare_schema_version,
                    k_compare_schema_oldest_verified);
    }
  }

  void plan_digest() {
    if (!m_b.decision) return;
    std::string why;
    std::optional<std::string> digest = m_b.fs->sha256("plan.json", why);
    if (!digest) return;  // already reported by the reader
    const std::string& recorded = m_b.decision->plan_digest;
    if (recorded != *digest) {
      problem(fmt::format("decision.json: plan_digest {} but plan.json hashes to {}", recorded, *digest));
    } else {
      verified("plan.json: digest matches the decision's plan_digest");
    }
  }

  // The data secret decision.json reveals must be the one plan.json committed to before anything ran: then the
  // data was not chosen after the fact, and the final re-check's nonce follows from it (util/data_secret.h).
  void data_secret() {
    if (!m_b.decision) return;  // no decision (an interrupted run): the reader has said so
    const std::string& revealed = m_b.decision->data_secret;
    const std::optional<DataSecret> secret = DataSecret::from_hex(revealed);
    if (!secret) {
      problem(
          fmt::format("decision.json: data_secret '{}' is not 64 lowercase hex digits; the run's data cannot be "
                      "re-derived",
                      revealed.substr(0, 80)));
      return;
    }
    if (secret->commitment() != m_plan.seeds.data_commitment) {
      problem(
          fmt::format("decision.json: the revealed data_secret commits to {}, but plan.json committed to {}: "
                      "the data secret is not the one frozen before the run",
                      secret->commitment(), m_plan.seeds.data_commitment));
      return;
    }
    m_final_nonce = secret->nonce("final");
    verified(
        "decision.json: data_secret matches plan.json's data_commitment (the timed and held-out data were "
        "fixed before the run)");
  }

  // plan.json was read strictly by the bundle reader (record/plan.h); what it could not read is this step's problem.
  void read_plan() {
    if (!m_b.plan) {
      problem(fmt::format("plan.json: {}", m_b.plan_problem));
      return;
    }
    m_plan = *m_b.plan;
    m_plan_ok = true;
    m_workloads = m_plan.effective_workloads();
    m_case_names = m_plan.case_names();
    m_timing_cases = m_plan.timing_cases();
    // The strict reader took exactly this version (another is a problem naming both); say which one was read.
    verified(fmt::format("plan.json: bundle schema version {} (the version this kwb reads), task {} of identity {}",
                         k_bundle_schema_version, m_plan.task.name, m_plan.task.identity));
    verified(fmt::format("plan.json: the task's oracle {} is recorded with its source digest and build identity",
                         m_plan.task.oracle.source));
    verified(fmt::format(
        "plan.json: {} implementations, workloads {}, gate {} {:g}% (A/A +-{:g}%), alpha {:g}, at "
        "least {} blocks; everything below is bound to these",
        m_plan.implementations.size(), fmt::join(m_workloads, ", "), gate_kind(), m_plan.gates.min_improvement_pct,
        m_plan.gates.max_aa_difference_pct, m_plan.gates.alpha, m_plan.budgets.min_blocks));
  }

  std::string gate_kind() const { return m_plan.gates.kind == stats::GateKind::point ? "point" : "ci"; }

  // A comparison file's schema_version (the current one where it has none: expect_schema reported that).
  static int version_of(const json& cmp) {
    return cmp.contains("schema_version") && cmp["schema_version"].is_number_integer()
               ? cmp["schema_version"].get<int>()
               : k_compare_schema_version;
  }

  void artifacts() {
    size_t n = 0;
    for (const PlannedImpl& im : m_plan.implementations) {
      for (auto [rel, planned, what] : {std::tuple{im.bundle_source, im.source_sha256(), "source_sha256"},
                                        std::tuple{im.bundle_artifact, im.artifact_sha256(), "artifact_sha256"}}) {
        if (rel.empty()) continue;
        std::string why;
        std::optional<std::string> now = m_b.fs->sha256(rel, why);
        if (!now) {
          problem(fmt::format("{}: artifact of {}: {}", rel, im.name, why));
        } else if (*now != planned) {
          problem(fmt::format("{}: {} of {} is {} in plan.json but the file hashes to {}", rel, what, im.name, planned,
                              *now));
        } else {
          ++n;
        }
      }
      if (im.built && im.bundle_artifact.empty())
        problem(fmt::format("plan.json: {} built but has no artifact", im.name));
    }
    verified(fmt::format("artifacts/: {} sources and objects hash to their plan identities", n));
  }

  static bool check_pass(const json& c) {
    return c.value("implementation", json::object()).value("built", false) &&
           c.value("assertions", json::object()).value("failed", 1) == 0 &&
           c.value("assertions", json::object()).value("passed", 0) > 0;
  }

  std::optional<ExpectedCheck> expected_check(const std::string& stem) const {
    const uint64_t check_nonce = m_plan.seeds.check_nonce;
    if (stem == "baseline") return ExpectedCheck{m_plan.impl(ImplRole::baseline), check_nonce, false, ""};
    if (stem == "candidate") return ExpectedCheck{m_plan.impl(ImplRole::candidate), check_nonce, false, ""};
    if (stem == "candidate_final") return ExpectedCheck{m_plan.impl(ImplRole::candidate), m_final_nonce, true, ""};
    for (const PlannedImpl& c : m_plan.implementations) {
      if (c.role == ImplRole::control && stem == control_check_stem(c.name)) {
        return ExpectedCheck{&c, check_nonce, false, to_string(c.expect)};
      }
    }
    return std::nullopt;
  }

  // The cases a check of this kind must cover: every published case, and for the final re-check one held-out case
  // per published case plus one rehearsal of a timing case.
  std::multiset<std::string> expected_cases(bool held_out) const {
    std::multiset<std::string> out(m_case_names.begin(), m_case_names.end());
    if (held_out) {
      for (const std::string& n : m_case_names) out.insert(n + "~held_out");
    }
    return out;
  }

  // The check's counts add up, and its verdict follows from them. Returns the cases it ran.
  std::multiset<std::string> check_counts(const std::string& file, const json& c) {
    const json& a = object_field(c, "assertions");
    const uint64_t passed = uint_field(a, "passed", " of assertions"),
                   failed = uint_field(a, "failed", " of assertions");
    const json& failures = array_field(c, "failures");
    if (failed != failures.size()) {
      problem(fmt::format("{}: {} assertions failed but {} failures are listed", file, failed, failures.size()));
    }
    uint64_t cp = 0, cf = 0;
    std::multiset<std::string> ran;
    for (const json& cs : array_field(c, "cases")) {
      cp += uint_field(cs, "passed", " of a case");
      cf += uint_field(cs, "failed", " of a case");
      ran.insert(str_field(cs, "name", " of a case"));
    }
    if (!array_field(c, "cases").empty() && (cp != passed || cf != failed)) {
      problem(fmt::format("{}: per-case counts ({} passed, {} failed) do not add up to the totals ({}, {})", file, cp,
                          cf, passed, failed));
    }
    const std::string derived = check_pass(c) ? "PASS" : "FAIL";
    if (str_field(c, "verdict") != derived) {
      problem(fmt::format("{}: verdict {} does not follow from its assertions ({})", file, str_field(c, "verdict"),
                          derived));
    }
    return ran;
  }

  // Bound to its role: the implementation the plan froze for it, the task and backend of the plan, and the request
  // the role makes (published or fresh data, held-out shapes, the control's stop reason).
  void check_binding(const std::string& file, const json& c, const ExpectedCheck& ex) {
    const json& impl = object_field(c, "implementation");
    const json& id = object_field(impl, "identity", " of implementation");
    const std::string art = id.contains("artifact_sha256") && id["artifact_sha256"].is_string()
                                ? id["artifact_sha256"].get<std::string>()
                                : "";
    if (str_field(id, "source_sha256", " of implementation.identity") != ex.impl->source_sha256() ||
        (ex.impl->built && art != ex.impl->artifact_sha256())) {
      problem(fmt::format("{}: checks source {} / artifact {}, but the plan's {} is {} / {}", file,
                          str_field(id, "source_sha256"), art, ex.impl->name, ex.impl->source_sha256(),
                          ex.impl->artifact_sha256()));
    }
    if (bool_field(impl, "built", " of implementation") != ex.impl->built) {
      problem(fmt::format("{}: says built = {}, the plan says {}", file, !ex.impl->built, ex.impl->built));
    }
    if (str_field(c, "task") != m_plan.task.name || str_field(c, "backend") != to_string(m_plan.backend)) {
      problem(fmt::format("{}: a check of task '{}' on '{}', the plan is task '{}' on '{}'", file, str_field(c, "task"),
                          str_field(c, "backend"), m_plan.task.name, m_plan.backend));
    }
    const json& rq = object_field(c, "request");
    if ((ex.nonce && uint_field(rq, "nonce", " of request") != *ex.nonce) ||
        bool_field(rq, "held_out", " of request") != ex.held_out ||
        str_field(rq, "stop_after_reason", " of request") != ex.stop_after) {
      problem(
          fmt::format("{}: was run with nonce {}, held_out {}, stop reason '{}'; its role requires nonce {}, "
                      "held_out {}, stop reason '{}' (a report of another role cannot stand in for this one)",
                      file, uint_field(rq, "nonce"), bool_field(rq, "held_out"), str_field(rq, "stop_after_reason"),
                      ex.nonce ? std::to_string(*ex.nonce) : "(unknown)", ex.held_out, ex.stop_after));
    }
  }

  // The case list: a passing check covered every case its role requires (and, for the final re-check, rehearsed a
  // timing visit); a failing one ran only cases its role names.
  void check_cases(const std::string& file, const std::multiset<std::string>& ran, const ExpectedCheck& ex, bool pass) {
    const std::multiset<std::string> want = expected_cases(ex.held_out);
    std::multiset<std::string> ran_public;
    size_t rehearsals = 0;
    bool foreign = false;
    for (const std::string& n : ran) {
      const size_t t = n.rfind("~rehearsal");
      if (ex.held_out && t != std::string::npos && t + 10 == n.size() &&
          std::find(m_timing_cases.begin(), m_timing_cases.end(), n.substr(0, t)) != m_timing_cases.end()) {
        ++rehearsals;
        continue;
      }
      if (!want.contains(n)) foreign = true;
      ran_public.insert(n);
    }
    if (foreign) {
      problem(fmt::format("{}: ran cases the plan does not have ({})", file, fmt::join(ran, ", ")));
    } else if (pass && (ran_public != want || (ex.held_out && rehearsals != 1))) {
      problem(fmt::format("{}: passes on {} cases{}, but its role requires all {} planned cases{}", file,
                          ran_public.size(), ex.held_out ? fmt::format(" and {} rehearsals", rehearsals) : "",
                          want.size(), ex.held_out ? " and one timing rehearsal" : ""));
    }
  }

  void check_one(const std::string& stem, const json& c) {
    const std::string file = "checks/" + stem + ".json";
    std::optional<ExpectedCheck> ex = expected_check(stem);
    if (!ex) {
      problem(
          fmt::format("{}: not a check this plan calls for (expected baseline, candidate, candidate_final or "
                      "control_<planned control>)",
                      file));
      return;
    }
    const std::multiset<std::string> ran = check_counts(file, c);
    const bool pass = check_pass(c);
    check_binding(file, c, *ex);
    check_cases(file, ran, *ex, pass);
    m_check_pass[stem] = pass;
  }

  void checks() {
    for (const auto& entry : m_b.checks) {  // not a structured binding: clang 14 cannot capture one in a lambda
      step("checks/" + entry.first + ".json", [&] { check_one(entry.first, entry.second); });
    }
    verified(
        fmt::format("checks/: {} reports, each bound to its role's implementation, nonce and cases; verdicts "
                    "follow from their assertions",
                    m_b.checks.size()));
  }

  // Whether the plan's candidate (its plain build) compiled; empty without a plan.
  std::optional<bool> candidate_built() const {
    if (!m_plan_ok) return std::nullopt;
    return m_plan.impl(ImplRole::candidate)->built;
  }

  // Whether the plan's candidate maps the baseline's code (util/elf_code.h), from the two artifacts the bundle holds;
  // empty without a plan.
  std::optional<bool> candidate_identical() const {
    if (!m_plan_ok) return std::nullopt;
    const PlannedImpl& c = *m_plan.impl(ImplRole::candidate);
    const PlannedImpl& b = *m_plan.impl(ImplRole::baseline);
    if (!c.built || !b.built || !m_b.fs || c.bundle_artifact.empty() || b.bundle_artifact.empty()) return false;
    std::string why;
    auto code = [&](const PlannedImpl& p) -> std::optional<std::string> {
      const std::optional<std::string> bytes = m_b.fs->read(p.bundle_artifact, why, k_bundle_max_file_bytes);
      return bytes ? elf_code_sha256(*bytes, why) : std::nullopt;
    };
    const std::optional<std::string> cc = code(c), cb = code(b);
    return cc && cb && *cc == *cb;
  }

  std::optional<bool> pass_of(const std::string& stem) const {
    auto it = m_check_pass.find(stem);
    if (it == m_check_pass.end()) return std::nullopt;
    return it->second;
  }

  // Every planned control, from its own check; controls.json must agree and may neither add nor drop one.
  void controls() {
    std::set<std::string> listed;
    if (!m_b.controls.empty()) {
      for (const json& c : array_field(m_b.controls, "controls")) listed.insert(str_field(c, "name", " of a control"));
    }
    size_t killed = 0;
    for (const PlannedImpl& pc : m_plan.implementations) {
      if (pc.role != ImplRole::control) continue;
      const std::string stem = control_check_stem(pc.name);
      auto it = m_b.checks.find(stem);
      if (it == m_b.checks.end() || !m_check_pass.contains(stem)) {
        if (!m_b.controls.empty()) {
          problem(fmt::format("controls.json: planned control '{}' has no usable {}", pc.name, check_file(stem)));
        }
        continue;
      }
      const FailureReason expect = *pc.expect;  // every planned control has one (plan_from_json)
      const bool rejected = !m_check_pass.at(stem);
      bool seen = false;
      std::vector<std::string> reasons;
      for (const json& f : array_field(it->second, "failures")) {
        const std::string reason = f.value("reason", "");
        seen = seen || reason == to_string(expect);
        if (std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) reasons.push_back(reason);
      }
      ControlOutcome o{pc.name, expect, rejected, seen, rejected, reasons};
      m_inputs.controls.push_back(o);
      killed += rejected && seen;
      if (m_b.controls.empty()) continue;
      if (!listed.contains(pc.name)) {
        problem(fmt::format("controls.json: planned control '{}' is not listed", pc.name));
        continue;
      }
      for (const json& c : array_field(m_b.controls, "controls")) {
        if (str_field(c, "name") != pc.name) continue;
        // The margin, where recorded, is what the check shows (a thin control hidden by an edited margin is caught).
        const bool margin_agrees =
            !c.contains("margin") ||
            c.at("margin") == (seen ? to_json(control_margin(it->second, expect)) : json(nullptr));
        if (str_field(c, "expect") != to_string(expect) || bool_field(c, "rejected") != rejected ||
            bool_field(c, "expected_reason_seen") != seen || bool_field(c, "timing_refused") != rejected ||
            !field(c, "metric", "").is_null() || !margin_agrees) {
          problem(
              fmt::format("controls.json: control '{}' does not match its plan and check (rejected {}, expected "
                          "reason '{}' seen {})",
                          pc.name, rejected, expect, seen));
        }
      }
    }
    for (const std::string& n : listed) {
      if (m_plan.impl(ImplRole::control, n) == nullptr)
        problem(fmt::format("controls.json: control '{}' is not in the plan", n));
    }
    if (!m_b.controls.empty() && uint_field(m_b.controls, "killed") != killed) {
      problem(
          fmt::format("controls.json: killed = {} but the checks show {}", uint_field(m_b.controls, "killed"), killed));
    }
    if (!m_inputs.controls.empty()) {
      verified(fmt::format("controls: {} planned controls re-derived from their checks", m_inputs.controls.size()));
    }
  }

  // The gate, budget and seed come from the plan; the file must agree with it, and is never believed over it.
  // Returns the plan's seed for this comparison.
  uint64_t comparison_settings(const std::string& file, bool aa, const json& cmp) {
    const json& g = object_field(cmp, "gate");
    const PlanGates& pg = m_plan.gates;
    if (str_field(g, "kind") != gate_kind() ||
        !close_enough(num_field(g, "min_improvement_pct"), pg.min_improvement_pct) ||
        !close_enough(num_field(g, "max_aa_difference_pct"), pg.max_aa_difference_pct) ||
        !close_enough(num_field(g, "alpha"), pg.alpha) ||
        (version_of(cmp) >= 6 && !close_enough(num_field(g, "same_margin_pct"), pg.same_margin_pct))) {
      problem(fmt::format(
          "{}: gate {} differs from the plan's (kind {}, bar {}%, A/A +-{}%, alpha {}, SAME within "
          "+-{}%)",
          file, g.dump(), gate_kind(), pg.min_improvement_pct, pg.max_aa_difference_pct, pg.alpha, pg.same_margin_pct));
    }
    const json& bu = object_field(cmp, "budgets");
    const PlanBudgets& pb = m_plan.budgets;
    if (uint_field(bu, "min_blocks") != pb.min_blocks || uint_field(bu, "max_blocks") != pb.max_blocks) {
      problem(fmt::format("{}: budgets {} differ from the plan's (min_blocks {}, max_blocks {})", file, bu.dump(),
                          pb.min_blocks, pb.max_blocks));
    }
    const uint64_t seed = mix_seed(m_plan.seeds.seed, aa ? stats::k_seed_tag_aa : stats::k_seed_tag_ab);
    if (uint_field(cmp, "seed") != seed) {
      problem(fmt::format("{}: seed {} but the plan's seed gives {}", file, uint_field(cmp, "seed"), seed));
    }
    return seed;
  }

  // The arms are the plan's implementations, each with its layout pool (A/A: the baseline's, twice).
  void comparison_arms(const std::string& file, bool aa, const std::string& other, const json& cmp) {
    const json& arms = array_field(cmp, "arms");
    const ImplRole roles[2] = {ImplRole::baseline, aa ? ImplRole::baseline : ImplRole::candidate};
    if (arms.size() != 2) {
      problem(fmt::format("{}: {} arms, expected 2", file, arms.size()));
      return;
    }
    for (size_t i = 0; i < 2; ++i) {
      const json& id = object_field(arms[i], "identity");
      const std::vector<size_t> want = m_plan.pool(roles[i]);
      auto planned_sha = [&](size_t v) { return m_plan.implementations[want[v]].artifact_sha256(); };
      const json& layouts = array_field(arms[i], "layouts");
      bool same = str_field(arms[i], "label") == (i == 0 ? "A" : other) && id.contains("artifact_sha256") &&
                  id["artifact_sha256"] == planned_sha(0) && layouts.size() == want.size();
      for (size_t v = 0; same && v < want.size(); ++v)
        same = str_field(layouts[v], "artifact_sha256") == planned_sha(v);
      if (!same)
        problem(fmt::format("{}: arm {} is not the plan's {} with its {} layout builds", file, i, to_string(roles[i]),
                            want.size()));
    }
  }

  // The plan's gate, as the decision procedure takes it (stats/sequential.h): the same procedure compare ran.
  stats::SequentialGate planned_gate(bool aa, const json& cmp) const {
    const PlanGates& pg = m_plan.gates;
    stats::SequentialGate gate;
    gate.aa = aa;
    gate.kind = pg.kind;
    gate.min_improvement_pct = pg.min_improvement_pct;
    gate.max_aa_difference_pct = pg.max_aa_difference_pct;
    // SAME from compare.json version 6 on; an older comparison ran without it.
    gate.same_margin_pct = aa || version_of(cmp) < 6 ? 0.0 : pg.same_margin_pct;
    gate.alpha = pg.alpha;
    gate.min_blocks = m_plan.budgets.min_blocks;
    // The layout floor from compare.json version 8 on (A/B over a pool of layouts); an older comparison ran without.
    gate.layouts = aa || version_of(cmp) < 8 ? 1 : m_plan.layout.layouts;
    return gate;
  }

  // Every planned workload, in the planned order, and nothing else: a workload dropped from the file is missing
  // evidence, not a workload that did not matter, and the decision replays it as inconclusive.
  void comparison_workload_names(const std::string& file, bool aa, const json& cmp) {
    std::vector<std::string> names;
    for (const json& w : array_field(cmp, "workloads")) names.push_back(str_field(w, "name", " of a workload"));
    if (names != m_workloads) {
      problem(fmt::format("{}: workloads [{}], but the plan requires [{}]", file, fmt::join(names, ", "),
                          fmt::join(m_workloads, ", ")));
    }
    auto& out = aa ? m_inputs.aa : m_inputs.ab;
    for (const std::string& planned : m_workloads) {
      if (std::find(names.begin(), names.end(), planned) == names.end()) {
        out.push_back({planned, stats::Verdict::inconclusive, std::nullopt, std::nullopt});
      }
    }
  }

  void comparison(const std::string& tag, const std::optional<json>& cmp) {
    if (!cmp) return;
    const std::string file = "comparisons/" + tag + ".json";
    const bool aa = tag == "aa";
    if (str_field(*cmp, "mode") != tag)
      problem(fmt::format("{}: mode '{}' in the file of {}", file, str_field(*cmp, "mode"), tag));
    const std::string other = aa ? "A'" : "B";
    const uint64_t seed = comparison_settings(file, aa, *cmp);
    comparison_arms(file, aa, other, *cmp);
    const stats::SequentialGate gate = planned_gate(aa, *cmp);
    comparison_workload_names(file, aa, *cmp);
    const json& workloads = array_field(*cmp, "workloads");
    for (size_t wi = 0; wi < workloads.size(); ++wi) {
      const json& w = workloads[wi];
      const std::string name = str_field(w, "name");
      const std::string where = fmt::format("{} workload '{}'", file, name);
      const auto planned_at = std::find(m_workloads.begin(), m_workloads.end(), name);
      if (planned_at == m_workloads.end()) continue;  // reported above; never enters the decision
      step(where, [&] {
        workload(tag, aa, other, w, where, static_cast<size_t>(planned_at - m_workloads.begin()), seed, gate);
      });
    }
  }

  // The charge again, per call, from the figures samples.csv records (util/cpu_watch.h): every sample is its window
  // plus the CPU its worker used outside it on the call's data.
  // Device rows (outside_cpu_ns recorded) charge only the CPU during the capture (cpu_watch::device_charged_ns).
  // The bias an A/B workload's PASS had to be charged: what its A/A, as replayed here, could not rule out.
  double expected_aa_bias_log(const std::string& name) const {
    for (const WorkloadVerdict& v : m_inputs.aa) {
      if (v.workload == name) return aa_bias_log(v).value_or(0.0);
    }
    return 0.0;
  }

  // Each counted block's floor (record/samples.h): from arm A's rows of the block before it (block 0: of the pilot,
  // block -1); from compare.json version 7 on, as compare charged it. The pilot itself is charged whole.
  std::map<int, cpu_watch::Floor> block_floors(const std::string& tag, const std::string& name) const {
    std::map<int, std::vector<const Sample*>> reference;
    std::set<int> blocks;
    for (const SampleRow& s : m_b.samples) {
      if (s.comparison != tag || s.workload != name) continue;
      if (s.block >= 0) blocks.insert(s.block);
      if (s.arm == "A") reference[s.block].push_back(&s);
    }
    std::map<int, cpu_watch::Floor> floors;
    for (int block : blocks) {
      const auto before = reference.find(block - 1);
      floors[block] = before != reference.end() ? block_floor(before->second) : cpu_watch::Floor{};
    }
    return floors;
  }

  void charge_of(const std::string& tag, const std::string& name, const std::string& where) {
    const std::map<int, cpu_watch::Floor> floors =
        version_of(tag == "aa" ? m_b.aa : m_b.ab) >= 7 ? block_floors(tag, name) : std::map<int, cpu_watch::Floor>{};
    for (const SampleRow& s : m_b.samples) {
      if (s.comparison != tag || s.workload != name) continue;
      if (s.outside_cpu_ns >= 0) {
        const int64_t charged = cpu_watch::device_charged_ns(s.window_ns, s.post_cpu_ns);
        if (s.ns != charged) {
          problem(
              fmt::format("{}: samples.csv line {}: the sample is {} ns, but its window ({} ns) plus the CPU "
                          "during the capture ({} ns) is {} ns",
                          where, s.line, s.ns, s.window_ns, s.post_cpu_ns, charged));
        }
        continue;
      }
      const auto floor = floors.find(s.block);
      const cpu_watch::Floor f = floor != floors.end() ? floor->second : cpu_watch::Floor{};
      const int64_t charged = cpu_watch::charged_ns(s.window_ns, s.pre_cpu_ns, s.post_cpu_ns, f);
      if (s.ns != charged) {
        problem(
            fmt::format("{}: samples.csv line {}: the sample is {} ns, but its window ({} ns) plus the CPU charged "
                        "before go ({} ns) and after done ({} ns) beyond its block's floor ({} ns, {} ns) "
                        "is {} ns",
                        where, s.line, s.ns, s.window_ns, s.pre_cpu_ns, s.post_cpu_ns, f.pre_ns, f.post_ns, charged));
      }
    }
  }

  // What makes a workload INVALID, re-derived from samples.csv: a sample that failed validation, an arm whose speed
  // changes with its process's age (stats/aging.h), work moved outside the window, time spent in untimed calls.
  struct Invalidity {
    bool invalid_sample = false, ages = false, moved = false, untimed = false;
    bool any() const { return invalid_sample || ages || moved || untimed; }
  };

  static int version_of(const std::optional<json>& file) { return file ? version_of(*file) : k_compare_schema_version; }

  // An INVALID workload: something re-derived must make it so, and it carries no metric.
  WorkloadVerdict invalid_workload(const std::string& name, const json& w, const std::string& where,
                                   const Invalidity& why) {
    if (!why.any()) {
      problem(
          fmt::format("{}: INVALID, but no sample in samples.csv failed validation, no arm ages and no work "
                      "was moved outside the window",
                      where));
    }
    if (w.contains("improvement_pct") && !w["improvement_pct"].is_null())
      problem(fmt::format("{}: INVALID yet reports a metric", where));
    WorkloadVerdict v{name, stats::Verdict::invalid, std::nullopt, std::nullopt, w.value("reason", std::string())};
    if (!why.invalid_sample) {
      v.invalid_code = why.ages      ? "speed_changes_with_age"
                       : why.moved   ? "work_outside_window"
                       : why.untimed ? "untimed_work"
                                     : "";
    }
    return v;
  }

  // A workload not recorded INVALID must have nothing that makes it so.
  void valid_workload(const std::string& verdict, const std::string& where, const Invalidity& why) {
    if (why.invalid_sample)
      problem(fmt::format("{}: {} although a sample in samples.csv failed validation", where, verdict));
    if (why.ages)
      problem(fmt::format("{}: {} although an arm's speed changes with its process's age (INVALID re-derived)", where,
                          verdict));
    if (why.moved)
      problem(
          fmt::format("{}: {} although work was moved outside the timed window (INVALID re-derived)", where, verdict));
    if (why.untimed)
      problem(
          fmt::format("{}: {} although an arm spends its time in untimed calls (INVALID re-derived)", where, verdict));
  }

  // The A/A bias a PASS was charged (compare.json version 4): the one the replayed A/A leaves, never the file's.
  stats::SequentialGate charged_gate(const stats::SequentialGate& gate, bool aa, const std::string& name, const json& w,
                                     const std::string& where) {
    stats::SequentialGate charged = gate;
    if (aa) return charged;
    charged.aa_bias_log = expected_aa_bias_log(name);
    const int version = version_of(m_b.ab);
    if (version < 4) charged.aa_bias_log = 0.0;  // version 3 ran without the charge
    if (version >= 4 && (!w.contains("aa_bias_log") || !w["aa_bias_log"].is_number() ||
                         !close_enough(w["aa_bias_log"].get<double>(), charged.aa_bias_log))) {
      problem(fmt::format("{}: aa_bias_log {} recorded, but the A/A replayed leaves {}", where,
                          w.value("aa_bias_log", json()).dump(), charged.aa_bias_log));
    }
    return charged;
  }

  // The recorded block log ratios are the ones samples.csv gives; false when any is missing or differs.
  bool ratios_recorded(const json& w, const BlockRatios& r, const std::string& where) {
    const json& recorded = array_field(w, "log_ratios");
    if (!r.complete) return false;
    const std::vector<double>& d = r.log_ratios;
    if (recorded.size() != d.size()) {
      problem(fmt::format("{}: {} log ratios recorded, {} re-derived", where, recorded.size(), d.size()));
      return false;
    }
    for (size_t i = 0; i < d.size(); ++i) {
      if (!recorded[i].is_number() || !close_enough(recorded[i].get<double>(), d[i])) {
        problem(fmt::format("{}: block {} log ratio {} recorded, {} re-derived from samples.csv", where, i,
                            recorded[i].dump(), d[i]));
        return false;
      }
    }
    return true;
  }

  // The layout floor the interval was widened by (compare.json version 8, A/B over a pool): the replay's.
  void layout_floor_recorded(const json& w, const stats::EffectEstimate& est, const std::string& where) {
    const json* rec = w.contains("layout_floor") && w["layout_floor"].is_object() ? &w["layout_floor"] : nullptr;
    const bool applied =
        rec && rec->contains("applied") && (*rec)["applied"].is_boolean() && (*rec)["applied"].get<bool>();
    const bool same = rec && applied == est.layout.applied && rec->contains("variance_log") &&
                      (*rec)["variance_log"].is_number() &&
                      close_enough((*rec)["variance_log"].get<double>(), est.layout.variance_log);
    if (!same) {
      problem(fmt::format("{}: layout_floor {} recorded, but the blocks' builds give applied {} with variance {}",
                          where, rec ? rec->dump() : "(none)", est.layout.applied, est.layout.variance_log));
    }
  }

  // The decision procedure replayed on the re-derived ratios, with the plan's gate; its outcome must be the recorded
  // one.
  WorkloadVerdict replayed(bool aa, const json& w, const std::string& where, const BlockRatios& r,
                           const stats::SequentialGate& charged, uint64_t seed, const stats::AgingCheck& aging) {
    const std::string name = str_field(w, "name"), verdict = str_field(w, "verdict");
    const Replay replay = replay_procedure(r.log_ratios, charged, seed, where, m_report.problems);
    const std::optional<stats::EffectEstimate>& est = replay.estimate;
    const stats::Verdict derived_verdict = stats::aging_unresolved(replay.verdict, aging, aa);
    const std::string derived(stats::to_string(derived_verdict));
    if (derived != verdict)
      problem(fmt::format("{}: verdict {} recorded, {} re-derived from samples.csv", where, verdict, derived));
    if (est) {
      for (auto [key, value] :
           {std::pair{"improvement_pct", est->improvement_pct}, std::pair{"ci_low_pct", est->ci_low_pct},
            std::pair{"ci_high_pct", est->ci_high_pct}, std::pair{"mde_pct", est->mde_pct}}) {
        if (!w.contains(key) || !w[key].is_number() || !close_enough(w[key].get<double>(), value)) {
          problem(fmt::format("{}: {} recorded {}, re-derived {}", where, key, w.value(key, json()).dump(), value));
        }
      }
      if (charged.layouts > 1) layout_floor_recorded(w, *est, where);
    }
    verified(fmt::format("{}: {} blocks, interval and {} re-derived from {} samples with the plan's gate", where,
                         r.log_ratios.size(), derived, r.timed));
    return {name,
            derived_verdict,
            est ? std::optional(est->ci_low_pct) : std::nullopt,
            est ? std::optional(est->ci_high_pct) : std::nullopt,
            "",
            est ? std::optional(est->improvement_pct) : std::nullopt,
            est ? std::optional(est->mde_pct) : std::nullopt};
  }

  void workload(const std::string& tag, bool aa, const std::string& other, const json& w, const std::string& where,
                size_t index, uint64_t comparison_seed, const stats::SequentialGate& gate) {
    auto& out = aa ? m_inputs.aa : m_inputs.ab;
    const std::string name = str_field(w, "name");
    m_workload_blocks[{tag, name}] = uint_field(w, "blocks");
    const uint64_t blocks = uint_field(w, "blocks");
    const BlockRatios r = block_log_ratios(m_b.samples, tag, name, other, blocks, where, m_report.problems);
    if (r.timed != uint_field(w, "samples")) {
      problem(
          fmt::format("{}: reports {} timed samples, samples.csv has {}", where, uint_field(w, "samples"), r.timed));
    }
    charge_of(tag, name, where);
    const std::string verdict = str_field(w, "verdict");
    const uint64_t seed = stats::workload_seed(comparison_seed, index);
    if (uint_field(w, "seed") != seed) {
      problem(fmt::format("{}: seed {} but the plan's seed gives {}", where, uint_field(w, "seed"), seed));
    }
    layouts_of(tag, name, other, w, where, seed);
    // The steady state (stats/aging.h), work outside the window and untimed work, from version 5 on.
    const bool v5 = version_of(tag == "aa" ? m_b.aa : m_b.ab) >= 5;
    const stats::AgingCheck aging = v5 ? aging_of(tag, name, other, w, where) : stats::AgingCheck{};
    const Invalidity why{r.invalid_sample, aging.ages, v5 && outside_of(tag, name, other, w, where).moved,
                         v5 && untimed_of(tag, name, other, w, where).untimed_work};
    if (verdict == "INVALID") {
      out.push_back(invalid_workload(name, w, where, why));
      return;
    }
    valid_workload(verdict, where, why);
    if (blocks > m_plan.budgets.max_blocks)
      problem(fmt::format("{}: {} blocks, over the plan's max_blocks {}", where, blocks, m_plan.budgets.max_blocks));
    const stats::SequentialGate charged = charged_gate(gate, aa, name, w, where);
    if (!ratios_recorded(w, r, where)) {
      out.push_back({name, stats::Verdict::inconclusive, std::nullopt, std::nullopt});  // unverifiable: never a pass
      return;
    }
    out.push_back(replayed(aa, w, where, r, charged, seed, aging));
  }

  // The validated rows of the comparison's counted blocks, both arms, gathered per block into the visits a test of
  // stats/ takes: `add(visit, row)` files one row (or skips it), in block order.
  template <typename Visit, typename Add>
  std::vector<std::array<Visit, 2>> per_block(const std::string& tag, const std::string& name, const std::string& other,
                                              const json& w, Add&& add) const {
    std::map<int, std::array<Visit, 2>> blocks;
    const uint64_t counted = uint_field(w, "blocks");
    for (const SampleRow& s : m_b.samples) {
      if (s.comparison != tag || s.workload != name || s.block < 0 || static_cast<uint64_t>(s.block) >= counted ||
          !s.output_valid || (s.arm != "A" && s.arm != other)) {
        continue;
      }
      add(blocks[s.block][s.arm == "A" ? 0 : 1], s);
    }
    std::vector<std::array<Visit, 2>> list;
    list.reserve(blocks.size());
    for (auto& [b, v] : blocks) list.push_back(std::move(v));
    return list;
  }

  // The long blocks' timed calls, tested as compare tested them; the recorded finding must agree. Which blocks were
  // long is replayed too: the schedule's, and each block after one that left the comparison suspected.
  stats::AgingCheck aging_of(const std::string& tag, const std::string& name, const std::string& other, const json& w,
                             const std::string& where) {
    std::map<int, std::array<stats::AgingVisit, 2>> blocks;
    const uint64_t counted = uint_field(w, "blocks");
    for (const SampleRow& s : m_b.samples) {
      if (s.comparison != tag || s.workload != name || s.block < 0 || static_cast<uint64_t>(s.block) >= counted ||
          !s.output_valid || s.warmup || (s.arm != "A" && s.arm != other)) {
        continue;
      }
      blocks[s.block][s.arm == "A" ? 0 : 1].emplace_back(s.sample_index, static_cast<double>(s.ns));
    }
    std::vector<std::array<stats::AgingVisit, 2>> visits;
    stats::AgingCheck so_far;
    for (const auto& [block, v] : blocks) {
      if (!stats::next_block_long(block, so_far)) continue;
      visits.push_back(v);
      so_far = stats::aging_check(visits);
    }
    const stats::AgingCheck a = stats::aging_check(visits);
    const json& rec = object_field(w, "aging");
    if (bool_field(rec, "ages", " of aging") != a.ages || bool_field(rec, "suspected", " of aging") != a.suspected ||
        uint_field(rec, "long_blocks", " of aging") != a.long_blocks ||
        uint_field(rec, "aging_blocks", " of aging") != a.aging_blocks ||
        !close_enough(num_field(rec, "difference_log"), a.difference_log)) {
      problem(
          fmt::format("{}: aging {} recorded, but samples.csv gives {} long blocks, {} aging, difference {:.6f}, "
                      "ages {}, suspected {}",
                      where, rec.dump(), a.long_blocks, a.aging_blocks, a.difference_log, a.ages, a.suspected));
    }
    return a;
  }

  // Every counted block's device rows, judged as compare judged them; the recorded finding must agree.
  stats::OutsideCheck outside_of(const std::string& tag, const std::string& name, const std::string& other,
                                 const json& w, const std::string& where) {
    const auto visits =
        per_block<stats::OutsideVisit>(tag, name, other, w, [](stats::OutsideVisit& v, const SampleRow& s) {
          if (s.warmup || s.outside_wall_ns < 0) return;
          v.ns.push_back(static_cast<double>(s.ns));
          v.outside_ns.push_back(static_cast<double>(s.outside_wall_ns));
        });
    const stats::OutsideCheck o = stats::outside_window_check(visits);
    const json& rec = object_field(w, "outside_window");
    if (bool_field(rec, "moved", " of outside_window") != o.moved ||
        uint_field(rec, "blocks", " of outside_window") != o.blocks ||
        uint_field(rec, "excess_blocks", " of outside_window") != o.excess_blocks ||
        !close_enough(num_field(rec, "excess_ns"), o.excess_ns)) {
      problem(
          fmt::format("{}: outside_window {} recorded, but samples.csv gives {} blocks, {} with excess, excess "
                      "{:.1f} ns, moved {}",
                      where, rec.dump(), o.blocks, o.excess_blocks, o.excess_ns, o.moved));
    }
    return o;
  }

  // Every counted block's calls, timed and untimed, judged as compare judged them; the recorded finding must agree.
  stats::UntimedCheck untimed_of(const std::string& tag, const std::string& name, const std::string& other,
                                 const json& w, const std::string& where) {
    const auto visits =
        per_block<stats::UntimedVisit>(tag, name, other, w, [](stats::UntimedVisit& v, const SampleRow& s) {
          (s.warmup ? v.untimed_ns : v.timed_ns).push_back(static_cast<double>(s.ns));
        });
    const stats::UntimedCheck u = stats::untimed_check(visits);
    const json& rec = object_field(w, "untimed");
    if (bool_field(rec, "untimed_work", " of untimed") != u.untimed_work ||
        uint_field(rec, "blocks", " of untimed") != u.blocks ||
        uint_field(rec, "excess_blocks", " of untimed") != u.excess_blocks) {
      problem(fmt::format("{}: untimed {} recorded, but samples.csv gives {} blocks, {} with excess, untimed_work {}",
                          where, rec.dump(), u.blocks, u.excess_blocks, u.untimed_work));
    }
    return u;
  }

  // Every timed visit ran the layout the plan's seed draws for it (build, stack offset, tensor offsets), and each
  // arm's layout sensitivity follows from the visits' medians.
  void layouts_of(const std::string& tag, const std::string& name, const std::string& other, const json& w,
                  const std::string& where, uint64_t seed) {
    if (uint_field(w, "layouts") != static_cast<uint64_t>(m_plan.layout.layouts)) {
      problem(fmt::format("{}: {} layouts, the plan has {}", where, uint_field(w, "layouts"), m_plan.layout.layouts));
    }
    size_t wrong = 0;
    std::map<std::pair<std::string, int>, std::pair<int, std::vector<double>>> visits;
    for (const SampleRow& s : m_b.samples) {
      if (s.comparison != tag || s.workload != name || s.block < 0) continue;
      const size_t arm = s.arm == "A" ? 0 : 1;
      const stats::VisitLayout want =
          stats::visit_layout(seed, arm, s.block, m_plan.layout.layouts, m_plan.layout.tensors, m_plan.layout.offsets);
      if (s.layout != want.variant || s.stack_offset != want.stack_offset || s.tensor_offsets != want.tensor_offsets) {
        if (wrong++ == 0) {
          problem(fmt::format("{}: samples.csv:{} ran layout {} (stack {}), the plan's seed draws layout {} (stack {})",
                              where, s.line, s.layout, s.stack_offset, want.variant, want.stack_offset));
        }
      }
      if (!s.warmup && s.output_valid) {
        auto& v = visits[{s.arm, s.block}];
        v.first = s.layout;
        v.second.push_back(static_cast<double>(s.ns));
      }
    }
    if (wrong > 1) problem(fmt::format("{}: {} more samples ran another layout than the plan draws", where, wrong - 1));
    const json& recorded = array_field(w, "layout_sensitivity");
    const std::string labels[2] = {"A", other};
    for (size_t arm = 0; arm < 2; ++arm) {
      std::vector<std::pair<int, double>> medians;
      for (const auto& [key, v] : visits) {
        if (key.first == labels[arm]) medians.emplace_back(v.first, stats::median(v.second));
      }
      const stats::LayoutSensitivity l = stats::layout_sensitivity(medians, m_plan.layout.layouts, seed ^ arm);
      if (recorded.size() != 2 || bool_field(recorded[arm], "available") != l.available ||
          (l.available && (!close_enough(num_field(recorded[arm], "observed_spread_pct"), l.observed_spread_pct) ||
                           !close_enough(num_field(recorded[arm], "spread_pct"), l.spread_pct) ||
                           !close_enough(num_field(recorded[arm], "ci_low_pct"), l.ci_low_pct) ||
                           !close_enough(num_field(recorded[arm], "ci_high_pct"), l.ci_high_pct) ||
                           !close_enough(num_field(recorded[arm], "null_spread_pct"), l.null_spread_pct) ||
                           !close_enough(num_field(recorded[arm], "p_value"), l.p_value)))) {
        problem(
            fmt::format("{}: layout sensitivity of arm {} does not follow from samples.csv (re-derived {:.3f}% "
                        "[{:.3f}%, {:.3f}%])",
                        where, labels[arm], l.spread_pct, l.ci_low_pct, l.ci_high_pct));
      }
    }
  }

  // Every samples.csv row belongs to a planned comparison, workload and arm.
  void samples_belong() {
    size_t bad = 0;
    for (const SampleRow& s : m_b.samples) {
      const bool aa = s.comparison == "aa";
      const bool known_cmp = (aa && m_b.aa) || (s.comparison == "ab" && m_b.ab);
      const bool known_workload = std::find(m_workloads.begin(), m_workloads.end(), s.workload) != m_workloads.end();
      const bool known_arm = s.arm == "A" || s.arm == (aa ? "A'" : "B");
      auto blocks = m_workload_blocks.find({s.comparison, s.workload});
      // An INVALID workload ends in the block that failed, which it does not count.
      const bool known_block = s.block >= -1 && (blocks == m_workload_blocks.end() ||
                                                 static_cast<uint64_t>(int64_t{s.block} + 1) <= blocks->second + 1);
      if (!known_cmp || !known_workload || !known_arm || !known_block) {
        if (bad++ < 5) {
          problem(
              fmt::format("samples.csv:{}: a row of comparison '{}', workload '{}', arm '{}', block {} that no "
                          "planned comparison has",
                          s.line, s.comparison, s.workload, s.arm, s.block));
        }
      }
    }
    if (bad > 5) problem(fmt::format("samples.csv: {} more rows outside the plan", bad - 5));
    if (bad == 0)
      verified(fmt::format("samples.csv: {} rows, each of a planned comparison, workload and arm", m_b.samples.size()));
  }

  // What the stages say they did must have left its evidence; a stage may be skipped only when what it depends on
  // failed, or (the profile) when the plan says so. Deleting a file is then a problem, never a different decision.
  // stages.json against the declaration (record/stages.h): the declared stages in their order; every stage whose
  // needs held ran, none ran without them, and each that ran left its evidence.
  void required_evidence() {
    std::vector<std::string> names;
    std::map<std::string, std::string> status;
    for (const json& s : array_field(m_b.stages, "stages")) {
      names.push_back(str_field(s, "name", " of a stage"));
      status[names.back()] = str_field(s, "status", " of a stage");
    }
    if (names != m_graph.names()) {
      problem(fmt::format("stages.json: the stages are [{}], but the declaration this kwb follows has [{}]",
                          fmt::join(names, ", "), fmt::join(m_graph.names(), ", ")));
    }
    bool interrupted = false;
    for (const auto& [name, st] : status) {
      if (st == "pending" || st == "running")
        problem(fmt::format("stages.json: stage {} is still '{}' in a decided bundle", name, st));
      interrupted = interrupted || st == "interrupted";
    }
    std::vector<std::pair<Stage, std::string>> ended;
    for (const StageSpec& spec : m_graph.specs()) {
      const std::string st = status.contains(spec.name) ? status.at(spec.name) : "missing";
      const std::optional<std::string> skip = stage_skip_reason(
          m_graph, spec, ended,
          candidate_skip_reason(candidate_built().value_or(true), candidate_identical().value_or(false)),
          m_plan.profile);
      const bool ran = st == "ok" || st == "failed";
      if (!skip && st == "skipped" && !interrupted) {
        problem(
            fmt::format("stages.json: stage {} was skipped although every stage it needs ended ok and the plan "
                        "asks for it",
                        spec.name));
      } else if (skip && st != "skipped" && st != "missing") {
        problem(fmt::format("stages.json: stage {} is '{}', but it should have been {}", spec.name, st, *skip));
      }
      if (ran) {
        for (const std::string& file : spec.evidence) require_file(spec.name, st, file);
      }
      ended.emplace_back(spec.stage, st);
    }
    // From the evidence itself, not from what stages.json says of it: checks that pass call for the A/A, and an
    // A/A that allows it calls for the A/B.
    auto ran = [&](const char* stage) { return status[stage] == "ok" || status[stage] == "failed"; };
    const bool both_pass = pass_of("baseline").value_or(false) && pass_of("candidate").value_or(false);
    if (both_pass && !ran("aa") && status["aa"] != "error") {
      problem(fmt::format("stages.json: the A/A stage is '{}' although baseline and candidate pass their checks",
                          status["aa"]));
    }
    const bool aa_allows_ab =
        both_pass && m_b.aa && std::none_of(m_inputs.aa.begin(), m_inputs.aa.end(), [](const WorkloadVerdict& w) {
          return w.verdict == stats::Verdict::fail || w.verdict == stats::Verdict::invalid;
        });
    if (aa_allows_ab && !ran("ab") && status["ab"] != "error") {
      problem(fmt::format("stages.json: the A/B stage is '{}' although the A/A calibration allowed it", status["ab"]));
    }
    if (ran("final_validation") && !m_b.final_.empty()) {
      if (pass_of("candidate").value_or(false) && array_field(m_b.final_, "identity_mismatches").empty()) {
        require_file("final_validation", status["final_validation"], check_file("candidate_final"));
      }
      if (m_final_nonce && uint_field(m_b.final_, "final_nonce") != *m_final_nonce) {
        problem(fmt::format("final.json: final_nonce {} but the revealed data secret gives {}",
                            uint_field(m_b.final_, "final_nonce"), *m_final_nonce));
      }
    }
  }

  // A stage's evidence file; "{control}" stands for each planned control.
  void require_file(const std::string& stage, const std::string& status, const std::string& file) {
    std::vector<std::string> files;
    const size_t at = file.find("{control}");
    if (at == std::string::npos) {
      files.push_back(file);
    } else {
      for (const PlannedImpl& pc : m_plan.implementations) {
        if (pc.role == ImplRole::control) files.push_back(std::string(file).replace(at, 9, pc.name));
      }
    }
    for (const std::string& f : files) {
      if (m_b.fs->kind(f) != BundleFs::Kind::file) {
        problem(fmt::format("stages.json: stage {} is '{}' but {} is missing", stage, status, f));
      }
    }
  }

  void decision() {
    if (!m_b.decision) return;
    m_inputs.baseline_check_pass = pass_of("baseline");
    m_inputs.candidate_check_pass = pass_of("candidate");
    m_inputs.candidate_built = candidate_built();
    m_inputs.candidate_identical = candidate_identical();
    m_inputs.final_check_pass = pass_of("candidate_final");
    m_inputs.min_improvement_pct = m_plan.gates.min_improvement_pct;
    m_inputs.same_margin_pct = m_plan.gates.same_margin_pct;
    if (!m_b.final_.empty()) {
      for (const json& m : array_field(m_b.final_, "identity_mismatches")) {
        if (!m.is_string()) throw FieldError("final.json: identity_mismatches must list strings");
        m_inputs.identity_mismatches.push_back(m.get<std::string>());
      }
      for (const json& d : array_field(m_b.final_, "environment_differences")) {
        m_inputs.environment_mismatches.push_back(
            fmt::format("{}: plan '{}', now '{}'", str_field(d, "item"), str_field(d, "planned"), str_field(d, "now")));
      }
    }
    for (const json& s : array_field(m_b.stages, "stages")) {
      if (str_field(s, "status") == "error") {
        m_inputs.stage_errors.push_back(fmt::format("{}: {}", str_field(s, "name"), str_field(s, "summary")));
      }
    }
    // Identity mismatches found during earlier stages are recorded in the decision's inputs; keep those the final
    // stage did not see (they stopped the run before it).
    const json& recorded = m_b.decision->inputs;
    if (recorded.contains("identity_mismatches")) {
      for (const json& m : array_field(recorded, "identity_mismatches")) {
        if (!m.is_string()) throw FieldError("inputs.identity_mismatches must list strings");
        const std::string s = m.get<std::string>();
        if (std::find(m_inputs.identity_mismatches.begin(), m_inputs.identity_mismatches.end(), s) ==
            m_inputs.identity_mismatches.end()) {
          m_inputs.identity_mismatches.push_back(s);
        }
      }
    }
    const Decision d = decide(m_inputs);
    if (m_b.decision->decision != d.decision) {
      problem(fmt::format("decision.json: decision {} does not follow from the evidence, which gives {} ({})",
                          m_b.decision->decision, d.decision, fmt::join(d.reasons, "; ")));
    } else if (m_b.decision->exit_code != d.exit_code) {
      problem(
          fmt::format("decision.json: exit_code {} but {} means {}", m_b.decision->exit_code, d.decision, d.exit_code));
    } else if (m_b.decision->reason_codes != d.reason_codes) {
      problem(fmt::format("decision.json: reason codes [{}], but the evidence gives [{}]",
                          fmt::join(m_b.decision->reason_codes, ", "), fmt::join(d.reason_codes, ", ")));
    } else {
      verified(fmt::format("decision.json: {} follows from the re-derived evidence", d.decision));
    }
  }

  fs::path m_dir;
  const StageGraph& m_graph;
  BundleData m_b;
  VerifyReport m_report;
  Plan m_plan;
  bool m_plan_ok = false;
  std::optional<uint64_t> m_final_nonce;                               // from the revealed data secret (data_secret())
  std::vector<std::string> m_workloads, m_case_names, m_timing_cases;  // from the plan
  std::map<std::string, bool> m_check_pass;                            // by check stem, re-derived
  std::map<std::pair<std::string, std::string>, uint64_t> m_workload_blocks;
  DecisionInputs m_inputs;
};

}  // namespace

VerifyReport verify_bundle(const fs::path& dir, const StageGraph& stages) { return Verifier(dir, stages).run(); }

}  // namespace kwb
