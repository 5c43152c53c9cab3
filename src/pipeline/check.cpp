#include "pipeline/check.h"

#include "task/data.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "worker/worker_process.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>

namespace kwb {

bool CheckReport::has_reason(FailureReason reason) const {
  for (const Failure& f : failures) {
    if (f.reason == reason) return true;
  }
  return false;
}

namespace {

// A report on `artifact` with nothing in it yet.
CheckReport empty_report(const Task& task, const Artifact& artifact) {
  CheckReport r;
  r.task = task.name;
  for (const TensorSpec& o : task.signature.outputs) r.output_names.push_back(o.name);
  r.implementation = artifact.source.string();
  r.identity = artifact.identity;
  return r;
}

}  // namespace

CheckReport build_failure_report(const Task& task, const Artifact& artifact) {
  CheckReport r = empty_report(task, artifact);
  r.built = false;
  r.build_log = artifact.log;
  r.failed = 1;
  r.failures.push_back({"", -1, "builds", FailureReason::build_failed, artifact.log});
  return r;
}

std::vector<Case> held_out_cases(const Task& task, const std::vector<const Case*>& cases, uint64_t seed) {
  Rng rng(mix_seed(seed, 0x4E1D));
  std::map<std::string, std::set<int64_t>> published;
  for (const Case& c : task.cases) {
    for (const auto& [dim, v] : c.dims) published[dim].insert(v);
  }
  auto constraint = [&](const std::string& dim) {
    const auto at = task.dim_constraints.find(dim);
    return at == task.dim_constraints.end() ? DimConstraint{} : at->second;
  };
  // A value near `v` that no case uses for `dim`: an odd multiple of the dim's multiple_of (odd when it has none),
  // so that no SIMD width or block size beyond what the task requires divides it; at least its min.
  auto perturb = [&](const std::string& dim, int64_t v) {
    const std::set<int64_t>& taken = published[dim];
    const DimConstraint c = constraint(dim);
    const int64_t m = c.multiple_of;
    int64_t reach = std::max<int64_t>(2 * m, v / 8);
    for (;;) {
      std::vector<int64_t> candidates;
      const int64_t lo = std::max<int64_t>(c.min, v - reach);
      for (int64_t k = ((lo + m - 1) / m) | 1; k * m <= v + reach; k += 2) {
        if (!taken.contains(k * m)) candidates.push_back(k * m);
      }
      if (!candidates.empty()) return candidates[rng.next() % candidates.size()];
      reach *= 2;
    }
  };
  // A dim equal to another takes its value.
  auto tie = [&](Case& h) {
    for (auto& [dim, v] : h.dims) {
      const DimConstraint c = constraint(dim);
      if (!c.equal_to.empty()) v = h.dims.at(c.equal_to);
    }
  };
  auto bytes_of = [&](const Case& c) {
    size_t b = 0;
    for (const auto* list : {&task.signature.inputs, &task.signature.outputs}) {
      for (const TensorSpec& s : *list) b += resolve_shape(s, c).elements() * dtype_size(s.dtype);
    }
    return b;
  };
  std::vector<Case> out;
  for (const Case* c : cases) {
    Case h = *c;
    h.name = c->name + "~held_out";
    h.role = CaseRole::correctness;
    h.seed = mix_seed(c->seed, rng.next());
    for (auto& [dim, v] : h.dims) {
      if (constraint(dim).equal_to.empty()) v = perturb(dim, v);
    }
    tie(h);
    while (bytes_of(h) > k_held_out_max_bytes) {
      auto largest = h.dims.end();
      for (auto it = h.dims.begin(); it != h.dims.end(); ++it) {
        if (constraint(it->first).equal_to.empty() && (largest == h.dims.end() || it->second > largest->second)) {
          largest = it;
        }
      }
      if (largest == h.dims.end() || largest->second <= 1) break;
      const int64_t smaller = perturb(largest->first, largest->second / 2);
      if (smaller >= largest->second) break;  // its min or multiple_of keeps it from shrinking
      largest->second = smaller;
      tie(h);
    }
    out.push_back(std::move(h));
  }
  return out;
}

namespace {

size_t input_bytes(const Task& task, const Case& c) {
  size_t b = 0;
  for (const TensorSpec& s : task.signature.inputs) b += resolve_shape(s, c).elements() * dtype_size(s.dtype);
  return b;
}

void add_call(CaseReport& cr, CheckReport& report, CallResult& res) {
  ++cr.calls_run;
  cr.passed += res.passed;
  cr.failed += res.failures.size();
  cr.max_rel_error = std::max(cr.max_rel_error, res.max_rel_error);
  cr.tolerance_used = std::max(cr.tolerance_used, res.max_tolerance_used);
  if (cr.outputs.size() < res.outputs.size()) cr.outputs.resize(res.outputs.size());
  for (size_t i = 0; i < res.outputs.size(); ++i) cr.outputs[i].merge(res.outputs[i]);
  if (res.kernels && cr.kernels.empty()) {
    for (const DeviceCommand& k : *res.kernels) cr.kernels.push_back(k.name);
  }
  for (Failure& f : res.failures) report.failures.push_back(std::move(f));
}

// A worker that is gone after its last answer (found by an unmap or by the goodbye), or whose goodbye does not
// count every call, leaves the run's records incomplete: the implementation may have forged that answer and left.
// A failure whatever the worker's exit status. Counted in `cr`.
void record_late_death(const WorkerSession& session, CaseReport& cr, CheckReport& report) {
  const std::optional<WorkerDeath> d = session.death();
  report.failures.push_back({cr.name, -1, "said_goodbye", d ? d->reason : FailureReason::exited,
                             "after its last answer: " + (d ? d->detail : std::string("the worker was gone"))});
  ++cr.failed;
}

void finish_session(WorkerSession& session, CaseReport& cr, CheckReport& report) {
  if (!session.alive()) return;
  if (session.shutdown()) {
    ++cr.passed;
    return;
  }
  record_late_death(session, cr, report);
}

// One timing visit, rehearsed: what compare does to a candidate (a fresh worker, a pool of input sets cycled
// through, many calls in timing mode), with a secret number of calls, and every output validated.
CaseReport rehearse_timing_visit(const Task& task, const Artifact& artifact, const CheckOptions& options,
                                 const Case& workload, uint64_t secret, CheckReport& report) {
  // The workload under its own name, so that failures say where they happened.
  Case rehearsal = workload;
  rehearsal.name = workload.name + "~rehearsal";
  CaseReport cr;
  cr.name = rehearsal.name;
  cr.role = CaseRole::timing;
  cr.dims = input_shapes_text(task, workload);
  const auto t0 = std::chrono::steady_clock::now();
  SessionOptions so;
  so.backend = options.backend;
  so.timeout = options.timeout;
  so.poison_seed = mix_seed(secret, 0x4E4E);
  WorkerSession session(task, artifact, so);
  LoadOutcome lo = session.start();
  if (!lo.ok) {
    ++cr.failed;
    report.failures.push_back({cr.name, -1, "loads", lo.reason, lo.detail});
  } else {
    Rng rng(secret);
    std::vector<std::unique_ptr<InputSet>> pool;
    for (uint64_t i = 0; i < 4; ++i) {
      pool.push_back(std::make_unique<InputSet>(make_input_set(task, rehearsal, 2000 + i, rng.next())));
    }
    const uint64_t span =
        static_cast<uint64_t>(k_rehearsal_max_calls) - static_cast<uint64_t>(k_rehearsal_min_calls) + 1;
    const int calls = k_rehearsal_min_calls + static_cast<int>(rng.next() % span);
    bool completed = true;
    for (int k = 0; k < calls && completed; ++k) {
      CallResult res = session.call(*pool[static_cast<size_t>(k) % pool.size()], k, CallMode::timing);
      completed = res.completed;
      add_call(cr, report, res);
    }
    if (completed && !session.alive()) record_late_death(session, cr, report);
    for (size_t i = 0; completed && i < pool.size(); ++i) {
      CallResult res = session.verify_inputs(*pool[i], calls);
      cr.passed += res.passed;
      cr.failed += res.failures.size();
      for (Failure& f : res.failures) report.failures.push_back(std::move(f));
    }
    finish_session(session, cr, report);
  }
  cr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return cr;
}

}  // namespace

std::string check_cache_key(const Task& task, const Artifact& artifact, const CheckOptions& options) {
  std::vector<std::string> parts = {
      "kwb.check-cache.3", executable_sha256("/proc/self/exe"), executable_sha256(worker_executable()),
      task.manifest_sha256,
      // The oracle decides every expected output (its flags are kwb's, covered by
      // kwb's digest above).
      task.oracle_sha256, artifact.identity.artifact_sha256, artifact.identity.source_sha256,
      std::string(to_string(options.backend)), std::to_string(options.timeout.count()), std::to_string(options.nonce),
      std::to_string(options.calls_per_case), to_string(options.stop_after_reason),
      options.held_out ? (options.held_out_only ? "held_out only" : "held_out") : "published",
      options.exhaustive ? "exhaustive" : "stops at a worker failure",
      fmt::format("{} only-cases", options.only_cases.size())};
  for (const std::string& c : options.only_cases) parts.push_back(c);
  const std::vector<std::string> env = worker_environment_identity();
  parts.push_back(fmt::format("{} environment", env.size()));
  parts.insert(parts.end(), env.begin(), env.end());
  Sha256 h;
  for (const std::string& part : parts) {
    h.update(part);
    h.update(std::string_view("\0", 1));
  }
  return h.hex_digest();
}

namespace {
CheckReport run_check_cases(const Task& task, const Artifact& artifact, const CheckOptions& options);
}  // namespace

CheckReport run_check(const Task& task, const Artifact& artifact, const CheckOptions& options) {
  CheckReport r = artifact.ok ? run_check_cases(task, artifact, options) : build_failure_report(task, artifact);
  r.nonce = options.nonce;
  r.held_out = options.held_out;
  r.stop_after_reason = options.stop_after_reason;
  return r;
}

namespace {

SessionOptions check_session_options(const CheckOptions& options) {
  SessionOptions so;
  so.backend = options.backend;
  so.timeout = options.timeout;
  so.poison_seed = mix_seed(options.nonce, 0xC4EC);
  so.trace = is_device(options.backend);  // the kernel trace is cheap next to validation, and says what ran
  return so;
}

// The cases one check runs, in their order.
struct CheckPlan {
  std::vector<const Case*> order;
  std::vector<Case> held_out;  // the held-out cases of `order` (stable storage: input sets point at their case)
  uint64_t held_out_nonce = 0;
  const Case* rehearsal = nullptr;  // final validation ends with a rehearsed timing visit on this case
};

CheckPlan plan_check(const Task& task, const CheckOptions& options, Rng& secret) {
  CheckPlan plan;
  // Smallest cases first: a broken implementation fails in milliseconds, not after the DRAM-sized case.
  for (const Case& c : task.cases) {
    if (options.only_cases.empty() ||
        std::find(options.only_cases.begin(), options.only_cases.end(), c.name) != options.only_cases.end()) {
      plan.order.push_back(&c);
    }
  }
  auto by_size = [&](const Case* a, const Case* b) { return input_bytes(task, *a) < input_bytes(task, *b); };
  std::stable_sort(plan.order.begin(), plan.order.end(), by_size);
  // Held-out cases follow the published ones.
  if (options.held_out) {
    plan.held_out = held_out_cases(task, plan.order, options.nonce != 0 ? options.nonce : secret.next());
    std::vector<const Case*> extra;
    for (const Case& h : plan.held_out) extra.push_back(&h);
    std::stable_sort(extra.begin(), extra.end(), by_size);
    if (options.held_out_only) plan.order.clear();
    plan.order.insert(plan.order.end(), extra.begin(), extra.end());
  }
  plan.held_out_nonce = options.nonce != 0 ? options.nonce : secret.next();
  // The rehearsal runs on the smallest timing case.
  if (options.held_out && !options.held_out_only) {
    for (const Case& c : task.cases) {
      if (c.role == CaseRole::timing &&
          (plan.rehearsal == nullptr || input_bytes(task, c) < input_bytes(task, *plan.rehearsal))) {
        plan.rehearsal = &c;
      }
    }
  }
  return plan;
}

// The check's cases, one after the other, in one worker (a fresh one after a death).
struct CaseRunner {
  const Task& task;
  const CheckOptions& options;
  const CheckPlan& plan;
  WorkerSession& session;
  Rng& secret;
  CheckReport& report;
  bool load_failed = false;

