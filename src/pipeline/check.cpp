#include "pipeline/check.h"

#include <fmt/format.h>

#include <algorithm>

namespace kwb {

bool CheckReport::has_reason(const std::string& reason) const {
  for (const Failure& f : failures) {
    if (f.reason == reason) return true;
  }
  return false;
}

namespace {

// The case's first input shape, in signature order ("x[64, 4096]"), is what a reader recognises.
std::string dims_text(const Task& task, const Case& c) {
  const TensorSpec& first = task.signature.inputs.empty() ? task.signature.outputs.front() : task.signature.inputs.front();
  return fmt::format("{}[{}]", first.name, fmt::join(resolve_shape(first, c).dims, ", "));
}

}  // namespace

CheckReport build_failure_report(const Task& task, const Artifact& artifact) {
  CheckReport r;
  r.task = task.name;
  r.implementation = artifact.source.string();
  r.identity = artifact.identity;
  r.built = false;
  r.build_log = artifact.log;
  r.failed = 1;
  r.failures.push_back({"", -1, "builds", "build_failed", artifact.log});
  return r;
}

CheckReport run_check(const Task& task, const Artifact& artifact, const CheckOptions& options) {
  if (!artifact.ok) return build_failure_report(task, artifact);
  CheckReport report;
  report.task = task.name;
  report.implementation = artifact.source.string();
  report.identity = artifact.identity;
  report.built = true;

  SessionOptions so;
  so.backend = options.backend;
  so.timeout = options.timeout;
  so.poison_seed = mix_seed(options.nonce, 0xC4EC);
  WorkerSession session(task, artifact, so);
  bool load_failed = false;

  for (const Case& c : task.cases) {
    if (!options.only_cases.empty() &&
        std::find(options.only_cases.begin(), options.only_cases.end(), c.name) == options.only_cases.end()) {
      continue;
    }
    CaseReport cr;
    cr.name = c.name;
    cr.role = c.role;
    cr.dims = dims_text(task, c);
    const auto t0 = std::chrono::steady_clock::now();
    if (load_failed) {
      // Nothing can run; missing data is a failure, never a pass.
      ++cr.failed;
      report.failures.push_back({c.name, -1, "ran", "not_run", "the implementation could not be loaded"});
    } else {
      if (!session.alive()) {
        LoadOutcome lo = session.start();
        if (!lo.ok) {
          load_failed = true;
          ++cr.failed;
          report.failures.push_back({c.name, -1, "loads", lo.reason, lo.detail});
        }
      }
      for (int k = 0; !load_failed && k < options.calls_per_case; ++k) {
        InputSet set = make_input_set(task, c, static_cast<uint64_t>(k), options.nonce);
        CallResult res = session.call(set, k, CallMode::check);
        session.detach(set);
        ++cr.calls_run;
        cr.passed += res.passed;
        cr.failed += res.failures.size();
        cr.max_rel_error = std::max(cr.max_rel_error, res.max_rel_error);
        for (Failure& f : res.failures) report.failures.push_back(std::move(f));
        if (!res.completed) break;  // the worker is gone; the next case gets a fresh one
      }
    }
    cr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report.passed += cr.passed;
    report.failed += cr.failed;
    report.cases.push_back(cr);
  }
  session.shutdown();
  return report;
}

nlohmann::json to_json(const CheckReport& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const CaseReport& c : r.cases) {
    cases.push_back({{"name", c.name}, {"role", to_string(c.role)}, {"dims", c.dims}, {"calls", c.calls_run},
                     {"passed", c.passed}, {"failed", c.failed}, {"max_rel_error", c.max_rel_error},
                     {"seconds", c.seconds}});
  }
  nlohmann::json failures = nlohmann::json::array();
  for (const Failure& f : r.failures) {
    failures.push_back({{"case", f.case_name}, {"call", f.call}, {"assertion", f.assertion}, {"reason", f.reason},
                        {"detail", f.detail}});
  }
  return {{"schema", k_check_schema},
          {"schema_version", k_check_schema_version},
          {"task", r.task},
          {"implementation", {{"path", r.implementation}, {"identity", to_json(r.identity)}, {"built", r.built}}},
          {"cases", cases},
          {"assertions", {{"passed", r.passed}, {"failed", r.failed}}},
          {"failures", failures},
          {"verdict", r.pass() ? "PASS" : "FAIL"}};
}

}  // namespace kwb
