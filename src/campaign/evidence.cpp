#include "campaign/evidence.h"

#include "record/bundle_reader.h"
#include "record/bundle_snapshot.h"
#include "record/verify.h"
#include "task/task.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace kwb {

namespace {

Evidence rejected(std::string detail) {
  Evidence e;
  e.verdict = Evidence::Verdict::rejected;
  e.detail = std::move(detail);
  return e;
}

// Why the bundle's plan is not this job's ("" when it is): task (by name and by content), backend, and both arms'
// sources by content.
std::string other_job(const Plan& plan, const Job& job) {
  const PlannedImpl* cand = plan.impl(ImplRole::candidate);
  const PlannedImpl* base = plan.impl(ImplRole::baseline);
  if (plan.task.name != job.task)
    return fmt::format("its plan is of task {}, the job's is {}", plan.task.name, job.task);
  // A task of the same name with a case or a control removed is another task (task_identity).
  std::string identity;
  try {
    identity = load_task(job.task_dir).identity;
  } catch (const std::exception& e) {
    return fmt::format("the job's task folder {} cannot be read to check the task's identity: {}", job.task_dir,
                       e.what());
  }
  if (plan.task.identity != identity) {
    return fmt::format(
        "its plan was made against task identity {}, but the job's task folder {} holds identity {} "
        "(another task of the same name, or the task changed)",
        plan.task.identity, job.task_dir, identity);
  }
  if (plan.backend != job.backend) return fmt::format("its plan is on {}, the job's on {}", plan.backend, job.backend);
  if (cand == nullptr || cand->source_sha256() != job.candidate_sha256) {
    return fmt::format("its candidate's source has SHA-256 {}, the job's candidate {} has {}",
                       cand ? cand->source_sha256() : "(none)", job.candidate, job.candidate_sha256);
  }
  if (!job.baseline_sha256.empty() && (base == nullptr || base->source_sha256() != job.baseline_sha256)) {
    return fmt::format("its baseline's source has SHA-256 {}, the job's baseline has {}",
                       base ? base->source_sha256() : "(none)", job.baseline_sha256);
  }
  return "";
}

// Why the bundle was not made under this job's rules ("" when it was): validate records the command line it ran with
// (plan.json's argv, signed with the rest), and the job's is rebuilt from the campaign file. Every argument after
// the program's path must be the same: the workloads, gates, bars, alpha, budgets, layouts, cold, the baseline,
// and the attempt's own --output-dir. A genuine bundle of the same pair made with other flags (decode only, a 0%
// bar) is not this job's.
std::string other_rules(const Plan& plan, const std::vector<std::string>& expected) {
  if (expected.empty()) return "";
  const auto tail = [](const std::vector<std::string>& a) {
    return a.size() > 1 ? std::vector<std::string>(a.begin() + 1, a.end()) : std::vector<std::string>{};
  };
  const std::vector<std::string> got = tail(plan.argv), want = tail(expected);
  if (got == want) return "";
  return fmt::format("it was made by `kwb {}`, the job runs `kwb {}`", fmt::join(got, " "), fmt::join(want, " "));
}

std::string first_problems(const std::vector<std::string>& problems) {
  const size_t n = std::min<size_t>(problems.size(), 3);
  return fmt::format("{}{}", fmt::join(problems.begin(), problems.begin() + static_cast<std::ptrdiff_t>(n), "; "),
                     problems.size() > n ? fmt::format("; and {} more", problems.size() - n) : "");
}

}  // namespace

Evidence examine_bundle(const std::filesystem::path& bundle, const Job& job,
                        const std::vector<std::string>& validate_argv) {
  if (!std::filesystem::is_regular_file(bundle / "decision.json")) {
    Evidence e;
    e.detail = std::filesystem::is_directory(bundle)
                   ? fmt::format(
                         "{} has no decision.json (validate stopped before deciding; its stages.json says "
                         "where)",
                         bundle.string())
                   : fmt::format("no bundle at {}", bundle.string());
    return e;
  }
  // Read once (record/bundle_snapshot.h): everything below judges one private copy, whatever the folder does meanwhile.
  std::string unreadable;
  const std::optional<BundleSnapshot> snapshot = BundleSnapshot::take(bundle, unreadable);
  if (!snapshot) return rejected("cannot be read whole: " + unreadable);
  // 1. It verifies: every hash, every statistic, the decision re-derived from the raw evidence.
  const VerifyReport v = verify_bundle(snapshot->path());
  if (!v.ok()) {
    return rejected(fmt::format("does not verify ({} problem(s)): {}", v.problems.size(), first_problems(v.problems)));
  }
  // 2. It is authentic: only a trusted key's signature vouches for a bundle a node wrote without a ledger.
  if (v.signature.state != SignatureCheck::State::trusted) {
    return rejected(
        fmt::format("not authentic (self-consistent only): {}; a node's bundles are trusted once its "
                    "machine.pub is in this machine's key folder's trusted/ (docs/campaigns.md)",
                    v.signature.detail));
  }
  // 3. It is this job's.
  const BundleData b = read_bundle(snapshot->path());
  if (!b.plan) return rejected("plan.json does not parse: " + b.plan_problem);
  if (const std::string why = other_job(*b.plan, job); !why.empty()) {
    return rejected("not this job's bundle: " + why);
  }
  if (const std::string why = other_rules(*b.plan, validate_argv); !why.empty()) {
    return rejected("not made under this job's rules: " + why);
  }
  Evidence e;
  e.verdict = Evidence::Verdict::accepted;
  e.decision = v.seal.decision;
  e.manifest_sha256 = v.seal.manifest_sha256;
  e.signer = v.signature.public_key;
  if (b.ab && b.ab->contains("workloads")) e.workloads = workloads_from_json((*b.ab)["workloads"]);
  const nlohmann::json& env = b.plan->environment;
  if (env.is_object()) {
    e.host = env.value("hostname", "");
    e.machine = fmt::format("{}, {} cores", env.value("cpu_model", "unknown CPU"),
                            env.contains("logical_cores") ? env["logical_cores"].dump() : "?");
  }
  if (!b.plan->device.empty()) e.machine += ", " + b.plan->device;
  if (b.decision && !b.decision->reasons.empty()) {
    e.reason = b.decision->reason_codes.empty() ? b.decision->reasons.front()
                                                : b.decision->reason_codes.front() + ": " + b.decision->reasons.front();
  }
  return e;
}

}  // namespace kwb
