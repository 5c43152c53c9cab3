#include "ledger/bundle_entry.h"

#include "record/bundle_reader.h"
#include "record/bundle_writer.h"
#include "record/decision.h"
#include "record/verify.h"
#include "task/task.h"
#include "util/error.h"
#include "util/sha256.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

namespace kwb {

namespace {

[[noreturn]] void missing(const std::filesystem::path& bundle, const std::string& what) {
  throw Error(ExitCode::invalid, fmt::format("{}: {} (not a complete kwb validate bundle)", bundle.string(), what));
}

// Whether the bundle's baseline is the one its task declares for the backend (the manifest the plan embeds, resolved
// against the task folder the plan names), which is what generation 0 of a lineage must be.
bool is_task_baseline(const Plan& plan, const std::string& source) {
  const std::string& dir = plan.task.dir;
  toml::table parsed;
  try {
    parsed = toml::parse(plan.task.manifest);
  } catch (const toml::parse_error&) {
    return false;
  }
  const std::optional<std::string> declared =
      parsed["backends"][to_string(plan.backend)]["baseline"].value<std::string>();
  if (!declared || dir.empty()) return false;
  return (std::filesystem::path(dir) / *declared).lexically_normal() ==
         std::filesystem::path(source).lexically_normal();
}

LedgerArm arm_of(const PlannedImpl& impl) {
  return {std::string(to_string(impl.role)), impl.source, impl.identity_key()};
}

// What the plan says of the run, and the bundle's own facts (its manifest, the timing lock's holds); the caller adds
// the outcome.
LedgerRun planned_run(const std::filesystem::path& bundle, const BundleData& b) {
  if (!b.plan) missing(bundle, "plan.json: " + b.plan_problem);
  const Plan& plan = *b.plan;
  LedgerRun r;
  r.kind = "validate";
  r.task = plan.task.name;
  r.task_dir = plan.task.dir;
  r.backend = plan.backend;
  r.started = plan.created;
  r.bundle = std::filesystem::absolute(bundle).lexically_normal().string();
  std::string why;
  if (b.fs) r.manifest_sha256 = b.fs->sha256(k_manifest_file, why).value_or("");
  for (ImplRole role : {ImplRole::baseline, ImplRole::candidate}) r.arms.push_back(arm_of(*plan.impl(role)));
  if (b.ab && (*b.ab).contains("workloads")) r.workloads = workloads_from_json((*b.ab)["workloads"]);
  for (const auto* cmp : {&b.aa, &b.ab}) {
    if (*cmp && (**cmp).contains("timing_lock") && (**cmp)["timing_lock"].is_object()) {
      r.timing_holds.push_back((**cmp)["timing_lock"]);
    }
  }
  return r;
}

}  // namespace

LedgerRun run_from_bundle(const std::filesystem::path& bundle) {
  const BundleData b = read_bundle(bundle);
  LedgerRun r = planned_run(bundle, b);
  if (!b.decision) {
    missing(bundle, b.decision_problem.empty() ? "no decision.json" : "decision.json: " + b.decision_problem);
  }
  r.finished = b.decision->created;
  r.outcome = to_string(b.decision->decision);
  r.reasons = b.decision->reasons;
  r.plan_digest = b.decision->plan_digest;
  return r;
}

std::optional<std::filesystem::path> bundle_ledger_path(const std::filesystem::path& bundle) {
  const BundleData b = read_bundle(bundle);
  return ledger_path(b.plan ? std::filesystem::path(b.plan->task.dir) : std::filesystem::path());
}

IncumbentSource incumbent_source_file(const std::vector<Incumbent>& line, size_t generation) {
  const Incumbent& i = line.at(generation);
  const std::filesystem::path src = i.source;
  const bool exists = std::filesystem::is_regular_file(src);
  if (exists && sha256_file(src) == i.source_sha256) return {src, ""};
  const std::string gone = fmt::format("generation {} of task {} on {} was kept from {}, which {}", i.generation,
                                       i.task_name.empty() ? i.task : i.task_name, i.backend, src.string(),
                                       exists ? "has changed since" : "no longer exists");
  // The copies of it the lineage's bundles hold: the bundle that kept it (its candidate), and the next
  // generation's (its baseline).
  std::vector<std::string> bundles;
  if (!i.bundle.empty()) bundles.push_back(i.bundle);
  if (generation + 1 < line.size()) bundles.push_back(line[generation + 1].bundle);
  std::vector<std::string> tried;
  for (const std::string& bundle : bundles) {
    const BundleData b = read_bundle(bundle);
    if (!b.plan) {
      tried.push_back(fmt::format("{}/plan.json is unreadable ({})", bundle, b.plan_problem));
      continue;
    }
    for (const PlannedImpl& impl : b.plan->implementations) {
      if (impl.identity_key() != i.identity || impl.bundle_source.empty()) continue;
      const std::filesystem::path copy = std::filesystem::path(bundle) / impl.bundle_source;
      if (!std::filesystem::is_regular_file(copy)) {
        tried.push_back(fmt::format("{} is missing", copy.string()));
      } else if (const std::string h = sha256_file(copy); h != i.source_sha256) {
        tried.push_back(
            fmt::format("{} holds SHA-256 {}, not the kept source's {}", copy.string(), h, i.source_sha256));
      } else {
        return {copy, fmt::format("{}; using the copy its bundle keeps, {} (SHA-256 {} as kept)", gone, copy.string(),
                                  i.source_sha256.substr(0, 12))};
      }
      break;
    }
  }
  if (bundles.empty()) {
    throw DataError(
        fmt::format("{}, and no bundle keeps a copy of it (it is the task's baseline): restore {} "
                    "(e.g. git checkout -- {})",
                    gone, src.string(), src.string()));
  }
  if (tried.empty()) tried.push_back(fmt::format("no plan of {} names its build identity", fmt::join(bundles, " or ")));
  throw DataError(
      fmt::format("{}, and its bundle's copy cannot stand in for it: {}: restore {} with the bytes of "
                  "SHA-256 {}, or keep a new incumbent",
                  gone, fmt::join(tried, "; "), src.string(), i.source_sha256));
}

LedgerRun interrupted_run_from_bundle(const std::filesystem::path& bundle, const std::string& why) {
  const BundleData b = read_bundle(bundle);
  LedgerRun r = planned_run(bundle, b);
  std::string unused;
  r.plan_digest = b.fs ? b.fs->sha256("plan.json", unused).value_or("") : "";
  r.outcome = "INTERRUPTED";
  r.reasons = {why};
  return r;
}

std::string ledger_seal_message(const BundleSeal& seal) {
  return fmt::format("kwb ledger seal v1\nmanifest_sha256 {}\nplan_digest {}\ndecision {}\n", seal.manifest_sha256,
                     seal.plan_digest, seal.decision);
}

std::string seal_ledger_row(const SigningKey& key, const BundleSeal& seal) {
  return key.public_key() + ":" + key.sign(ledger_seal_message(seal));
}

bool ledger_seal_verifies(const std::string& row_seal, const BundleSeal& seal, const TrustedKeys& keys) {
  const size_t colon = row_seal.find(':');
  if (colon == std::string::npos) return false;
  const std::string key = row_seal.substr(0, colon);
  return keys.trusts(key) && verify_signature(key, ledger_seal_message(seal), row_seal.substr(colon + 1));
}

std::optional<LedgerRun> recorded_run(const Ledger& ledger, const BundleSeal& seal, const TrustedKeys& keys) {
  for (LedgerRun& r : ledger.runs_with_manifest(seal.manifest_sha256)) {
    if ((r.kind == "validate" || r.kind == "revalidate") && r.plan_digest == seal.plan_digest &&
        r.outcome == seal.decision && ledger_seal_verifies(r.seal, seal, keys)) {
      return std::move(r);
    }
  }
  return std::nullopt;
}

Authenticity authenticity(const VerifyReport& report, const Ledger* ledger) {
  Authenticity a;
  if (ledger == nullptr) {
    a.ledger_detail = "no ledger to consult (KWB_LEDGER=none, or the bundle's task has no ledger file yet)";
  } else if ((a.recorded = recorded_run(*ledger, report.seal))) {
    a.ledger_detail = fmt::format("recorded by this machine's ledger {} at the end of its run (run {}, {} {})",
                                  ledger->path().string(), a.recorded->id, a.recorded->kind, a.recorded->finished);
  } else {
    a.ledger_detail = fmt::format(
        "this bundle's manifest digest ({}) does not match any run this machine's ledger "
        "{} recorded at the end of its run and sealed with a trusted key, with this plan "
        "digest and decision: it was changed after the run, or it was not recorded here",
        report.seal.manifest_sha256.empty() ? "no manifest" : report.seal.manifest_sha256, ledger->path().string());
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

namespace {

// A bundle that verifies is only self-consistent: its hashes could have been recomputed after an edit. One this
// machine's ledger did not record is refused, and the refusal recorded.
KeepOutcome refuse_unrecorded(Ledger& ledger, const BundleSnapshot& snapshot, const VerifyReport& v) {
  KeepOutcome out;
  out.exit_code = static_cast<int>(ExitCode::not_authentic);
  out.message = fmt::format(
      "{} is not kept: this bundle's manifest digest ({}) does not match the one this "
      "machine's ledger ({}) recorded at the end of its run, with its plan digest and "
      "decision: it was changed after the run, or it was not recorded here (validate it "
      "again with this ledger)",
      snapshot.origin().string(), v.seal.manifest_sha256, ledger.path().string());
  LedgerRun refused = run_from_bundle(snapshot.path());
  refused.bundle = snapshot.origin().string();
  refused.kind = "keep";
  refused.started.clear();
  refused.finished.clear();
  refused.outcome = "REFUSED";
  refused.reasons = {out.message};
  ledger.record(refused);
  return out;
}

// The lineage is the task's by content (task_identity): the bundle's plan names the identity it was made against,
// and the task folder it names must still be that task, or the candidate was judged by another task than the one
// whose lineage it would extend. Why not, or "" when it is.
std::string task_changed(const Plan& plan, const std::string& task) {
  const std::string& planned_identity = plan.task.identity;
  std::string folder_identity;
  try {
    folder_identity = load_task(plan.task.dir).identity;
  } catch (const std::exception& e) {
    return fmt::format(
        "not kept: the task folder {} this bundle was made against cannot be read ({}), so nothing "
        "says it is still task {} with identity {}",
        plan.task.dir, e.what(), task, planned_identity);
  }
  if (folder_identity == planned_identity) return "";
  return fmt::format(
      "not kept: the task changed since this bundle was made: its plan was made against task {} "
      "with identity {}, but the folder {} now holds identity {} (task.toml, the oracle, a "
      "baseline or a control differs). A changed task starts a lineage of its own: "
      "validate the candidate against the task as it is (kwb validate --against incumbent), and "
      "keep that bundle",
      task, planned_identity, plan.task.dir, folder_identity);
}

// The candidate of a KEEP_CANDIDATE bundle becomes the next generation of its task's lineage on its backend.
void promote_candidate(Ledger& ledger, const Plan& plan, const LedgerRun& run, KeepOutcome& out) {
  const PlannedImpl& base = *plan.impl(ImplRole::baseline);  // plan_from_json requires both arms
  const PlannedImpl& cand = *plan.impl(ImplRole::candidate);
  // Generation 0 is the task's own baseline for the backend, as the plan's task manifest names it.
  Incumbent g0;
  g0.identity = base.identity_key();
  g0.source = base.source;
  g0.source_sha256 = base.source_sha256();
  Incumbent next;
  next.identity = cand.identity_key();
  next.source = cand.source;
  next.source_sha256 = cand.source_sha256();
  next.bundle = run.bundle;
  next.workloads = run.workloads;
  if (!is_task_baseline(plan, g0.source)) {
    g0 = Incumbent{};
    g0.identity = "(the task's declared baseline)";
  }
  g0.task_name = next.task_name = run.task;
  Ledger::Promotion p = ledger.promote(plan.task.identity, run.backend, base.identity_key(), g0, next);
  if (p.already) {
    // Keeping what is kept already asks for a state that holds: a retried keep is not an error.
    out.already = p.already;
    out.message = fmt::format(
        "already the incumbent: {} is generation {} of task {} on {} (kept {} from {}); "
        "nothing changed",
        p.already->source, p.already->generation, run.task, run.backend, p.already->kept,
        p.already->bundle.empty() ? "the task's baseline" : p.already->bundle);
  } else if (p.kept) {
    out.kept = p.kept;
    out.message = fmt::format(
        "kept {} as generation {} of task {} on {}: {:+.2f}% over generation {}, {:+.2f}% "
        "over the original baseline",
        p.kept->source, p.kept->generation, run.task, run.backend, p.kept->improvement_pct, p.kept->generation - 1,
        p.kept->cumulative_pct);
  } else {
    out.exit_code = static_cast<int>(ExitCode::rejected);
    out.message = "not kept: " + p.refused;
  }
}

}  // namespace

KeepOutcome keep_bundle(Ledger& ledger, const BundleSnapshot& snapshot) {
  // Everything below reads the snapshot, the bytes verified; `bundle` names the folder they came from.
  const std::filesystem::path& copy = snapshot.path();
  const std::filesystem::path& bundle = snapshot.origin();
  const VerifyReport v = verify_bundle(copy);
  if (!v.ok()) {
    KeepOutcome out;
    out.exit_code = static_cast<int>(ExitCode::invalid);
    out.problems = v.problems;
    out.message = fmt::format("{} does not verify ({} problem(s)): nothing is kept from a bundle that does not",
                              bundle.string(), v.problems.size());
    return out;
  }
  // Only the run this machine recorded is kept, byte for byte as it was written.
  if (!recorded_run(ledger, v.seal)) return refuse_unrecorded(ledger, snapshot, v);
  LedgerRun run = run_from_bundle(copy);
  run.bundle = bundle.string();
  const BundleData b = read_bundle(copy);
  if (!b.plan) missing(bundle, "plan.json: " + b.plan_problem);

  KeepOutcome out;
  if (parse_decision(run.outcome) != DecisionKind::keep_candidate) {
    out.exit_code = static_cast<int>(ExitCode::rejected);
    out.message =
        fmt::format("{} decided {}, not KEEP_CANDIDATE: its candidate is not kept", bundle.string(), run.outcome);
  } else if (std::string changed = task_changed(*b.plan, run.task); !changed.empty()) {
    out.exit_code = static_cast<int>(ExitCode::rejected);
    out.message = std::move(changed);
  } else {
    promote_candidate(ledger, *b.plan, run, out);
  }
  LedgerRun keep = run;
  keep.kind = "keep";
  keep.started.clear();
  keep.finished.clear();
  keep.outcome = out.kept ? "KEPT" : out.already ? "ALREADY_INCUMBENT" : "REFUSED";
  keep.reasons = {out.message};
  ledger.record(keep);
  return out;
}

}  // namespace kwb
