#include "ledger/bundle_entry.h"

#include "record/bundle_reader.h"
#include "record/bundle_writer.h"
#include "record/decision.h"
#include "record/verify.h"
#include "util/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

namespace kwb {

namespace {

const nlohmann::json* implementation(const nlohmann::json& plan, const std::string& role) {
  if (!plan.contains("implementations") || !plan["implementations"].is_array()) return nullptr;
  for (const nlohmann::json& i : plan["implementations"]) {
    if (i.is_object() && i.value("role", "") == role) return &i;
  }
  return nullptr;
}

std::string text_at(const nlohmann::json& j, const nlohmann::json::json_pointer& p) {
  return j.contains(p) && j[p].is_string() ? j[p].get<std::string>() : "";
}

[[noreturn]] void missing(const std::filesystem::path& bundle, const std::string& what) {
  throw Error(ExitCode::invalid, fmt::format("{}: {} (not a complete kwb validate bundle)", bundle.string(), what));
}

// Whether the bundle's baseline is the one its task declares for the backend (the manifest the plan embeds, resolved
// against the task folder the plan names), which is what generation 0 of a lineage must be.
bool is_task_baseline(const nlohmann::json& plan, BackendKind backend, const std::string& source) {
  const std::string manifest = text_at(plan, "/task/manifest"_json_pointer);
  const std::string dir = text_at(plan, "/task/dir"_json_pointer);
  toml::table parsed;
  try {
    parsed = toml::parse(manifest);
  } catch (const toml::parse_error&) {
    return false;
  }
  const std::optional<std::string> declared = parsed["backends"][to_string(backend)]["baseline"].value<std::string>();
  if (!declared || dir.empty()) return false;
  return (std::filesystem::path(dir) / *declared).lexically_normal() == std::filesystem::path(source).lexically_normal();
}

LedgerArm arm_of(const nlohmann::json& impl) {
  return {impl.value("role", ""), impl.value("source", ""), text_at(impl, "/identity/key"_json_pointer)};
}

}  // namespace

LedgerRun run_from_bundle(const std::filesystem::path& bundle) {
  const BundleData b = read_bundle(bundle);
  if (!b.plan.is_object() || b.plan.empty()) missing(bundle, "no plan.json");
  if (!b.decision.is_object() || b.decision.empty()) missing(bundle, "no decision.json");
  LedgerRun r;
  r.kind = "validate";
  r.task = text_at(b.plan, "/task/name"_json_pointer);
  r.task_dir = text_at(b.plan, "/task/dir"_json_pointer);
  const std::optional<BackendKind> backend = parse_backend(b.plan.value("backend", ""));
  if (r.task.empty() || !backend) missing(bundle, "plan.json names no task or no backend kwb knows");
  r.backend = *backend;
  r.started = b.plan.value("created", "");
  r.finished = b.decision.value("created", "");
  r.outcome = b.decision.value("decision", "");
  if (b.decision.contains("reasons") && b.decision["reasons"].is_array()) {
    for (const auto& x : b.decision["reasons"]) {
      if (x.is_string()) r.reasons.push_back(x.get<std::string>());
    }
  }
  r.plan_digest = b.decision.value("plan_digest", "");
  r.bundle = std::filesystem::absolute(bundle).lexically_normal().string();
  std::string why;
  if (b.fs) r.manifest_sha256 = b.fs->sha256(k_manifest_file, why).value_or("");
  for (const char* role : {"baseline", "candidate"}) {
    if (const nlohmann::json* impl = implementation(b.plan, role)) r.arms.push_back(arm_of(*impl));
  }
  if (b.ab && (*b.ab).contains("workloads")) r.workloads = workloads_from_json((*b.ab)["workloads"]);
  for (const auto* cmp : {&b.aa, &b.ab}) {
    if (*cmp && (**cmp).contains("timing_lock") && (**cmp)["timing_lock"].is_object()) {
      r.timing_holds.push_back((**cmp)["timing_lock"]);
    }
  }
  return r;
}

std::optional<LedgerRun> recorded_run(const Ledger& ledger, const BundleSeal& seal) {
  for (LedgerRun& r : ledger.runs_with_manifest(seal.manifest_sha256)) {
    if ((r.kind == "validate" || r.kind == "revalidate") && r.plan_digest == seal.plan_digest &&
        r.outcome == seal.decision) {
      return std::move(r);
    }
  }
  return std::nullopt;
}

Authenticity authenticity(const VerifyReport& report, const Ledger* ledger) {
  Authenticity a;
  if (ledger == nullptr) {
    a.ledger_detail = "no ledger to consult (KWB_LEDGER=none, or none was written here yet)";
  } else if ((a.recorded = recorded_run(*ledger, report.seal))) {
    a.ledger_detail = fmt::format("recorded by this machine's ledger {} at the end of its run (run {}, {} {})",
                                  ledger->path().string(), a.recorded->id, a.recorded->kind, a.recorded->finished);
  } else {
    a.ledger_detail = fmt::format("this bundle's manifest digest ({}) does not match any run this machine's ledger "
                                  "{} recorded at the end of its run, with this plan digest and decision: it was "
                                  "changed after the run, or it was not recorded here",
                                  report.seal.manifest_sha256.empty() ? "no manifest" : report.seal.manifest_sha256,
                                  ledger->path().string());
  }
  const bool signed_ok = report.signature.state == SignatureCheck::State::trusted;
  a.authentic = report.ok() && (signed_ok || a.recorded.has_value());
  if (a.authentic) {
    std::vector<std::string> by;
    if (a.recorded) by.push_back(a.ledger_detail);
    if (signed_ok) by.push_back(report.signature.detail);
    a.summary = "authentic: " + fmt::format("{}", fmt::join(by, "; and "));
  } else if (!report.ok()) {
    a.summary = "not authentic: the bundle does not verify";
  } else {
    a.summary = fmt::format("self-consistent only: the hashes agree, but nothing proves who made it ({}; {})",
                            report.signature.detail, a.ledger_detail);
  }
  return a;
}

KeepOutcome keep_bundle(Ledger& ledger, const std::filesystem::path& bundle) {
  KeepOutcome out;
  const VerifyReport v = verify_bundle(bundle);
  if (!v.ok()) {
    out.exit_code = static_cast<int>(ExitCode::invalid);
    out.problems = v.problems;
    out.message = fmt::format("{} does not verify ({} problem(s)): nothing is kept from a bundle that does not",
                              bundle.string(), v.problems.size());
    return out;
  }
  // A bundle that verifies is only self-consistent: its hashes could have been recomputed after an edit. Only the
  // run this machine recorded is kept, byte for byte as it was written.
  if (!recorded_run(ledger, v.seal)) {
    out.exit_code = static_cast<int>(ExitCode::not_authentic);
    out.message = fmt::format("{} is not kept: this bundle's manifest digest ({}) does not match the one this "
                              "machine's ledger ({}) recorded at the end of its run, with its plan digest and "
                              "decision: it was changed after the run, or it was not recorded here (validate it "
                              "again with this ledger)",
                              bundle.string(), v.seal.manifest_sha256, ledger.path().string());
    LedgerRun refused = run_from_bundle(bundle);
    refused.kind = "keep";
    refused.started.clear();
    refused.finished.clear();
    refused.outcome = "REFUSED";
    refused.reasons = {out.message};
    ledger.record(refused);
    return out;
  }
  LedgerRun run = run_from_bundle(bundle);
  const BundleData b = read_bundle(bundle);
  const nlohmann::json* base = implementation(b.plan, "baseline");
  const nlohmann::json* cand = implementation(b.plan, "candidate");
  if (base == nullptr || cand == nullptr) missing(bundle, "plan.json lacks the baseline or the candidate");

  LedgerRun keep = run;
  keep.kind = "keep";
  keep.started.clear();
  keep.finished.clear();
  if (parse_decision(run.outcome) != DecisionKind::keep_candidate) {
    out.exit_code = static_cast<int>(ExitCode::rejected);
    out.message = fmt::format("{} decided {}, not KEEP_CANDIDATE: its candidate is not kept", bundle.string(),
                              run.outcome);
  } else {
    // Generation 0 is the task's own baseline for the backend, as the plan's task manifest names it.
    Incumbent g0;
    g0.identity = text_at(*base, "/identity/key"_json_pointer);
    g0.source = base->value("source", "");
    g0.source_sha256 = text_at(*base, "/identity/source_sha256"_json_pointer);
    Incumbent next;
    next.identity = text_at(*cand, "/identity/key"_json_pointer);
    next.source = cand->value("source", "");
    next.source_sha256 = text_at(*cand, "/identity/source_sha256"_json_pointer);
    next.bundle = run.bundle;
    next.workloads = run.workloads;
    if (!is_task_baseline(b.plan, run.backend, g0.source)) {
      g0 = Incumbent{};
      g0.identity = "(the task's declared baseline)";
    }
    Ledger::Promotion p = ledger.promote(run.task, run.backend, text_at(*base, "/identity/key"_json_pointer), g0, next);
    if (p.kept) {
      out.kept = p.kept;
      out.message = fmt::format("kept {} as generation {} of task {} on {}: {:+.2f}% over generation {}, {:+.2f}% "
                                "over the original baseline",
                                p.kept->source, p.kept->generation, run.task, run.backend, p.kept->improvement_pct,
                                p.kept->generation - 1, p.kept->cumulative_pct);
    } else {
      out.exit_code = static_cast<int>(ExitCode::rejected);
      out.message = "not kept: " + p.refused;
    }
  }
  keep.outcome = out.kept ? "KEPT" : "REFUSED";
  keep.reasons = {out.message};
  ledger.record(keep);
  return out;
}

}  // namespace kwb
