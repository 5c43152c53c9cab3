#include "pipeline/validate.h"
#include "util/json_text.h"

#include "builder/builder.h"
#include "oracle/oracle.h"
#include "record/bundle_signature.h"
#include "record/bundle_writer.h"
#include "record/environment.h"
#include "pipeline/check.h"
#include "profile/profile.h"
#include "report/report.h"
#include "stats/random.h"
#include "task/data.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/interrupt.h"
#include "util/paths.h"
#include "util/provenance.h"
#include "util/sha256.h"
#include "worker/worker_process.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <random>

namespace kwb {

namespace fs = std::filesystem;

const std::vector<std::string>& validate_stage_names() {
  static const std::vector<std::string> names = {"freeze",   "check_baseline", "profile", "check_candidate",
                                                 "controls", "aa",             "ab",      "final_validation",
                                                 "decision"};
  return names;
}

namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

struct Impl {
  std::string role;  // baseline, candidate, control; baseline_layout and candidate_layout for the padded builds
  std::string name;
  std::optional<FailureReason> expect;  // controls only
  Artifact artifact;
  std::string bundle_source;    // relative path inside the bundle
  std::string bundle_artifact;  // relative path inside the bundle ("" when the build failed)
  int layout = 0;               // index in its arm's layout pool (0: the plain build)
};

class Validator {
public:
  Validator(const ValidateOptions& o, const ValidateObserver& obs) : m_opt(o), m_obs(obs), m_bundle(o.output_dir) {
    // The machine key is read (made on first use) before anything runs, never in a timed stage; a key folder kwb
    // cannot use costs the bundle its signature, not the run (the ledger's record still makes it keepable here).
    try {
      m_key = machine_key();
    } catch (const Error& e) {
      m_unsigned_reason = e.what();
    }
  }

  ValidateResult run() {
    const auto& names = validate_stage_names();
    m_stages = nlohmann::json::array();
    for (const std::string& n : names) m_stages.push_back({{"name", n}, {"status", "pending"}});
    write_stages();

    // Freeze is the one stage without which nothing else means anything: its failure is fatal to the run, but the
    // bundle still records why.
    try {
      bool frozen = stage(0, [&] {
        try {
          return freeze();
        } catch (const Error& e) {
          if (e.code() == ExitCode::data_error || e.code() == ExitCode::usage) {
            m_input_error_code = static_cast<int>(e.code());
            m_input_error = e.what();
          }
          throw;
        }
      });
      // A candidate that does not build replaces nothing: its check says so at once, and nothing is checked,
      // profiled or timed against the baseline for it (record/decision.h, candidate_built).
      const bool candidate_built = frozen && m_inputs.candidate_built.value_or(false);
      const std::string not_built = "skipped: the candidate does not build (checks/candidate.json has the compiler's "
                                    "output); nothing is judged against the baseline";
      bool baseline_ok = frozen && stage(1, [&] { return check_baseline(); }, candidate_built, not_built);
      const std::string after_failure = "skipped: an earlier stage it depends on failed";
      stage(2, [&] { return profile(); }, candidate_built && m_opt.profile,
            !frozen            ? after_failure
            : !candidate_built ? not_built
                               : "skipped: --no-profile (the profile is descriptive; the decision never depends on it)");
      bool candidate_ok = frozen && stage(3, [&] { return check_candidate(); });
      stage(4, [&] { return controls(); }, candidate_built, frozen ? not_built : after_failure);
      const bool timing_allowed = baseline_ok && candidate_ok;
      bool aa_ok = stage(5, [&] { return aa(); }, timing_allowed, "skipped: baseline or candidate failed its check");
      stage(6, [&] { return ab(); }, timing_allowed && aa_ok,
            timing_allowed ? "skipped: the A/A calibration failed" : "skipped: baseline or candidate failed its check");
      stage(7, [&] { return final_validation(); }, frozen);
      stage(8, [&] { return decision(); });
    } catch (const Interrupted& i) {
      // stage() has recorded the stage the signal stopped; what was measured before it is in the bundle already
      // (a comparison's samples so far included). The stages after it never ran, and there is no decision.
      for (nlohmann::json& s : m_stages) {
        if (s.value("status", "") == "pending") {
          s["status"] = "skipped";
          s["summary"] = "not run: " + i.what();
        }
      }
      write_stages();
      finish_bundle();
      throw;
    }
    finish_bundle();
    ValidateResult r;
    r.decision = m_decision;
    r.decision_json = m_decision_json;
    r.plan_digest = m_plan_digest;
    r.manifest_sha256 = m_manifest_sha256;
    r.unsigned_reason = m_unsigned_reason;
    r.bundle = m_bundle.dir();
    r.input_error_code = m_input_error_code;
    r.input_error = m_input_error;
    return r;
  }

private:
  // The reports are views of the finished JSON (stages.json included), then the manifest covers everything. An
  // interrupted bundle has no decision: its reports say what is missing, and `kwb report` can render them again.
  void finish_bundle() {
    try {
      write_reports(m_bundle.dir());
    } catch (const std::exception&) {
      if (!m_interrupted) throw;
    }
    m_manifest_sha256 = m_bundle.write_manifest();
    if (m_key) sign();
  }

