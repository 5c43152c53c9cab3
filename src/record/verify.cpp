#include "record/verify.h"

#include "record/bundle_reader.h"
#include "record/bundle_writer.h"
#include "record/decision.h"
#include "stats/alpha_spending_rule.h"
#include "stats/descriptive.h"
#include "stats/effect.h"
#include "stats/gate.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

namespace kwb {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class Verifier {
public:
  explicit Verifier(const fs::path& dir) : m_dir(dir), m_b(read_bundle(dir)) {}

  VerifyReport run() {
    for (const std::string& p : m_b.problems) problem(p);
    manifest();
    schemas();
    plan_digest();
    artifacts();
    checks();
    controls();
    comparison("aa", m_b.aa);
    comparison("ab", m_b.ab);
    decision();
    return m_report;
  }

private:
  void problem(const std::string& p) { m_report.problems.push_back(p); }
  void verified(const std::string& v) { m_report.verified.push_back(v); }

  void manifest() {
    const fs::path mf = m_dir / k_manifest_file;
    if (!fs::exists(mf)) {
      problem(fmt::format("{}: missing (the run did not finish, or the file was removed)", k_manifest_file));
      return;
    }
    std::istringstream in(read_file(mf));
    std::string line;
    std::set<std::string> listed;
    size_t n = 0, bad = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.size() < 67 || line.substr(64, 2) != "  ") {
        problem(fmt::format("{}:{}: not a 'sha256  path' line", k_manifest_file, n));
        ++bad;
        continue;
      }
      const std::string hash = line.substr(0, 64), path = line.substr(66);
      listed.insert(path);
      if (!fs::exists(m_dir / path)) {
        problem(fmt::format("{}: listed in {} but missing", path, k_manifest_file));
        ++bad;
      } else if (sha256_file(m_dir / path) != hash) {
        problem(fmt::format("{}: content changed (manifest {}, file {})", path, hash, sha256_file(m_dir / path)));
        ++bad;
      }
    }
    for (const auto& e : fs::recursive_directory_iterator(m_dir)) {
      if (!e.is_regular_file()) continue;
      const std::string rel = fs::relative(e.path(), m_dir).generic_string();
      if (rel != k_manifest_file && !listed.contains(rel)) {
        problem(fmt::format("{}: present but not in {}", rel, k_manifest_file));
        ++bad;
      }
    }
    if (bad == 0) verified(fmt::format("{}: {} files, every hash matches", k_manifest_file, listed.size()));
  }

  void expect_schema(const std::string& file, const json& j, const std::string& schema) {
    if (j.empty()) return;  // absence already reported
    if (j.value("schema", "") != schema || !j.contains("schema_version") || !j["schema_version"].is_number_integer()) {
      problem(fmt::format("{}: schema is '{}' v{}, expected '{}' with a version", file, j.value("schema", ""),
                          j.value("schema_version", json()).dump(), schema));
    }
  }

  void schemas() {
    expect_schema("plan.json", m_b.plan, "kwb.plan");
    expect_schema("environment.json", m_b.environment, "kwb.environment");
    expect_schema("stages.json", m_b.stages, "kwb.stages");
    expect_schema("decision.json", m_b.decision, "kwb.decision");
    if (!m_b.controls.empty()) expect_schema("controls.json", m_b.controls, "kwb.controls");
    if (!m_b.final_.empty()) expect_schema("final.json", m_b.final_, "kwb.final");
    for (const auto& [k, j] : m_b.checks) expect_schema("checks/" + k + ".json", j, "kwb.check");
    if (m_b.aa) expect_schema("comparisons/aa.json", *m_b.aa, "kwb.compare");
    if (m_b.ab) expect_schema("comparisons/ab.json", *m_b.ab, "kwb.compare");
  }

  void plan_digest() {
    if (!fs::exists(m_dir / "plan.json") || m_b.decision.empty()) return;
    const std::string digest = sha256_file(m_dir / "plan.json");
    if (m_b.decision.value("plan_digest", "") != digest) {
      problem(fmt::format("decision.json: plan_digest {} but plan.json hashes to {}", m_b.decision.value("plan_digest", ""),
                          digest));
    } else {
      verified("plan.json: digest matches the decision's plan_digest");
    }
  }

  void artifacts() {
    if (!m_b.plan.is_object()) return;
    size_t n = 0;
    for (const json& im : m_b.plan.value("implementations", json::array())) {
      const json id = im.value("identity", json::object());
      for (auto [key, hash_key] : {std::pair{"bundle_source", "source_sha256"}, std::pair{"bundle_artifact", "artifact_sha256"}}) {
        const std::string rel = im.value(key, "");
        if (rel.empty()) continue;
        if (!fs::exists(m_dir / rel)) {
          problem(fmt::format("{}: artifact of {} missing", rel, im.value("name", "?")));
          continue;
        }
        const std::string now = sha256_file(m_dir / rel);
        if (now != id.value(hash_key, "")) {
          problem(fmt::format("{}: {} of {} is {} in plan.json but the file hashes to {}", rel, hash_key,
                              im.value("name", "?"), id.value(hash_key, ""), now));
        } else {
          ++n;
        }
      }
    }
    verified(fmt::format("artifacts/: {} sources and objects hash to their plan identities", n));
  }

  static bool check_pass(const json& c) {
    return c.value("implementation", json::object()).value("built", false) &&
           c.value("assertions", json::object()).value("failed", 1) == 0 &&
           c.value("assertions", json::object()).value("passed", 0) > 0;
  }

  void checks() {
    for (const auto& [stem, c] : m_b.checks) {
      const std::string file = "checks/" + stem + ".json";
      const json a = c.value("assertions", json::object());
      const size_t failures = c.value("failures", json::array()).size();
      if (a.value("failed", size_t{0}) != failures) {
        problem(fmt::format("{}: {} assertions failed but {} failures are listed", file, a.value("failed", 0), failures));
      }
      size_t cp = 0, cf = 0;
      for (const json& cs : c.value("cases", json::array())) {
        cp += cs.value("passed", size_t{0});
        cf += cs.value("failed", size_t{0});
      }
      if (!c.value("cases", json::array()).empty() && (cp != a.value("passed", size_t{0}) || cf != a.value("failed", size_t{0}))) {
        problem(fmt::format("{}: per-case counts ({} passed, {} failed) do not add up to the totals ({}, {})", file,
                            cp, cf, a.value("passed", 0), a.value("failed", 0)));
      }
      const std::string derived = check_pass(c) ? "PASS" : "FAIL";
      if (c.value("verdict", "") != derived) {
        problem(fmt::format("{}: verdict {} does not follow from its assertions ({})", file, c.value("verdict", ""), derived));
      }
      // The check must be of an implementation the plan froze.
      const std::string art = c.value("implementation", json::object()).value("identity", json::object()).value("artifact_sha256", "");
      bool planned = false;
      for (const json& im : m_b.plan.value("implementations", json::array())) {
        planned = planned || im.value("identity", json::object()).value("artifact_sha256", "") == art;
      }
      if (!planned) problem(fmt::format("{}: checks artifact {} which the plan does not contain", file, art));
    }
    verified(fmt::format("checks/: {} reports, verdicts follow from their assertions", m_b.checks.size()));
  }

  void controls() {
    if (m_b.controls.empty()) return;
    size_t killed = 0;
    for (const json& c : m_b.controls.value("controls", json::array())) {
      const std::string name = c.value("name", "?");
      auto it = m_b.checks.find("control_" + name);
      if (it == m_b.checks.end()) {
        problem(fmt::format("controls.json: control '{}' has no checks/control_{}.json", name, name));
        continue;
      }
      const bool rejected = !check_pass(it->second);
      bool seen = false;
      for (const json& f : it->second.value("failures", json::array())) seen = seen || f.value("reason", "") == c.value("expect", "");
      ControlOutcome o{name, c.value("expect", ""), rejected, seen, rejected};
      m_inputs.controls.push_back(o);
      if (c.value("rejected", !rejected) != rejected || c.value("expected_reason_seen", !seen) != seen ||
          c.value("timing_refused", !rejected) != rejected || !c.value("metric", json(1)).is_null()) {
        problem(fmt::format("controls.json: control '{}' does not match its check (rejected {}, expected reason seen {})",
                            name, rejected, seen));
      }
      killed += rejected && seen;
    }
    if (m_b.controls.value("killed", size_t{0}) != killed) {
      problem(fmt::format("controls.json: killed = {} but the checks show {}", m_b.controls.value("killed", 0), killed));
    }
    verified(fmt::format("controls.json: {} controls re-derived from their checks", m_inputs.controls.size()));
  }

  static bool close(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

  void comparison(const std::string& tag, const std::optional<json>& cmp) {
    if (!cmp) return;
    const std::string file = "comparisons/" + tag + ".json";
    const json gate = cmp->value("gate", json::object());
    const bool aa = cmp->value("mode", "") == "aa";
    const std::string other = aa ? "A'" : "B";
    const size_t min_blocks = cmp->value("budgets", json::object()).value("min_blocks", size_t{10});
    const stats::AlphaSpendingRule rule(gate.value("alpha", 0.05),
                                        std::max(min_blocks, stats::AlphaSpendingRule::k_smallest_min_blocks));
    auto judge = [&](const stats::EffectEstimate& e) {
      if (aa) return stats::aa_verdict(e, gate.value("max_aa_difference_pct", 1.0));
      return stats::improvement_verdict(e, gate.value("min_improvement_pct", 0.0),
                                        gate.value("kind", "ci") == "point" ? stats::GateKind::point : stats::GateKind::ci);
    };
    for (const json& w : cmp->value("workloads", json::array())) {
      const std::string name = w.value("name", "?");
      const std::string where = fmt::format("{} workload '{}'", file, name);
      // Per block and arm: the timed, validated samples.
      std::map<std::pair<int, std::string>, std::vector<double>> cells;
      size_t timed = 0;
      bool invalid_sample = false;
      for (const SampleRow& s : m_b.samples) {
        if (s.comparison != tag || s.workload != name || s.block < 0) continue;
        if (!s.output_valid) invalid_sample = true;
        if (s.warmup) continue;
        ++timed;
        if (s.output_valid) cells[{s.block, s.arm}].push_back(static_cast<double>(s.ns));
      }
      if (timed != w.value("samples", size_t{0})) {
        problem(fmt::format("{}: reports {} timed samples, samples.csv has {}", where, w.value("samples", 0), timed));
      }
      const std::string verdict = w.value("verdict", "");
      if (verdict == "INVALID") {
        if (!invalid_sample) problem(fmt::format("{}: INVALID, but no sample in samples.csv failed validation", where));
        if (!w.value("improvement_pct", json()).is_null()) problem(fmt::format("{}: INVALID yet reports a metric", where));
        (aa ? m_inputs.aa : m_inputs.ab).push_back({name, verdict});
        continue;
      }
      std::vector<double> d;
      const size_t blocks = w.value("blocks", size_t{0});
      bool complete = true;
      for (size_t blk = 0; blk < blocks; ++blk) {
        auto a = cells.find({static_cast<int>(blk), "A"});
        auto b = cells.find({static_cast<int>(blk), other});
        if (a == cells.end() || b == cells.end()) {
          problem(fmt::format("{}: block {} has no timed samples for {} in samples.csv", where, blk,
                              a == cells.end() ? "A" : other));
          complete = false;
          break;
        }
        d.push_back(std::log(stats::median(b->second) / stats::median(a->second)));
      }
      for (const auto& [key, v] : cells) {
        if (static_cast<size_t>(key.first) >= blocks) {
          problem(fmt::format("{}: samples.csv has block {} which the comparison does not count", where, key.first));
          complete = false;
          break;
        }
      }
      const json recorded = w.value("log_ratios", json::array());
      if (complete && recorded.size() != d.size()) {
        problem(fmt::format("{}: {} log ratios recorded, {} re-derived", where, recorded.size(), d.size()));
        complete = false;
      }
      for (size_t i = 0; complete && i < d.size(); ++i) {
        if (!close(recorded[i].get<double>(), d[i])) {
          problem(fmt::format("{}: block {} log ratio {} recorded, {} re-derived from samples.csv", where, i,
                              recorded[i].get<double>(), d[i]));
          complete = false;
        }
      }
      if (!complete) {
        (aa ? m_inputs.aa : m_inputs.ab).push_back({name, "UNVERIFIABLE"});
        continue;
      }
      // Replay the sequential procedure on the re-derived ratios.
      const uint64_t seed = w.value("seed", uint64_t{0});
      std::optional<stats::EffectEstimate> est;
      std::optional<stats::Verdict> v;
      size_t stop = 0;
      const bool point = gate.value("kind", "ci") == "point";
      for (size_t n = 2; n <= d.size(); ++n) {
        if (!rule.is_look(n)) continue;
        auto e = stats::estimate_effect(std::span(d).first(n), rule.confidence_at_look(rule.look_index(n)), seed ^ n);
        auto vv = judge(e);
        est = e;
        v = vv;
        stop = n;
        if (vv != stats::Verdict::inconclusive || point) break;
      }
      if (d.size() >= 2 && (stop != d.size())) {
        // Ended by the budget between looks: the final analysis spends like one more look.
        est = stats::estimate_effect(d, rule.confidence_for_final(rule.look_index(d.size())), seed ^ d.size());
        v = judge(*est);
      }
      std::string derived = v ? std::string(stats::to_string(*v)) : "INCONCLUSIVE";
      if (derived != verdict) {
        problem(fmt::format("{}: verdict {} recorded, {} re-derived from samples.csv", where, verdict, derived));
      }
      if (est) {
        for (auto [key, value] : {std::pair{"improvement_pct", est->improvement_pct}, std::pair{"ci_low_pct", est->ci_low_pct},
                                  std::pair{"ci_high_pct", est->ci_high_pct}, std::pair{"mde_pct", est->mde_pct}}) {
          if (!w.contains(key) || !w[key].is_number() || !close(w[key].get<double>(), value)) {
            problem(fmt::format("{}: {} recorded {}, re-derived {}", where, key, w.value(key, json()).dump(), value));
          }
        }
      }
      (aa ? m_inputs.aa : m_inputs.ab).push_back({name, derived});
      verified(fmt::format("{}: {} blocks, interval and {} re-derived from {} samples", where, d.size(), derived, timed));
    }
  }

  void decision() {
    if (m_b.decision.empty()) return;
    auto pass_of = [&](const char* stem) -> std::optional<bool> {
      auto it = m_b.checks.find(stem);
      if (it == m_b.checks.end()) return std::nullopt;
      return check_pass(it->second);
    };
    m_inputs.baseline_check_pass = pass_of("baseline");
    m_inputs.baseline_copy_check_pass = pass_of("baseline_copy");
    m_inputs.candidate_check_pass = pass_of("candidate");
    m_inputs.final_check_pass = pass_of("candidate_final");
    if (m_b.final_.is_object()) {
      m_inputs.identity_mismatches = m_b.final_.value("identity_mismatches", std::vector<std::string>{});
      for (const json& d : m_b.final_.value("environment_differences", json::array())) {
        m_inputs.environment_mismatches.push_back(fmt::format("{}: plan '{}', now '{}'", d.value("item", ""),
                                                              d.value("planned", ""), d.value("now", "")));
      }
    }
    for (const json& s : m_b.stages.value("stages", json::array())) {
      if (s.value("status", "") == "error") {
        m_inputs.stage_errors.push_back(fmt::format("{}: {}", s.value("name", ""), s.value("summary", "")));
      }
    }
    // Identity mismatches found during earlier stages are recorded in the decision's inputs; keep those the final
    // stage did not see (they stopped the run before it).
    const json recorded = m_b.decision.value("inputs", json::object());
    for (const json& m : recorded.value("identity_mismatches", json::array())) {
      const std::string s = m.get<std::string>();
      if (std::find(m_inputs.identity_mismatches.begin(), m_inputs.identity_mismatches.end(), s) ==
          m_inputs.identity_mismatches.end()) {
        m_inputs.identity_mismatches.push_back(s);
      }
    }
    const Decision d = decide(m_inputs);
    if (m_b.decision.value("decision", "") != d.decision) {
      problem(fmt::format("decision.json: decision {} does not follow from the evidence, which gives {} ({})",
                          m_b.decision.value("decision", ""), d.decision, fmt::join(d.reasons, "; ")));
    } else if (m_b.decision.value("exit_code", -1) != d.exit_code) {
      problem(fmt::format("decision.json: exit_code {} but {} means {}", m_b.decision.value("exit_code", -1), d.decision,
                          d.exit_code));
    } else {
      verified(fmt::format("decision.json: {} follows from the re-derived evidence", d.decision));
    }
  }

  fs::path m_dir;
  BundleData m_b;
  VerifyReport m_report;
  DecisionInputs m_inputs;
};

}  // namespace

VerifyReport verify_bundle(const fs::path& dir) { return Verifier(dir).run(); }

}  // namespace kwb
