// `kwb check`: every case of a task, several calls each with fresh data, poison and canaries; every assertion
// counted. The check stops at the first case in which the worker failed (it timed out, crashed, broke the sandbox or
// the protocol, exited, or the implementation did not load): the verdict is FAIL already, and a hang would cost the
// timeout once per case. The cases it skips are listed as not run. With `exhaustive`, a fresh worker takes each
// next case instead, so every case is tried.
// Within a case, every other call runs on a twin of the previous call's inputs, and every new input set is mapped
// behind the previous one's addresses, so caches keyed on addresses or on a sample of the data replay stale
// results. With held_out (final validation) it also runs held-out cases and rehearses one timing visit
// (docs/threat-model.md).
#pragma once

#include "builder/builder.h"
#include "pipeline/defaults.h"
#include "record/schema.h"
#include "session/worker_session.h"
#include "task/task.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

struct CheckOptions {
  BackendKind backend = BackendKind::cpu;
  std::chrono::milliseconds timeout{defaults::k_timeout};  // per call
  uint64_t nonce = 0;                            // 0: the published seeds; otherwise fresh data (final validation)
  int calls_per_case = defaults::k_check_calls;  // each with its own input set; halved over k_large_case_bytes
  std::vector<std::string> only_cases;
  // Controls only: stop after the first case in which this reason appears (the rejection is then established).
  std::optional<FailureReason> stop_after_reason;
  // Run every case even after the worker failed in one (see the top of this file); output mismatches never stop
  // a check.
  bool exhaustive = defaults::k_exhaustive;
  // Final validation: after the published cases, one held-out case per checked case (every dimension perturbed to
  // an odd value no published case uses, fresh data; named "<case>~held_out"), then a rehearsal of one timing
  // visit on the smallest timing case (a fresh worker, a pool of input sets, a secret number of calls between
  // k_rehearsal_min_calls and k_rehearsal_max_calls in timing mode, every output validated; "<case>~rehearsal"),
  // so code special-cased to the published shapes, or honest only while it believes it is being checked, fails.
  bool held_out = false;
  // With held_out: only the held-out cases, without the published ones or the rehearsal. validate runs the baseline
  // so before any timing, with the final check's nonce, so that a task whose shapes cannot move as held-out shapes
  // do (a head_dim that must stay even, undeclared in [dims]) fails in seconds, not after the timing.
  bool held_out_only = false;
};

inline constexpr int k_rehearsal_min_calls = 64;
inline constexpr int k_rehearsal_max_calls =
    128;  // above what a timing visit makes: 7 by default, <= 104 sized by a pilot
// Held-out cases are kept below this many bytes of inputs and outputs (the largest dimension is halved until
// they are): what they test is shapes, not memory bandwidth.
inline constexpr size_t k_held_out_max_bytes = size_t{16} << 20;

// The held-out counterparts of `cases` (see CheckOptions::held_out), derived from `seed`: each dimension becomes an
// odd value within about 1/8 of the original that no case of the task uses for that dimension; where the task's
// [dims] constrain it, an odd multiple of its multiple_of, at least its min, or the value of the dim it equals.
std::vector<Case> held_out_cases(const Task& task, const std::vector<const Case*>& cases, uint64_t seed);

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
  double tolerance_used = 0.0;        // the largest share of the tolerance an element used (1: at the limit)
  std::vector<OutputErrors> outputs;  // each output's worst element over the case's calls, by signature index
  double seconds = 0.0;
  // Device backends: what the case's first call launched, in order, as the worker's trace saw it.
  std::vector<std::string> kernels;
};

struct CheckReport {
  std::string task;
  BackendKind backend = BackendKind::cpu;
  std::string device;  // the backend's description of its device; empty for cpu
  std::string implementation;
  BuildIdentity identity;
  bool built = false;
  std::string build_log;
  std::vector<CaseReport> cases;
  std::vector<std::string> output_names;  // the task's outputs, in signature order (CaseReport::outputs' names)
  size_t passed = 0;
  size_t failed = 0;
  std::vector<Failure> failures;
  // A stop rule ended the check before every case ran: the worker failed (unless exhaustive), or stop_after_reason
  // was met. The cases not run are neither passed nor failed; they count in no total.
  bool stopped_early = false;
  std::string stop_reason;           // why, for people; empty when every case ran
  std::vector<std::string> not_run;  // the cases skipped, in the order they would have run
  // What the check was asked to do, recorded so that verify can bind a report to its role in a bundle: a report of
  // the published data (nonce 0) cannot stand in for the final re-check (fresh nonce, held-out shapes).
  uint64_t nonce = 0;
  bool held_out = false;
  std::optional<FailureReason> stop_after_reason;
  bool pass() const { return built && failed == 0 && passed > 0; }
  bool has_reason(FailureReason reason) const;
};

CheckReport run_check(const Task& task, const Artifact& artifact, const CheckOptions& options);

// The key under which compare keeps a check's report (pipeline/compare_run.cpp): everything the report depends on.
// kwb's and kwb-worker's digests, the task manifest, the artifact and its source, every CheckOptions field, and the
// environment every worker gets (worker_environment_identity(): POCL_*, CUDA_*, OCL_ICD*, the device selection,
// the worker's user), so that a report made under one runtime setting never stands for another.
std::string check_cache_key(const Task& task, const Artifact& artifact, const CheckOptions& options);

// A report for an implementation that did not build: no case ran, one build_failed failure.
CheckReport build_failure_report(const Task& task, const Artifact& artifact);

nlohmann::json to_json(const CheckReport& r);
CheckReport check_report_from_json(const nlohmann::json& j);

// Why timing must be refused for an implementation with this check report; nullopt when it may be timed. The one
// gate between correctness and any metric: compare, validate and the controls stage all go through it.
std::optional<std::string> timing_refusal(const CheckReport& r);

}  // namespace kwb