  // Signs the manifest (record/bundle_signature.h). A signature that cannot be written costs the bundle its
  // signature, never the run's result or an interrupted run's exit code: the ledger's record still stands.
  void sign() {
    const bool decided = m_decision_json.is_object() && m_decision_json.contains("decision") &&
                         m_decision_json["decision"].is_string();
    try {
      sign_bundle(m_bundle.dir(), *m_key, m_plan_digest, decided ? m_decision_json["decision"].get<std::string>() : "");
    } catch (const Error& e) {
      m_unsigned_reason = e.what();
    }
  }

  // Runs one stage: records it, catches what it throws (as a stage error), rewrites stages.json. An interruption
  // (util/interrupt.h) is recorded as the stage's status "interrupted" with the signal's name, and goes on.
  bool stage(size_t index, const std::function<std::string()>& body, bool run = true,
             const std::string& skip_reason = "skipped: an earlier stage it depends on failed") {
    const std::string& name = validate_stage_names()[index];
    if (m_obs.stage_started) {
      // Two comparisons (A/A, A/B), each at most max_seconds per workload, minus those already behind us.
      size_t workloads = m_opt.workloads.size();
      if (workloads == 0) {
        for (const Case& c : m_task.cases) workloads += c.role == CaseRole::timing;
      }
      const double comparisons_left = index <= 5 ? 2.0 : index == 6 ? 1.0 : 0.0;
      m_obs.stage_started(static_cast<int>(index) + 1, 9, name,
                          comparisons_left * static_cast<double>(workloads) * m_opt.budget.max_seconds);
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::string status = "ok", summary;
    bool ok = true;
    if (!run) {
      status = "skipped";
      summary = skip_reason;
      ok = false;
    } else {
      m_stages[index]["status"] = "running";
      m_stages[index]["started"] = utc_now();
      write_stages();
      try {
        throw_if_interrupted();
        summary = body();
        if (m_stage_failed) {
          status = "failed";
          ok = false;
          m_stage_failed = false;
        }
      } catch (const Interrupted& i) {
        m_interrupted = true;
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        m_stages[index]["status"] = "interrupted";
        m_stages[index]["signal"] = i.signal_name();
        m_stages[index]["summary"] = i.what();
        m_stages[index]["seconds"] = seconds;
        write_stages();
        if (m_obs.stage_finished) m_obs.stage_finished(name, "interrupted", i.what(), seconds);
        throw;
      } catch (const std::exception& e) {
        status = "error";
        summary = e.what();
        ok = false;
        m_inputs.stage_errors.push_back(fmt::format("{}: {}", name, e.what()));
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m_stages[index]["status"] = status;
    m_stages[index]["summary"] = summary;
    m_stages[index]["seconds"] = seconds;
    write_stages();
    if (m_obs.stage_finished) m_obs.stage_finished(name, status, summary, seconds);
    return ok;
  }

  void write_stages() {
    m_bundle.write_json("stages.json", {{"schema", k_stages_schema},
                                        {"schema_version", k_bundle_schema_version},
                                        {"stages", m_stages}});
  }

  // ---- 1. freeze --------------------------------------------------------------------------------------------

  std::string freeze() {
    m_task = load_task(m_opt.task_dir);
    if (!m_task.backends.contains(m_opt.backend)) {
      throw DataError(fmt::format("{}: the task has no [backends.{}] section", m_task.manifest.string(), m_opt.backend));
    }
    const BackendImpls& bi = m_task.backends.at(m_opt.backend);
    const fs::path baseline = m_opt.baseline.empty() ? bi.baseline : m_opt.baseline;
    m_seed = m_opt.seed ? *m_opt.seed : std::random_device{}() * 4294967296ull + std::random_device{}();
    m_timing_nonce = mix_seed(m_seed, 0x71);
    m_final_nonce = mix_seed(m_seed, 0xF1);
    if (m_final_nonce == 0) m_final_nonce = 1;

    // Each arm's layout pool (docs/timing.md, "Layout"): the plain build, then padded builds. Only the plain build
    // is checked; every output of every timed call, in every layout, is validated. Everything is built at once
    // (builder.h: build_implementations).
    m_layouts = m_opt.layouts > 0 ? m_opt.layouts : default_layouts(m_opt.backend);
    std::vector<BuildRequest> requests = {{baseline, 0, m_opt.backend}, {m_opt.candidate, 0, m_opt.backend}};
    for (int v = 1; v < m_layouts; ++v) {
      requests.push_back({baseline, v, m_opt.backend});
      requests.push_back({m_opt.candidate, v, m_opt.backend});
    }
    for (const ControlSpec& c : bi.controls) requests.push_back({c.source, 0, m_opt.backend});
    std::vector<Artifact> artifacts = build_implementations(requests);
    size_t next = 0;
    m_impls.push_back({"baseline", "baseline", {}, std::move(artifacts[next++]), "", "", 0});
    m_impls.push_back({"candidate", "candidate", {}, std::move(artifacts[next++]), "", "", 0});
    for (int v = 1; v < m_layouts; ++v) {
      m_impls.push_back(
          {"baseline_layout", fmt::format("baseline@{}", v), {}, std::move(artifacts[next++]), "", "", v});
      m_impls.push_back(
          {"candidate_layout", fmt::format("candidate@{}", v), {}, std::move(artifacts[next++]), "", "", v});
    }
    for (const ControlSpec& c : bi.controls) {
      m_impls.push_back({"control", c.name, c.expect, std::move(artifacts[next++]), "", ""});
    }

    nlohmann::json impls = nlohmann::json::array();
    for (Impl& im : m_impls) {
      im.bundle_source = m_bundle.add_artifact(im.artifact.source, im.artifact.identity.source_sha256 +
                                                                      im.artifact.source.extension().string());
      if (im.artifact.ok) {
        im.bundle_artifact = m_bundle.add_artifact(im.artifact.path, im.artifact.identity.artifact_sha256 + ".so");
        // From here on every worker loads the bundle's copy: the binary that is timed is the one in the evidence.
        im.artifact.path = m_bundle.dir() / im.bundle_artifact;
      }
      impls.push_back({{"role", im.role},
                       {"name", im.name},
                       {"expect", to_string(im.expect)},
                       {"source", im.artifact.source.string()},
                       {"bundle_source", im.bundle_source},
                       {"bundle_artifact", im.bundle_artifact},
                       {"built", im.artifact.ok},
                       {"layout", im.layout},
                       {"pad_bytes", layout_pad_bytes(im.artifact.identity.layout_variant)},
                       {"build_log", im.artifact.ok ? "" : im.artifact.log},
                       {"identity", to_json(im.artifact.identity)}});
    }

    m_environment = capture_environment(impl("candidate").artifact.identity.compiler_version);
    m_bundle.write_json("environment.json", m_environment);

    nlohmann::json cases = nlohmann::json::array();
    for (const Case& c : m_task.cases) {
      cases.push_back({{"name", c.name}, {"role", to_string(c.role)}, {"dims", c.dims}, {"seed", c.seed},
                       {"distribution", to_string(c.data.kind)}, {"scale", c.data.scale}});
    }
    const fs::path self = fs::read_symlink("/proc/self/exe");
    const Provenance built_from = build_provenance();
    nlohmann::json plan = {
        {"schema", k_plan_schema},
        {"schema_version", k_bundle_schema_version},
        {"created", utc_now()},
        {"argv", m_opt.argv},
        {"task",
         {{"name", m_task.name},
          {"dir", m_task.dir.string()},
          {"manifest_sha256", m_task.manifest_sha256},
          {"manifest", read_file(m_task.manifest)},
          {"oracle", oracle_record(m_task)},
          {"tolerance", {{"rtol", m_task.tolerance.rtol}, {"atol", m_task.tolerance.atol}}},
          {"cases", cases}}},
        {"backend", to_string(m_opt.backend)},
        {"device", m_opt.device},
        {"cold", m_opt.timing.cold},
        {"exhaustive_checks", m_opt.exhaustive_checks},
        {"profile", m_opt.profile},
        // What reaches every worker besides PATH and LC_ALL: device selection and the runtimes' own settings
        // (POCL_MAX_PTHREAD_COUNT, CUDA_VISIBLE_DEVICES, ...), which change what is measured.
        {"worker_environment", worker_environment()},
        {"implementations", impls},
        {"gates",
         {{"kind", m_opt.gate.kind == stats::GateKind::ci ? "ci" : "point"},
          {"min_improvement_pct", m_opt.gate.min_improvement_pct},
          {"max_aa_difference_pct", m_opt.gate.max_aa_difference_pct},
          {"alpha", m_opt.gate.alpha}}},
        {"budgets",
         {{"min_blocks", m_opt.budget.min_blocks},
          {"max_blocks", m_opt.budget.max_blocks},
          {"max_seconds_per_workload", m_opt.budget.max_seconds},
          {"warmups", m_opt.timing.warmups},
          {"samples", m_opt.timing.samples},
          {"timeout_seconds", static_cast<double>(m_opt.timing.timeout.count()) / 1000.0}}},
        {"workloads", m_opt.workloads},
        {"layout",
         {{"layouts", m_layouts},
          {"offsets", layout_offsets(m_opt.backend, m_layouts)},
          {"tensors", m_task.signature.inputs.size() + m_task.signature.outputs.size()}}},
        {"seeds", {{"seed", m_seed}, {"check_nonce", 0}, {"timing_nonce", m_timing_nonce}, {"final_nonce", m_final_nonce}}},
        {"kwb",
         {{"version", KWB_VERSION},
          {"git_sha", built_from.git_sha},
          // null: not built from a git checkout, so whether it was modified is not known.
          {"git_dirty", built_from.git_dirty ? nlohmann::json(*built_from.git_dirty) : nlohmann::json()},
          {"binary_sha256", sha256_file(self)},
          {"worker_sha256", sha256_file(worker_executable())}}},
        {"environment", m_environment}};
    const std::string text = json_text(plan, 2) + "\n";
    m_bundle.write_text("plan.json", text);
    m_plan_digest = sha256_hex(std::string_view(text));
    m_plan = plan;
    if (m_obs.plan_frozen) m_obs.plan_frozen(m_plan_digest);
    m_inputs.candidate_built = impl("candidate").artifact.ok;
    size_t built = 0;
    for (const Impl& im : m_impls) built += im.artifact.ok;
    return fmt::format("plan digest {}; {} implementations ({} built)", m_plan_digest, m_impls.size(), built);
  }

  // Every stage re-hashes what it is about to run against the plan and refuses to go on when anything differs.
  void require_identity(const Impl& im) {
    if (!im.artifact.ok) return;
    for (auto [rel, planned] : {std::pair{im.bundle_artifact, im.artifact.identity.artifact_sha256},
                                std::pair{im.bundle_source, im.artifact.identity.source_sha256}}) {
      const std::string now = sha256_file(m_bundle.dir() / rel);
      if (now != planned) {
        std::string m = fmt::format("{} ({}): plan {} now {}", rel, im.name, planned, now);
        m_inputs.identity_mismatches.push_back(m);
        throw InternalError("identity check failed: " + m);
      }
    }
  }

  Impl& impl(const std::string& role) {
    for (Impl& im : m_impls) {
      if (im.role == role) return im;
    }
    throw InternalError("no implementation with role " + role);
  }

  CheckReport check(Impl& im, const std::string& file, uint64_t nonce,
                    std::optional<FailureReason> stop_after = std::nullopt, bool held_out = false) {
    require_identity(im);
    CheckOptions co;
    co.held_out = held_out;
    co.backend = m_opt.backend;
    co.timeout = m_opt.timing.timeout;
    co.nonce = nonce;
    co.stop_after_reason = stop_after;
    co.exhaustive = m_opt.exhaustive_checks;
    CheckReport r = run_check(m_task, im.artifact, co);
    m_bundle.write_json(file, to_json(r));
    return r;
  }

  static std::string check_summary(const CheckReport& r) {
    std::string s = fmt::format("{}: {} assertions passed, {} failed", r.pass() ? "PASS" : "FAIL", r.passed, r.failed);
    if (!r.not_run.empty()) s += fmt::format("; {} case(s) not run: {}", r.not_run.size(), r.stop_reason);
    return s;
  }

  // ---- 2-5. checks, profile, controls --------------------------------------------------------------------------

  std::string check_baseline() {
    CheckReport r = check(impl("baseline"), "checks/baseline.json", 0);
    m_inputs.baseline_check_pass = r.pass();
    m_inputs.min_improvement_pct = m_opt.gate.min_improvement_pct;
    m_stage_failed = !r.pass();
    return check_summary(r);
  }

  // Structural facts only (instructions, allocations, passes, bandwidth), never part of the decision. The
  // baseline is profiled here, after its check; the candidate right after its own check passes (a rejected
  // implementation is never profiled).
  std::string profile_one(const std::string& role) {
    Impl& im = impl(role);
    require_identity(im);
    ProfileOptions po;
    po.backend = m_opt.backend;
    po.workloads = m_opt.workloads;
    po.timeout = m_opt.timing.timeout;
    po.nonce = m_timing_nonce;
    po.raw_dir = m_bundle.dir() / "profile" / ("raw_" + role);
    ProfileReport r = run_profile(m_task, im.artifact, po);
    m_bundle.write_json("profile/" + role + ".json", to_json(r));
    std::vector<std::string> parts;
    for (const auto& w : r.workloads) {
      if (w.device.available) {
        parts.push_back(fmt::format("{} {:g} device command(s)/call", w.name, w.device.commands_per_call));
      } else {
        parts.push_back(w.instructions.available
                            ? fmt::format("{} {:.0f} instr/call", w.name, w.instructions.instructions_per_call)
                            : fmt::format("{} (instructions unavailable)", w.name));
      }
    }
    return fmt::format("{}: {}", role, fmt::join(parts, ", "));
  }

  std::string profile() { return profile_one("baseline"); }

  std::string check_candidate() {
    CheckReport r = check(impl("candidate"), "checks/candidate.json", 0);
    m_inputs.candidate_check_pass = r.pass();
    m_inputs.candidate_check_reasons = distinct_reasons(r.failures);
    m_stage_failed = !r.pass();
    if (auto why = timing_refusal(r)) return check_summary(r) + "; timing and profiling refused";
    if (!m_opt.profile) return check_summary(r) + "; not profiled (--no-profile)";
    std::string profiled;
    try {
      profiled = "; profile " + profile_one("candidate");
    } catch (const std::exception& e) {
      // The profile is descriptive: its failure is recorded, it does not change the decision.
      profiled = std::string("; profile failed: ") + e.what();
    }
    return check_summary(r) + profiled;
  }

  std::string controls() {
    nlohmann::json list = nlohmann::json::array();
    size_t good = 0;
    for (Impl& im : m_impls) {
      if (im.role != "control") continue;
      const FailureReason expect = im.expect.value();  // every control has one (task/manifest.cpp)
      CheckReport r = check(im, "checks/control_" + im.name + ".json", 0, expect);
      ControlOutcome o{im.name, expect, !r.pass(), r.has_reason(expect), timing_refusal(r).has_value()};
      m_inputs.controls.push_back(o);
      const std::vector<std::string> reasons = distinct_reasons(r.failures);
      const bool ok = o.rejected && o.expected_reason_seen && o.timing_refused;
      good += ok;
      list.push_back({{"name", o.name},
                      {"expect", to_string(o.expect)},
                      {"rejected", o.rejected},
                      {"reasons", reasons},
                      {"expected_reason_seen", o.expected_reason_seen},
                      {"timing_refused", o.timing_refused},
                      {"metric", nullptr},
                      {"check", "checks/control_" + im.name + ".json"},
                      {"ok", ok}});
    }
    const size_t total = list.size();
    m_bundle.write_json("controls.json", {{"schema", k_controls_schema},
                                          {"schema_version", k_bundle_schema_version},
                                          {"controls", list},
                                          {"killed", good},
                                          {"total", total}});
    m_stage_failed = good != total;
    return fmt::format("{} of {} controls rejected for their named reason, no metric for any", good, total);
  }

  // ---- 6-7. timing --------------------------------------------------------------------------------------------

  // The role's layout pool: its plain build, then its padded builds in layout order (those that built).
  std::vector<const Artifact*> pool(const std::string& role) {
    std::vector<const Artifact*> out = {&impl(role).artifact};
    for (int v = 1; v < m_layouts; ++v) {
      for (Impl& im : m_impls) {
        if (im.role == role + "_layout" && im.layout == v && im.artifact.ok) {
          require_identity(im);
          out.push_back(&im.artifact);
        }
      }
    }
    return out;
  }

  // A/A: the baseline's layout pool against itself, drawn independently per arm; A/B: the baseline's pool against
  // the candidate's.
  CompareReport compare(CompareMode mode, const std::string& other_role, const std::string& label) {
    Impl& a = impl("baseline");
    Impl& other = impl(other_role);
    require_identity(a);
    require_identity(other);
    CompareRequest req;
    req.mode = mode;
    req.arms = {&a.artifact, &other.artifact};
    req.layouts = {pool("baseline"), pool(other_role)};
    req.labels = {"A", label};
    req.workloads = m_opt.workloads;
    req.gate = m_opt.gate;
    req.gate.mode = mode;
    req.budget = m_opt.budget;
    req.timing = m_opt.timing;
    req.timing.nonce = m_timing_nonce;
    req.seed = mix_seed(m_seed, mode == CompareMode::aa ? stats::k_seed_tag_aa : stats::k_seed_tag_ab);
    req.skip_checks = true;  // both arms passed their checks in this run, on these exact artifacts
    const std::string tag = mode == CompareMode::aa ? "aa" : "ab";
    req.lock_what = fmt::format("kwb validate: {} {} (bundle {})", m_task.name, mode == CompareMode::aa ? "A/A" : "A/B",
                                m_opt.output_dir.string());
    req.lock_notice = m_obs.timing_lock_wait;
    // Interrupted: what was measured so far is kept (comparisons/<tag>.json with verdict INTERRUPTED, its samples).
    req.on_interrupted = [&](const CompareReport& partial) {
      m_bundle.write_json("comparisons/" + tag + ".json", to_json(partial));
      for (const Sample& s : partial.samples) m_samples.emplace_back(tag, s);
      write_samples();
    };
    CompareReport r = run_compare(m_task, req, m_obs.comparison_progress);
    nlohmann::json j = to_json(r);
    m_bundle.write_json("comparisons/" + tag + ".json", j);
    for (Sample& s : r.samples) m_samples.emplace_back(tag, std::move(s));
    write_samples();
    return r;
  }

  void write_samples() {
    std::string csv = "comparison," + std::string(samples_csv_header());
    for (const auto& [tag, s] : m_samples) {
      std::string row = samples_csv({s});
      csv += tag + "," + row.substr(samples_csv_header().size());
    }
    m_bundle.write_text("samples.csv", csv);
  }

  static WorkloadVerdict workload_verdict(const WorkloadResult& w) {
    WorkloadVerdict v{w.name, w.verdict, std::nullopt, std::nullopt};
    if (w.verdict == stats::Verdict::invalid) v.detail = w.reason;
    if (w.estimate) {
      v.ci_low_pct = w.estimate->ci_low_pct;
      v.ci_high_pct = w.estimate->ci_high_pct;
    }
    return v;
  }

  std::string aa() {
    CompareReport c = compare(CompareMode::aa, "baseline", "A'");
    std::vector<std::string> parts;
    for (const WorkloadResult& w : c.workloads) {
      m_inputs.aa.push_back(workload_verdict(w));
      parts.push_back(fmt::format("{} {}", w.name, w.verdict));
    }
    m_stage_failed = c.verdict != stats::Verdict::pass;
    // An inconclusive A/A does not stop A/B (its verdict will be INCONCLUSIVE anyway, and the data is useful);
    // a failed one does: measurements on a broken noise floor mean nothing.
    if (c.verdict == stats::Verdict::inconclusive) m_stage_failed = false;
    return fmt::format("A vs A over {} layouts: {}", m_layouts, fmt::join(parts, ", "));
  }

  std::string ab() {
    CompareReport c = compare(CompareMode::ab, "candidate", "B");
    std::vector<std::string> parts;
    for (const WorkloadResult& w : c.workloads) {
      m_inputs.ab.push_back(workload_verdict(w));
      parts.push_back(w.estimate ? fmt::format("{} {:+.1f}% {}", w.name, w.estimate->improvement_pct, w.verdict)
                                 : fmt::format("{} {}", w.name, w.verdict));
    }
    m_stage_failed = c.verdict != stats::Verdict::pass;
    return fmt::format("B vs A: {}", fmt::join(parts, ", "));
  }

  // ---- 8. final validation --------------------------------------------------------------------------------------

  std::string final_validation() {
    // Re-hash every artifact and source in the bundle against the plan (all of them, not just the candidate).
    std::vector<std::string> mismatches;
    for (const Impl& im : m_impls) {
      try {
        require_identity(im);
      } catch (const InternalError&) {
        mismatches.push_back(m_inputs.identity_mismatches.back());
      }
    }
    nlohmann::json now_env = capture_environment(impl("candidate").artifact.identity.compiler_version);
    std::vector<EnvironmentDifference> diffs = compare_environments(m_environment, now_env);
    nlohmann::json env_diffs = nlohmann::json::array();
    for (const auto& d : diffs) {
      m_inputs.environment_mismatches.push_back(fmt::format("{}: plan '{}', now '{}'", d.item, d.planned, d.now));
      env_diffs.push_back({{"item", d.item}, {"planned", d.planned}, {"now", d.now}});
    }
    std::string check_text = "not run (the candidate failed its first check)";
    std::optional<bool> pass;
    if (m_inputs.candidate_check_pass.value_or(false) && mismatches.empty()) {
      // Fresh data, plus held-out shapes the candidate never saw and a rehearsed timing visit of secret length:
      // code special-cased to the published workloads, or honest only while it believes it is being checked,
      // fails here.
      CheckReport r = check(impl("candidate"), "checks/candidate_final.json", m_final_nonce, std::nullopt, true);
      pass = r.pass();
      m_inputs.final_check_pass = pass;
      check_text = check_summary(r);
    }
    m_bundle.write_json("final.json", {{"schema", k_final_schema},
                                       {"schema_version", k_bundle_schema_version},
                                       {"final_nonce", m_final_nonce},
                                       {"candidate_recheck", pass ? nlohmann::json(*pass) : nlohmann::json(nullptr)},
                                       {"identity_mismatches", mismatches},
                                       {"environment_differences", env_diffs},
                                       {"environment_now", now_env}});
    m_stage_failed = !mismatches.empty() || !diffs.empty() || (pass && !*pass);
    return fmt::format("re-check with fresh data and held-out shapes: {}; {} identity mismatches; {} environment differences",
                       check_text, mismatches.size(), diffs.size());
  }

  // ---- 9. decision ----------------------------------------------------------------------------------------------

  std::string decision() {
    m_decision = decide(m_inputs);
    // A freeze that failed early leaves no environment: the decision is still written, with what is known.
    if (!m_environment.is_object()) m_environment = nlohmann::json::object();
    nlohmann::json dtypes = nlohmann::json::array();
    for (const auto* list : {&m_task.signature.inputs, &m_task.signature.outputs}) {
      for (const TensorSpec& t : *list) {
        if (std::find(dtypes.begin(), dtypes.end(), to_string(t.dtype)) == dtypes.end()) dtypes.push_back(to_string(t.dtype));
      }
    }
    nlohmann::json workloads = nlohmann::json::array();
    for (const auto& w : m_inputs.ab) workloads.push_back(w.workload);
    m_decision_json = {{"schema", k_decision_schema},
                       {"schema_version", k_bundle_schema_version},
                       {"decision", m_decision.decision},
                       {"exit_code", m_decision.exit_code},
                       {"reasons", m_decision.reasons},
                       {"plan_digest", m_plan_digest},
                       {"scope",
                        {{"task", m_task.name},
                         {"machine", m_environment.value("cpu_model", "unknown")},
                         {"host", m_environment.value("hostname", "unknown")},
                         {"backend", to_string(m_opt.backend)},
                         {"device", m_opt.device},
                         {"dtypes", dtypes},
                         {"workloads", workloads}}},
                       {"inputs", to_json(m_inputs)},
                       {"created", utc_now()}};
    m_bundle.write_json("decision.json", m_decision_json);
    return std::string(to_string(m_decision.decision));
  }

  const ValidateOptions& m_opt;
  const ValidateObserver& m_obs;
  BundleWriter m_bundle;
  nlohmann::json m_stages;
  bool m_stage_failed = false;
  bool m_interrupted = false;
  Task m_task;
  std::vector<Impl> m_impls;
  uint64_t m_seed = 0, m_timing_nonce = 0, m_final_nonce = 0;
  nlohmann::json m_environment, m_plan;
  std::string m_plan_digest;
  std::string m_manifest_sha256;
  std::optional<SigningKey> m_key;
  std::string m_unsigned_reason;
  DecisionInputs m_inputs;
  Decision m_decision;
  nlohmann::json m_decision_json;
  std::vector<std::pair<std::string, Sample>> m_samples;
  int m_layouts = 1;
  std::optional<int> m_input_error_code;
  std::string m_input_error;
};

}  // namespace

ValidateResult run_validate(const ValidateOptions& options, const ValidateObserver& observer) {
  Validator v(options, observer);
  return v.run();
}

}  // namespace kwb