  // Case `c`, counted in the report; whether the worker failed in it (it died, or the implementation did not load).
  bool run(const Case& c) {
    CaseReport cr;
    cr.name = c.name;
    cr.role = c.role;
    cr.dims = input_shapes_text(task, c);
    bool worker_failed = false;
    const auto t0 = std::chrono::steady_clock::now();
    if (load_failed) {
      // Only when exhaustive: nothing can run; missing data is a failure, never a pass.
      ++cr.failed;
      report.failures.push_back({c.name, -1, "ran", FailureReason::not_run, "the implementation could not be loaded"});
    } else {
      worker_failed = !ensure_worker(c, cr);
      worker_failed = !run_calls(c, cr) || worker_failed;
    }
    cr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report.passed += cr.passed;
    report.failed += cr.failed;
    report.cases.push_back(cr);
    return worker_failed;
  }

  // A worker with the implementation loaded, started where there is none; false when it does not load.
  bool ensure_worker(const Case& c, CaseReport& cr) {
    if (session.alive()) return true;
    LoadOutcome lo = session.start();
    if (!lo.device.empty()) report.device = lo.device;
    if (lo.ok) return true;
    load_failed = true;
    ++cr.failed;
    report.failures.push_back({c.name, -1, "loads", lo.reason, lo.detail});
    return false;
  }

