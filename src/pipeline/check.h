// `kwb check`: every case of a task, several calls each with fresh data, poison and canaries; every assertion
// counted. A worker that dies costs the case it died in, not the rest: a fresh worker takes the next case.
#pragma once

#include "build/builder.h"
#include "pipeline/worker_session.h"
#include "task/task.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace kwb {

inline constexpr const char* k_check_schema = "kwb.check";
inline constexpr int k_check_schema_version = 1;

struct CheckOptions {
  std::string backend = "cpu";
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  // per call
  uint64_t nonce = 0;        // 0: the published seeds; otherwise fresh data (final validation)
  int calls_per_case = 4;    // each with its own input set
  std::vector<std::string> only_cases;
};

struct CaseReport {
  std::string name;
  CaseRole role = CaseRole::correctness;
  std::string dims;
  int calls_run = 0;
  size_t passed = 0;
  size_t failed = 0;
  double max_rel_error = 0.0;
  double seconds = 0.0;
};

struct CheckReport {
  std::string task;
  std::string implementation;
  BuildIdentity identity;
  bool built = false;
  std::string build_log;
  std::vector<CaseReport> cases;
  size_t passed = 0;
  size_t failed = 0;
  std::vector<Failure> failures;
  bool pass() const { return built && failed == 0 && passed > 0; }
  bool has_reason(const std::string& reason) const;
};

CheckReport run_check(const Task& task, const Artifact& artifact, const CheckOptions& options);

// A report for an implementation that did not build: no case ran, one build_failed failure.
CheckReport build_failure_report(const Task& task, const Artifact& artifact);

nlohmann::json to_json(const CheckReport& r);

}  // namespace kwb
