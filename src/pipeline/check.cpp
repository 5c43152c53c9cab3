#include "pipeline/check.h"

#include <fmt/format.h>

#include <algorithm>

namespace kwb {

bool CheckReport::has_reason(const std::string& reason) const {
  if (reason.empty()) return false;
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

  // Smallest cases first: a broken implementation fails in milliseconds, not after the DRAM-sized case.
  std::vector<const Case*> order;
  for (const Case& c : task.cases) order.push_back(&c);
  auto input_bytes = [&](const Case* c) {
    size_t b = 0;
    for (const TensorSpec& s : task.signature.inputs) b += resolve_shape(s, *c).elements() * dtype_size(s.dtype);
    return b;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const Case* a, const Case* b) { return input_bytes(a) < input_bytes(b); });

  for (const Case* cp : order) {
    const Case& c = *cp;
    if (report.has_reason(options.stop_after_reason)) {
      report.stopped_early = true;
      break;
    }
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
      const int calls = input_bytes(&c) > k_large_case_bytes ? std::max(1, options.calls_per_case / 2)
                                                             : options.calls_per_case;
      for (int k = 0; !load_failed && k < calls; ++k) {
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
          {"stopped_early", r.stopped_early},
          {"verdict", r.pass() ? "PASS" : "FAIL"}};
}

CheckReport check_report_from_json(const nlohmann::json& j) {
  CheckReport r;
  r.task = j.at("task");
  r.implementation = j.at("implementation").at("path");
  r.built = j.at("implementation").at("built");
  const auto& id = j.at("implementation").at("identity");
  r.identity.source_sha256 = id.at("source_sha256");
  r.identity.artifact_sha256 = id.at("artifact_sha256");
  r.identity.command = id.at("command");
  r.identity.compiler = id.at("compiler");
  r.identity.compiler_version = id.at("compiler_version");
  r.identity.abi_header_sha256 = id.at("abi_header_sha256");
  r.identity.layout_variant = id.at("layout_variant");
  r.identity.key = id.at("key");
  for (const auto& c : j.at("cases")) {
    CaseReport cr;
    cr.name = c.at("name");
    cr.role = c.at("role") == "timing" ? CaseRole::timing : CaseRole::correctness;
    cr.dims = c.at("dims");
    cr.calls_run = c.at("calls");
    cr.passed = c.at("passed");
    cr.failed = c.at("failed");
    cr.max_rel_error = c.at("max_rel_error");
    cr.seconds = c.at("seconds");
    r.cases.push_back(cr);
  }
  r.passed = j.at("assertions").at("passed");
  r.failed = j.at("assertions").at("failed");
  for (const auto& f : j.at("failures")) {
    r.failures.push_back({f.at("case"), f.at("call"), f.at("assertion"), f.at("reason"), f.at("detail")});
  }
  r.stopped_early = j.value("stopped_early", false);
  return r;
}

std::optional<std::string> timing_refusal(const CheckReport& r) {
  if (r.pass()) return std::nullopt;
  std::vector<std::string> reasons;
  for (const Failure& f : r.failures) {
    if (std::find(reasons.begin(), reasons.end(), f.reason) == reasons.end()) reasons.push_back(f.reason);
  }
  if (reasons.empty()) reasons.push_back("no assertion passed");
  return fmt::format("{} failed its check: {} ({} assertions failed); no metric is reported for rejected code",
                     r.implementation, fmt::join(reasons, ", "), r.failed);
}

}  // namespace kwb
