// `kwb check`: every case of a task, several calls each with fresh data, poison and canaries; every assertion
// counted. A worker that dies costs the case it died in, not the rest: a fresh worker takes the next case.
#pragma once

#include "build/builder.h"
#include "pipeline/worker_session.h"
#include "task/task.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

inline constexpr const char* k_check_schema = "kwb.check";
inline constexpr int k_check_schema_version = 1;

struct CheckOptions {
  std::string backend = "cpu";
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  // per call
  uint64_t nonce = 0;        // 0: the published seeds; otherwise fresh data (final validation)
  int calls_per_case = 4;    // each with its own input set; halved for cases over k_large_case_bytes
  std::vector<std::string> only_cases;
  // Controls only: stop after the first case in which this reason appears (the rejection is then established).
  std::string stop_after_reason;
};

// Cases whose inputs exceed this get half the calls: each call of such a case validates tens of millions of
// elements, and two fresh input sets already catch replay.
inline constexpr size_t k_large_case_bytes = size_t{64} << 20;

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
  bool stopped_early = false;  // stop_after_reason was met before every case ran
  bool pass() const { return built && failed == 0 && passed > 0; }
  bool has_reason(const std::string& reason) const;
};

CheckReport run_check(const Task& task, const Artifact& artifact, const CheckOptions& options);

// A report for an implementation that did not build: no case ran, one build_failed failure.
CheckReport build_failure_report(const Task& task, const Artifact& artifact);

nlohmann::json to_json(const CheckReport& r);
CheckReport check_report_from_json(const nlohmann::json& j);

// Why timing must be refused for an implementation with this check report; nullopt when it may be timed. The one
// gate between correctness and any metric: compare, validate and the controls stage all go through it.
std::optional<std::string> timing_refusal(const CheckReport& r);

}  // namespace kwb
