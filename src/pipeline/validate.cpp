#include "pipeline/validate.h"
#include "util/json_text.h"

#include "builder/builder.h"
#include "oracle/oracle.h"
#include "pipeline/check.h"
#include "profile/profile.h"
#include "record/bundle_signature.h"
#include "record/bundle_writer.h"
#include "record/control_margin.h"
#include "record/decision_record.h"
#include "record/environment.h"
#include "record/plan.h"
#include "record/stages.h"
#include "report/report.h"
#include "stats/random.h"
#include "task/data.h"
#include "util/data_secret.h"
#include "util/elf_code.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/interrupt.h"
#include "util/paths.h"
#include "util/provenance.h"
#include "util/sha256.h"
#include "util/timing_lock.h"
#include "worker/worker_process.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <map>
#include <random>

namespace kwb {

namespace fs = std::filesystem;

namespace {

// Whether two built artifacts map the same code (util/elf_code.h): the candidate is the baseline's own code.
bool same_code(const Artifact& a, const Artifact& b) {
  if (!a.ok || !b.ok) return false;
  std::string why;
  const std::optional<std::string> ca = elf_code_sha256(read_file(a.path), why);
  const std::optional<std::string> cb = elf_code_sha256(read_file(b.path), why);
  return ca && cb && *ca == *cb;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

class Validator {
public:
  Validator(const ValidateOptions& o, const ValidateObserver& obs)
      : m_opt(o), m_graph(o.stages ? *o.stages : validate_stages()), m_obs(obs), m_bundle(o.output_dir) {
    // The machine key is read (made on first use) before anything runs, never in a timed stage; a key folder kwb
    // cannot use costs the bundle its signature, not the run (the ledger's record still makes it keepable here).
    try {
      m_key = machine_key();
    } catch (const Error& e) {
      m_unsigned_reason = e.what();
    }
  }

  ValidateResult run() {
    m_stages = nlohmann::json::array();
    for (const std::string& n : m_graph.names()) m_stages.push_back({{"name", n}, {"status", "pending"}});
    write_stages();
    // Each stage in the declared order (record/stages.h): it runs when every stage it needs ended ok, else it is
    // skipped and says which. Freeze is the one stage without which nothing else means anything; the decision
    // always runs, and the bundle records why whatever did not run did not.
    try {
      std::vector<std::pair<Stage, std::string>> ended;
      for (size_t i = 0; i < m_graph.size(); ++i) {
        const StageSpec& spec = m_graph.at(i);
        const std::optional<std::string> skip =
            stage_skip_reason(m_graph, spec, ended,
                              candidate_skip_reason(m_inputs.candidate_built.value_or(false),
                                                    m_inputs.candidate_identical.value_or(false)),
                              m_opt.profile);
        ended.emplace_back(spec.stage, stage(i, skip));
        if (m_graph.comparisons_from(i + 1) == 0) release_timing_lock();
      }
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
      release_timing_lock();
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
    r.lock_timeout = m_lock_timeout;
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
    const bool decided =
        m_decision_json.is_object() && m_decision_json.contains("decision") && m_decision_json["decision"].is_string();
    try {
      sign_bundle(m_bundle.dir(), *m_key, m_plan_digest, decided ? m_decision_json["decision"].get<std::string>() : "");
    } catch (const Error& e) {
      m_unsigned_reason = e.what();
    }
  }

  // Runs one stage, or records why it is skipped: records it, catches what it throws (as a stage error), rewrites
  // stages.json, and returns its status. An interruption (util/interrupt.h) is recorded as the stage's status
  // "interrupted" with the signal's name, and goes on.
  std::string stage(size_t index, const std::optional<std::string>& skip_reason) {
    const StageSpec& spec = m_graph.at(index);
    const std::string& name = spec.name;
    m_stage_index = index;
    if (m_obs.stage_started) {
      m_obs.stage_started(static_cast<int>(index) + 1, static_cast<int>(m_graph.size()), name,
                          timing_budget_from(index));
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::string status = "ok", summary;
    if (skip_reason) {
      status = "skipped";
      summary = *skip_reason;
    } else {
      m_stages[index]["status"] = "running";
      m_stages[index]["started"] = utc_now();
      write_stages();
      try {
        throw_if_interrupted();
        summary = run_body(spec.stage);
        if (m_stage_failed) {
          status = "failed";
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
        m_inputs.stage_errors.push_back(fmt::format("{}: {}", name, e.what()));
        if (const auto* err = dynamic_cast<const Error*>(&e); err && err->code() == ExitCode::lock_timeout) {
          m_lock_timeout = e.what();
        }
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m_stages[index]["status"] = status;
    m_stages[index]["summary"] = summary;
    m_stages[index]["seconds"] = seconds;
    write_stages();
    if (m_obs.stage_finished) m_obs.stage_finished(name, status, summary, seconds);
    return status;
  }

  // An upper bound on the timing from the start of stage `index` on: the comparisons still ahead (A/A, A/B), each at
  // most max_seconds per workload.
  double timing_budget_from(size_t index) const {
    size_t workloads = m_opt.workloads.size();
    if (workloads == 0) {
      for (const Case& c : m_task.cases) workloads += c.role == CaseRole::timing;
    }
    return m_graph.comparisons_from(index) * static_cast<double>(workloads) * m_opt.budget.max_seconds;
  }

  std::string run_body(Stage s) {
    switch (s) {
      case Stage::freeze:
        return freeze_recording_input_errors();
      case Stage::check_baseline:
        return check_baseline();
      case Stage::profile:
        return profile();
      case Stage::check_candidate:
        return check_candidate();
      case Stage::controls:
        return controls();
      case Stage::aa:
        return aa();
      case Stage::ab:
        return ab();
      case Stage::final_validation:
        return final_validation();
      case Stage::decision:
        return decision();
      case Stage::marker:
        return "no work of its own; every stage it needs ended ok";
    }
    throw InternalError("a stage without a body");
  }

  // A freeze that fails on bad input (the task, a source) is recorded, and the command exits with that input
  // error's code (ValidateResult::input_error_code).
  std::string freeze_recording_input_errors() {
    try {
      return freeze();
    } catch (const Error& e) {
      if (e.code() == ExitCode::data_error || e.code() == ExitCode::usage) {
        m_input_error_code = static_cast<int>(e.code());
        m_input_error = e.what();
      }
      throw;
    }
  }

  void write_stages() {
    m_bundle.write_json(
        "stages.json",
        {{"schema", k_stages_schema}, {"schema_version", k_bundle_schema_version}, {"stages", m_stages}});
  }

  // ---- 1. freeze --------------------------------------------------------------------------------------------

  std::string freeze() {
    m_task = load_task(m_opt.task_dir);
    if (!m_task.backends.contains(m_opt.backend)) {
      throw DataError(
          fmt::format("{}: the task has no [backends.{}] section", m_task.manifest.string(), m_opt.backend));
    }
    const BackendImpls& bi = m_task.backends.at(m_opt.backend);
    const fs::path baseline = m_opt.baseline.empty() ? bi.baseline : m_opt.baseline;
    // --seed (or a drawn one) chooses block orders and layouts; the data comes from a secret no option sets
    // (util/data_secret.h), committed to in the plan and revealed in decision.json.
    m_seed = m_opt.seed ? *m_opt.seed : std::random_device{}() * 4294967296ull + std::random_device{}();
    m_secret = DataSecret::draw();
    m_timing_nonce = m_secret.nonce("timing");
    m_final_nonce = m_secret.nonce("final");

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
    m_artifacts = build_implementations(requests);
    std::vector<PlannedImpl>& impls = m_plan.implementations;
    auto plan = [&](ImplRole role, std::string name, int layout = 0, std::optional<FailureReason> expect = {}) {
      PlannedImpl& im = impls.emplace_back();
      im.role = role;
      im.name = std::move(name);
      im.layout = layout;
      im.expect = expect;
    };
    plan(ImplRole::baseline, "baseline");
    plan(ImplRole::candidate, "candidate");
    for (int v = 1; v < m_layouts; ++v) {
      plan(ImplRole::baseline_layout, fmt::format("baseline@{}", v), v);
      plan(ImplRole::candidate_layout, fmt::format("candidate@{}", v), v);
    }
    for (const ControlSpec& c : bi.controls) plan(ImplRole::control, c.name, 0, c.expect);
    for (size_t i = 0; i < impls.size(); ++i) record_artifact(impls[i], m_artifacts[i]);

    m_environment = capture_environment(artifact(ImplRole::candidate).identity.compiler_version);
    m_bundle.write_json("environment.json", m_environment);
    describe_run();
    const std::string text = json_text(to_json(m_plan), 2) + "\n";
    m_bundle.write_text("plan.json", text);
    m_plan_digest = sha256_hex(std::string_view(text));
    if (m_obs.plan_frozen) m_obs.plan_frozen(m_plan_digest);
    m_inputs.candidate_built = artifact(ImplRole::candidate).ok;
    m_inputs.candidate_identical = same_code(artifact(ImplRole::candidate), artifact(ImplRole::baseline));
    size_t built = 0;
    for (const Artifact& a : m_artifacts) built += a.ok;
    return fmt::format("plan digest {}; {} implementations ({} built)", m_plan_digest, impls.size(), built);
  }

  // Copies an implementation's source and build into the bundle and records them in its plan entry. From here on
  // every worker loads the bundle's copy: the binary that is timed is the one in the evidence.
  void record_artifact(PlannedImpl& im, Artifact& art) {
    im.bundle_source = m_bundle.add_artifact(art.source, art.identity.source_sha256 + art.source.extension().string());
    if (art.ok) {
      im.bundle_artifact = m_bundle.add_artifact(art.path, art.identity.artifact_sha256 + ".so");
      art.path = m_bundle.dir() / im.bundle_artifact;
    }
    im.source = art.source.string();
    im.built = art.ok;
    im.pad_bytes = layout_pad_bytes(art.identity.layout_variant);
    im.build_log = art.ok ? "" : art.log;
    im.identity = to_json(art.identity);
  }

  // Everything of the plan but the implementations: the task, the options, the seeds, and the kwb that runs it.
  void describe_run() {
    Plan& p = m_plan;
    p.created = utc_now();
    p.argv = m_opt.argv;
    p.task.name = m_task.name;
    p.task.dir = m_task.dir.string();
    p.task.manifest_sha256 = m_task.manifest_sha256;
    p.task.identity = m_task.identity;
    p.task.manifest = read_file(m_task.manifest);
    const nlohmann::json oracle = oracle_record(m_task);
    p.task.oracle = {oracle.at("source").get<std::string>(), oracle.at("source_sha256").get<std::string>(),
                     oracle.at("identity")};
    for (size_t i = 0; i < m_task.signature.outputs.size(); ++i) {
      const TensorSpec& out = m_task.signature.outputs[i];
      const Tolerance& t = m_task.output_tolerance.at(i);
      p.task.tolerances.push_back({out.name, to_string(out.dtype), to_string(t.mode), t.rtol, t.atol, t.ulp});
    }
    for (const Case& c : m_task.cases) {
      p.task.cases.push_back({c.name, c.role, c.dims, c.seed, to_string(c.data.kind), c.data.scale});
    }
    p.backend = m_opt.backend;
    p.device = m_opt.device;
    p.cold = m_opt.timing.cold;
    p.exhaustive_checks = m_opt.exhaustive_checks;
    p.profile = m_opt.profile;
    // What reaches every worker besides PATH and LC_ALL: device selection and the runtimes' own settings
    // (POCL_MAX_PTHREAD_COUNT, CUDA_VISIBLE_DEVICES, ...), which change what is measured.
    p.worker_environment = worker_environment();
    p.gates = {m_opt.gate.kind, m_opt.gate.min_improvement_pct, m_opt.gate.max_aa_difference_pct, m_opt.gate.alpha,
               m_opt.gate.same_margin_pct};
    p.budgets = {m_opt.budget.min_blocks,  m_opt.budget.max_blocks,
                 m_opt.budget.max_seconds, m_opt.timing.warmups,
                 m_opt.timing.samples,     static_cast<double>(m_opt.timing.timeout.count()) / 1000.0};
    p.workloads = m_opt.workloads;
    p.layout = {m_layouts, layout_offsets(m_opt.backend, m_layouts),
                m_task.signature.inputs.size() + m_task.signature.outputs.size()};
    p.seeds = {m_seed, 0, m_secret.commitment()};
    const Provenance built_from = build_provenance();
    p.kwb = {KWB_VERSION, built_from.git_sha, built_from.git_dirty, sha256_file(fs::read_symlink("/proc/self/exe")),
             sha256_file(worker_executable())};
    p.environment = m_environment;
  }

  // Every stage re-hashes what it is about to run against the plan and refuses to go on when anything differs.
  void require_identity(size_t i) {
    const PlannedImpl& im = m_plan.implementations[i];
    if (!m_artifacts[i].ok) return;
    for (auto [rel, planned] : {std::pair{im.bundle_artifact, m_artifacts[i].identity.artifact_sha256},
                                std::pair{im.bundle_source, m_artifacts[i].identity.source_sha256}}) {
      const std::string now = sha256_file(m_bundle.dir() / rel);
      if (now != planned) {
        std::string m = fmt::format("{} ({}): plan {} now {}", rel, im.name, planned, now);
        m_inputs.identity_mismatches.push_back(m);
        throw InternalError("identity check failed: " + m);
      }
    }
  }

  // The index of the arm's plain build in the plan (validate always plans both arms).
  size_t index_of(ImplRole arm) const {
    for (size_t i = 0; i < m_plan.implementations.size(); ++i) {
      if (m_plan.implementations[i].role == arm) return i;
    }
    throw InternalError(fmt::format("no implementation with role {}", to_string(arm)));
  }
  Artifact& artifact(ImplRole arm) { return m_artifacts[index_of(arm)]; }

  CheckReport check(size_t i, const std::string& file, uint64_t nonce,
                    std::optional<FailureReason> stop_after = std::nullopt, bool held_out = false) {
    require_identity(i);
    CheckOptions co;
    co.held_out = held_out;
    co.backend = m_opt.backend;
    co.timeout = m_opt.timing.timeout;
    co.nonce = nonce;
    co.stop_after_reason = stop_after;
    co.exhaustive = m_opt.exhaustive_checks;
    CheckReport r = run_check(m_task, m_artifacts[i], co);
    m_bundle.write_json(file, to_json(r));
    return r;
  }

  static std::string check_summary(const CheckReport& r) {
    std::string s = fmt::format("{}: {} assertions passed, {} failed", r.pass() ? "PASS" : "FAIL", r.passed, r.failed);
    if (!r.not_run.empty()) s += fmt::format("; {} case(s) not run: {}", r.not_run.size(), r.stop_reason);
    // The first failure, named, so that the progress line and stages.json say why without opening the report.
    if (!r.failures.empty()) {
      const Failure& f = r.failures.front();
      s += fmt::format("; first failure: case {}{}, {} ({}): {}", f.case_name,
                       f.call >= 0 ? fmt::format(" call {}", f.call) : "", f.assertion, to_string(f.reason),
                       f.detail.size() > 240 ? f.detail.substr(0, 240) + " ..." : f.detail);
    }
    return s;
  }

  // ---- 2-5. checks, profile, controls --------------------------------------------------------------------------

  std::string check_baseline() {
    CheckReport r = check(index_of(ImplRole::baseline), check_file("baseline"), 0);
    m_inputs.baseline_check_pass = r.pass();
    m_inputs.min_improvement_pct = m_opt.gate.min_improvement_pct;
    m_inputs.same_margin_pct = m_opt.gate.same_margin_pct;
    m_stage_failed = !r.pass();
    if (!r.pass()) return check_summary(r);
    return check_summary(r) + "; " + probe_held_out_shapes();
  }

  // The final check's held-out shapes (its nonce, so exactly those shapes), tried on the baseline before anything is
  // timed: a task whose operator cannot take them (a head_dim that must stay even, undeclared in [dims]) is a task
  // error found in seconds (exit 65), not an INVALID after minutes of timing. Only the baseline runs them: the
  // candidate meets them first in the final check. Nothing of this run is evidence; a failure is the input error.
  std::string probe_held_out_shapes() {
    const size_t i = index_of(ImplRole::baseline);
    require_identity(i);
    CheckOptions co;
    co.backend = m_opt.backend;
    co.timeout = m_opt.timing.timeout;
    co.nonce = m_final_nonce;
    co.held_out = true;
    co.held_out_only = true;
    std::string why;
    try {
      const CheckReport r = run_check(m_task, m_artifacts[i], co);
      if (r.pass()) return fmt::format("the final check's {} held-out shape(s) taken by the baseline", r.cases.size());
      const Failure& f = r.failures.front();
      std::string dims = "shapes unknown";
      for (const CaseReport& cr : r.cases) {
        if (cr.name == f.case_name) dims = cr.dims;
      }
      why = fmt::format("the baseline fails the held-out case {} ({}): {} ({}): {}", f.case_name, dims, f.assertion,
                        to_string(f.reason), f.detail.size() > 300 ? f.detail.substr(0, 300) + " ..." : f.detail);
    } catch (const OracleError& e) {
      // The oracle, not the operator's shapes nor the baseline: its author is told so, and [dims] only second.
      const std::string message = fmt::format(
          "{}: the task's oracle fails at a held-out shape the final check uses (every dim moves to a fresh odd "
          "value, up or down): {}. Fix the oracle so that it takes every shape the task allows (an index input "
          "should follow the dim it indexes: randint's high = \"vocab - 1\"), or declare in task.toml's [dims] "
          "what the operator needs (docs/task-format.md, \"Dims: what the operator requires of a shape\")",
          m_task.manifest.string(), e.what());
      m_input_error_code = static_cast<int>(ExitCode::data_error);
      m_input_error = message;
      throw DataError(message);
    } catch (const Error& e) {
      why = fmt::format("the held-out shapes fail before the baseline runs: {}", e.what());
    }
    const std::string message = fmt::format(
        "{}: the task cannot take the held-out shapes the final check uses (every dim moves to a fresh odd value): "
        "{}. Declare what the operator needs in task.toml's [dims] table (e.g. head_dim = {{ multiple_of = 2 }}, "
        "n_kv = {{ equal_to = \"n_ctx\" }}; docs/task-format.md, \"Dims: what the operator requires of a shape\"), or "
        "fix the baseline",
        m_task.manifest.string(), why);
    m_input_error_code = static_cast<int>(ExitCode::data_error);
    m_input_error = message;
    throw DataError(message);
  }

  // Structural facts only (instructions, allocations, passes, bandwidth), never part of the decision. The
  // baseline is profiled here, after its check; the candidate right after its own check passes (a rejected
  // implementation is never profiled).
  std::string profile_one(ImplRole arm) {
    const std::string role(to_string(arm));
    const size_t i = index_of(arm);
    require_identity(i);
    ProfileOptions po;
    po.backend = m_opt.backend;
    po.workloads = m_opt.workloads;
    po.timeout = m_opt.timing.timeout;
    po.nonce = m_secret.nonce("profile");  // data of its own: nothing the timed pool holds
    po.raw_dir = m_bundle.dir() / "profile" / ("raw_" + role);
    ProfileReport r = run_profile(m_task, m_artifacts[i], po);
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

  std::string profile() { return profile_one(ImplRole::baseline); }

  std::string check_candidate() {
    CheckReport r = check(index_of(ImplRole::candidate), check_file("candidate"), 0);
    m_inputs.candidate_check_pass = r.pass();
    m_inputs.candidate_check_reasons = distinct_reasons(r.failures);
    m_stage_failed = !r.pass();
    if (auto why = timing_refusal(r)) return check_summary(r) + "; timing and profiling refused";
    if (!m_opt.profile) return check_summary(r) + "; not profiled (--no-profile)";
    std::string profiled;
    try {
      profiled = "; profile " + profile_one(ImplRole::candidate);
    } catch (const std::exception& e) {
      // The profile is descriptive: its failure is recorded, it does not change the decision.
      profiled = std::string("; profile failed: ") + e.what();
    }
    return check_summary(r) + profiled;
  }

  std::string controls() {
    nlohmann::json list = nlohmann::json::array();
    size_t good = 0;
    std::vector<std::string> thin;
    for (size_t i = 0; i < m_plan.implementations.size(); ++i) {
      const PlannedImpl& im = m_plan.implementations[i];
      if (im.role != ImplRole::control) continue;
      const FailureReason expect = im.expect.value();  // every control has one (task/manifest.cpp)
      CheckReport r = check(i, check_file(control_check_stem(im.name)), 0, expect);
      ControlOutcome o{im.name,
                       expect,
                       !r.pass(),
                       r.has_reason(expect),
                       timing_refusal(r).has_value(),
                       distinct_reasons(r.failures)};
      m_inputs.controls.push_back(o);
      const std::vector<std::string> reasons = distinct_reasons(r.failures);
      const bool ok = o.rejected && o.expected_reason_seen && o.timing_refused;
      good += ok;
      const ControlMargin margin = control_margin(to_json(r), expect);
      if (!margin.thin.empty()) thin.push_back(fmt::format("{} ({})", im.name, describe(margin)));
      list.push_back({{"name", o.name},
                      {"expect", to_string(o.expect)},
                      {"rejected", o.rejected},
                      {"reasons", reasons},
                      {"expected_reason_seen", o.expected_reason_seen},
                      {"timing_refused", o.timing_refused},
                      {"metric", nullptr},
                      {"check", check_file(control_check_stem(im.name))},
                      {"ok", ok},
                      {"margin", o.expected_reason_seen ? to_json(margin) : nlohmann::json(nullptr)}});
    }
    const size_t total = list.size();
    m_bundle.write_json("controls.json", {{"schema", k_controls_schema},
                                          {"schema_version", k_bundle_schema_version},
                                          {"controls", list},
                                          {"killed", good},
                                          {"total", total}});
    m_stage_failed = good != total;
    std::string summary =
        fmt::format("{} of {} controls rejected for their named reason, no metric for any", good, total);
    // A thin control still counts (it was rejected for its reason); the warning says it hangs by a thread.
    if (!thin.empty()) summary += fmt::format("; WARNING: thin margin: {}", fmt::join(thin, ", "));
    return summary;
  }

  // ---- 6-7. timing --------------------------------------------------------------------------------------------

  // The arm's layout pool (record/plan.h, Plan::pool), each build re-hashed against the plan.
  std::vector<const Artifact*> pool(ImplRole arm) {
    std::vector<const Artifact*> out;
    for (size_t i : m_plan.pool(arm)) {
      require_identity(i);
      out.push_back(&m_artifacts[i]);
    }
    return out;
  }

  // A/A: the baseline's layout pool against itself, drawn independently per arm; A/B: the baseline's pool against
  // the candidate's.
  CompareReport compare(CompareMode mode, ImplRole other, const std::string& label) {
    CompareRequest req;
    req.mode = mode;
    req.layouts = {pool(ImplRole::baseline), pool(other)};
    req.arms = {req.layouts[0].front(), req.layouts[1].front()};
    req.labels = {"A", label};
    req.workloads = m_opt.workloads;
    req.gate = m_opt.gate;
    req.gate.mode = mode;
    // A workload whose A/A did not settle: its A/B passes only once it clears the bar charged the bias that A/A
    // leaves, so that it keeps timing until the decision can keep the candidate (docs/timing.md).
    if (mode == CompareMode::ab) {
      for (const WorkloadVerdict& v : m_inputs.aa) {
        if (const std::optional<double> bias = aa_bias_log(v)) req.gate.aa_bias_log[v.workload] = *bias;
      }
    }
    req.budget = m_opt.budget;
    req.timing = m_opt.timing;
    req.timing.nonce = m_timing_nonce;
    req.seed = mix_seed(m_seed, mode == CompareMode::aa ? stats::k_seed_tag_aa : stats::k_seed_tag_ab);
    req.skip_checks = true;  // both arms passed their checks in this run, on these exact artifacts
    const std::string tag = mode == CompareMode::aa ? "aa" : "ab";
    // One hold of the timing lock from the A/A through the A/B (released by run() after the last stage that times):
    // nothing else on this machine is timed between the noise floor and the comparison it calibrates.
    if (!m_timing_lock) {
      TimingLock::Request lr;
      lr.what = fmt::format("kwb validate: {} A/A and A/B (bundle {})", m_task.name, m_opt.output_dir.string());
      lr.notice = m_obs.timing_lock_wait;
      lr.timeout_s = m_opt.lock_timeout_s;
      m_timing_lock = TimingLock::acquire(timing_lock_path(), lr);
      if (m_obs.timing_lock_waited && !m_timing_lock->record().waited_for.empty()) {
        m_obs.timing_lock_waited(m_timing_lock->record(), timing_budget_from(m_stage_index));
      }
    }
    req.held_lock = &*m_timing_lock;
    // Interrupted: what was measured so far is kept (comparisons/<tag>.json with verdict INTERRUPTED, its samples).
    req.on_interrupted = [&](const CompareReport& partial) {
      m_bundle.write_json("comparisons/" + tag + ".json", to_json(partial));
      for (const Sample& s : partial.samples) add_sample(tag, s);
      write_samples();
    };
    CompareReport r = run_compare(m_task, req, m_obs.comparison_progress);
    nlohmann::json j = to_json(r);
    m_bundle.write_json("comparisons/" + tag + ".json", j);
    m_comparisons[tag] = j;
    for (const Sample& s : r.samples) add_sample(tag, s);
    write_samples();
    return r;
  }

  // Ends validate's hold of the timing lock, and records when in the comparisons written while it was held.
  void release_timing_lock() {
    if (!m_timing_lock) return;
    m_timing_lock->release();
    for (auto& [tag, j] : m_comparisons) {
      if (!j.contains("timing_lock") || !j["timing_lock"].is_object()) continue;
      j["timing_lock"]["released_unix_ns"] = m_timing_lock->record().released_unix_ns;
      m_bundle.write_json("comparisons/" + tag + ".json", j);
    }
    m_timing_lock.reset();
  }

  void add_sample(const std::string& comparison, const Sample& s) {
    SampleRow& row = m_samples.emplace_back();
    static_cast<Sample&>(row) = s;
    row.comparison = comparison;
  }

  void write_samples() { m_bundle.write_text("samples.csv", samples_csv(m_samples)); }

  static WorkloadVerdict workload_verdict(const WorkloadResult& w) {
    WorkloadVerdict v{w.name, w.verdict, std::nullopt, std::nullopt};
    if (w.verdict == stats::Verdict::invalid) v.detail = w.reason;
    // An output that failed validation comes first: compare returns at that block, before any other verdict.
    if (w.verdict == stats::Verdict::invalid && w.failures.empty()) {
      v.invalid_code = w.aging.ages             ? "speed_changes_with_age"
                       : w.outside.moved        ? "work_outside_window"
                       : w.untimed.untimed_work ? "untimed_work"
                                                : "";
    }
    if (w.estimate) {
      v.ci_low_pct = w.estimate->ci_low_pct;
      v.ci_high_pct = w.estimate->ci_high_pct;
      v.improvement_pct = w.estimate->improvement_pct;
      v.mde_pct = w.estimate->mde_pct;
    }
    return v;
  }

  std::string aa() {
    CompareReport c = compare(CompareMode::aa, ImplRole::baseline, "A'");
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
    CompareReport c = compare(CompareMode::ab, ImplRole::candidate, "B");
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
    for (size_t i = 0; i < m_artifacts.size(); ++i) {
      try {
        require_identity(i);
      } catch (const InternalError&) {
        mismatches.push_back(m_inputs.identity_mismatches.back());
      }
    }
    nlohmann::json now_env = capture_environment(artifact(ImplRole::candidate).identity.compiler_version);
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
      CheckReport r =
          check(index_of(ImplRole::candidate), check_file("candidate_final"), m_final_nonce, std::nullopt, true);
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
    return fmt::format(
        "re-check with fresh data and held-out shapes: {}; {} identity mismatches; {} environment differences",
        check_text, mismatches.size(), diffs.size());
  }

  // ---- 9. decision ----------------------------------------------------------------------------------------------

  std::string decision() {
    m_decision = decide(m_inputs);
    // A freeze that failed early leaves no environment: the decision is still written, with what is known.
    if (!m_environment.is_object()) m_environment = nlohmann::json::object();
    DecisionRecord record;
    record.decision = m_decision.decision;
    record.exit_code = m_decision.exit_code;
    record.reasons = m_decision.reasons;
    record.reason_codes = m_decision.reason_codes;
    record.plan_digest = m_plan_digest;
    DecisionScope& scope = record.scope;
    scope.task = m_task.name;
    scope.machine = m_environment.value("cpu_model", "unknown");
    scope.host = m_environment.value("hostname", "unknown");
    scope.backend = to_string(m_opt.backend);
    scope.device = m_opt.device;
    for (const auto* list : {&m_task.signature.inputs, &m_task.signature.outputs}) {
      for (const TensorSpec& t : *list) {
        const std::string d = to_string(t.dtype);
        if (std::find(scope.dtypes.begin(), scope.dtypes.end(), d) == scope.dtypes.end()) scope.dtypes.push_back(d);
      }
    }
    for (const auto& w : m_inputs.ab) scope.workloads.push_back(w.workload);
    record.inputs = to_json(m_inputs);
    record.created = utc_now();
    record.data_secret = m_secret.hex();
    m_decision_json = to_json(record);
    m_bundle.write_json("decision.json", m_decision_json);
    return std::string(to_string(m_decision.decision));
  }

  const ValidateOptions& m_opt;
  const StageGraph& m_graph;
  const ValidateObserver& m_obs;
  BundleWriter m_bundle;
  nlohmann::json m_stages;
  bool m_stage_failed = false;
  bool m_interrupted = false;
  Task m_task;
  Plan m_plan;
  std::vector<Artifact> m_artifacts;  // the plan's implementations' builds, in its order
  uint64_t m_seed = 0, m_timing_nonce = 0, m_final_nonce = 0;
  DataSecret m_secret;
  nlohmann::json m_environment;
  std::string m_plan_digest;
  std::string m_manifest_sha256;
  std::optional<SigningKey> m_key;
  std::string m_unsigned_reason;
  DecisionInputs m_inputs;
  Decision m_decision;
  nlohmann::json m_decision_json;
  std::vector<SampleRow> m_samples;
  std::optional<TimingLock> m_timing_lock;              // held from the A/A's start through the A/B
  std::string m_lock_timeout;                           // the comparison that gave up waiting for it, why
  size_t m_stage_index = 0;                             // the stage running now
  std::map<std::string, nlohmann::json> m_comparisons;  // the comparisons written, by tag
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