  // The case's checked calls; false when the worker died during them or after its last answer.
  bool run_calls(const Case& c, CaseReport& cr) {
    const bool is_held_out = c.name.ends_with("~held_out");
    const int calls =
        input_bytes(task, c) > k_large_case_bytes ? std::max(1, options.calls_per_case / 2) : options.calls_per_case;
    std::unique_ptr<InputSet> previous;
    bool last_completed = false;
    for (int k = 0; !load_failed && k < calls; ++k) {
      // Odd calls run on a twin of the previous call's inputs; every set goes into the same input slots, behind
      // the addresses of the one before (session/worker_session.h).
      auto set = std::make_unique<InputSet>(
          k % 2 == 1 && previous
              ? make_twin(task, *previous, secret.next())
              : make_input_set(task, c, static_cast<uint64_t>(k), is_held_out ? plan.held_out_nonce : options.nonce));
      CallResult res = session.call(*set, k, CallMode::check);
      add_call(cr, report, res);
      previous = std::move(set);
      last_completed = res.completed;
      if (!res.completed) return false;  // the worker is gone; the next case gets a fresh one
    }
    if (last_completed && !session.alive()) {
      record_late_death(session, cr, report);
      return false;
    }
    return true;
  }
};

// The last case's worker says goodbye, counted in that case.
void finish_last_case(WorkerSession& session, CheckReport& report) {
  if (report.cases.empty()) return;
  CaseReport& last = report.cases.back();
  const size_t passed = last.passed, failed = last.failed;
  finish_session(session, last, report);
  report.passed += last.passed - passed;
  report.failed += last.failed - failed;
}

CheckReport run_check_cases(const Task& task, const Artifact& artifact, const CheckOptions& options) {
  CheckReport report = empty_report(task, artifact);
  report.built = true;
  report.backend = options.backend;
  WorkerSession session(task, artifact, check_session_options(options));
  // Twins' perturbations, held-out shapes without a nonce and the rehearsal must not be predictable.
  Rng secret(unpredictable_seed());
  const CheckPlan plan = plan_check(task, options, secret);
  // Stops the check before order[next]: the rest of the cases, then the rehearsal, are not run.
  auto stop = [&](size_t next, std::string why) {
    report.stopped_early = true;
    report.stop_reason = std::move(why);
    for (size_t k = next; k < plan.order.size(); ++k) report.not_run.push_back(plan.order[k]->name);
    if (plan.rehearsal != nullptr) report.not_run.push_back(plan.rehearsal->name + "~rehearsal");
  };
  CaseRunner runner{task, options, plan, session, secret, report};
  for (size_t i = 0; i < plan.order.size(); ++i) {
    const Case& c = *plan.order[i];
    if (options.stop_after_reason && report.has_reason(*options.stop_after_reason)) {
      stop(i, fmt::format("the expected reason '{}' appeared", *options.stop_after_reason));
      break;
    }
    const bool worker_failed = runner.run(c);
    if (worker_failed && !options.exhaustive && (i + 1 < plan.order.size() || plan.rehearsal != nullptr)) {
      // Named by the failure that ended the worker: the last one recorded (the death, or the failed load).
      stop(i + 1, fmt::format("the worker failed in case {} ({}): the verdict is FAIL; --exhaustive runs every case",
                              c.name, report.failures.back().reason));
      break;
    }
  }
  finish_last_case(session, report);
  if (plan.rehearsal != nullptr && !runner.load_failed && !report.stopped_early) {
    CaseReport cr = rehearse_timing_visit(task, artifact, options, *plan.rehearsal, secret.next(), report);
    report.passed += cr.passed;
    report.failed += cr.failed;
    report.cases.push_back(cr);
  }
  return report;
}

}  // namespace

nlohmann::json to_json(const CheckReport& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const CaseReport& c : r.cases) {
    nlohmann::json outputs = nlohmann::json::array();
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      const OutputErrors& e = c.outputs[i];
      outputs.push_back({{"name", i < r.output_names.size() ? r.output_names[i] : std::to_string(i)},
                         {"max_abs_error", e.max_abs_error},
                         {"max_rel_error", e.max_rel_error},
                         {"tolerance_used", e.tolerance_used}});
    }
    cases.push_back({{"name", c.name},
                     {"role", to_string(c.role)},
                     {"dims", c.dims},
                     {"calls", c.calls_run},
                     {"passed", c.passed},
                     {"failed", c.failed},
                     {"max_rel_error", c.max_rel_error},
                     {"tolerance_used", c.tolerance_used},
                     {"outputs", outputs},
                     {"seconds", c.seconds}});
    if (!c.kernels.empty()) cases.back()["kernels"] = c.kernels;
  }
  nlohmann::json failures = nlohmann::json::array();
  for (const Failure& f : r.failures) {
    failures.push_back(to_json(f));
  }
  return {{"schema", k_check_schema},
          {"schema_version", k_check_schema_version},
          {"task", r.task},
          {"backend", to_string(r.backend)},
          {"device", r.device},
          {"implementation", {{"path", r.implementation}, {"identity", to_json(r.identity)}, {"built", r.built}}},
          {"cases", cases},
          {"assertions", {{"passed", r.passed}, {"failed", r.failed}}},
          {"failures", failures},
          {"stopped_early", r.stopped_early},
          {"request",
           {{"nonce", r.nonce}, {"held_out", r.held_out}, {"stop_after_reason", to_string(r.stop_after_reason)}}},
          {"stop_reason", r.stop_reason},
          {"not_run", r.not_run},
          {"verdict", r.pass() ? "PASS" : "FAIL"}};
}

CheckReport check_report_from_json(const nlohmann::json& j) {
  CheckReport r;
  r.task = j.at("task");
  r.backend = parse_backend_field(j.value("backend", std::string("cpu")), "check report: backend");
  r.device = j.value("device", std::string());
  r.implementation = j.at("implementation").at("path");
  r.built = j.at("implementation").at("built");
  r.identity = build_identity_from_json(j.at("implementation").at("identity"));
  for (const auto& c : j.at("cases")) {
    CaseReport cr;
    cr.name = c.at("name");
    cr.role = c.at("role") == "timing" ? CaseRole::timing : CaseRole::correctness;
    cr.dims = c.at("dims");
    cr.calls_run = c.at("calls");
    cr.passed = c.at("passed");
    cr.failed = c.at("failed");
    cr.max_rel_error = c.at("max_rel_error");
    cr.tolerance_used = c.at("tolerance_used").is_null() ? std::numeric_limits<double>::infinity()
                                                         : c.at("tolerance_used").get<double>();
    auto finite_or_inf = [](const nlohmann::json& v) {
      return v.is_null() ? std::numeric_limits<double>::infinity() : v.get<double>();
    };
    for (const auto& o : c.at("outputs")) {
      cr.outputs.push_back({finite_or_inf(o.at("max_abs_error")), finite_or_inf(o.at("max_rel_error")),
                            finite_or_inf(o.at("tolerance_used"))});
      if (r.output_names.size() < cr.outputs.size()) r.output_names.push_back(o.at("name"));
    }
    cr.seconds = c.at("seconds");
    if (c.contains("kernels")) cr.kernels = c.at("kernels").get<std::vector<std::string>>();
    r.cases.push_back(cr);
  }
  r.passed = j.at("assertions").at("passed");
  r.failed = j.at("assertions").at("failed");
  for (const auto& f : j.at("failures")) {
    const std::string reason = f.at("reason");
    r.failures.push_back({f.at("case"), f.at("call"), f.at("assertion"),
                          parse_failure_reason_field(reason, "check report: failures.reason"), f.at("detail"),
                          f.value("elements", size_t{0})});
  }
  r.stopped_early = j.value("stopped_early", false);
  if (j.contains("request")) {
    r.nonce = j.at("request").at("nonce");
    r.held_out = j.at("request").at("held_out");
    const std::string stop_after = j.at("request").at("stop_after_reason");
    if (!stop_after.empty()) {
      r.stop_after_reason = parse_failure_reason_field(stop_after, "check report: request.stop_after_reason");
    }
  }
  r.stop_reason = j.value("stop_reason", std::string());
  r.not_run = j.value("not_run", std::vector<std::string>());
  return r;
}

std::optional<std::string> timing_refusal(const CheckReport& r) {
  if (r.pass()) return std::nullopt;
  std::vector<std::string> reasons = distinct_reasons(r.failures);
  if (reasons.empty()) reasons.push_back("no assertion passed");
  return fmt::format("{} failed its check: {} ({} assertions failed); no metric is reported for rejected code",
                     r.implementation, fmt::join(reasons, ", "), r.failed);
}

}  // namespace kwb
