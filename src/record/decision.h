// The decision rule, as a pure function of what the stages found. validate calls it to decide; verify calls it on
// what it re-derives from the bundle, so a decision that does not follow from the evidence is caught.
#pragma once

#include "util/failure_reason.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace kwb {

struct ControlOutcome {
  std::string name;
  FailureReason expect = FailureReason::numeric_mismatch;  // the reason the control must provoke
  bool rejected = false;          // its check failed
  bool expected_reason_seen = false;
  bool timing_refused = false;    // a timing request for it yielded no metric
};

struct WorkloadVerdict {
  std::string workload;
  std::string verdict;  // PASS, FAIL, INCONCLUSIVE, INVALID
};

struct DecisionInputs {
  std::optional<bool> baseline_check_pass;
  std::optional<bool> baseline_copy_check_pass;  // A'
  std::optional<bool> candidate_check_pass;
  std::vector<ControlOutcome> controls;
  std::vector<WorkloadVerdict> aa;  // empty when the stage did not run
  std::vector<WorkloadVerdict> ab;
  std::optional<bool> final_check_pass;
  std::vector<std::string> identity_mismatches;
  std::vector<std::string> environment_mismatches;
  std::vector<std::string> stage_errors;  // a stage that could not run for reasons outside the implementations
};

struct Decision {
  std::string decision;  // KEEP_CANDIDATE, KEEP_BASELINE, INCONCLUSIVE, INVALID
  std::vector<std::string> reasons;
  int exit_code = 3;
};

Decision decide(const DecisionInputs& in);

nlohmann::json to_json(const DecisionInputs& in);
DecisionInputs decision_inputs_from_json(const nlohmann::json& j);

}  // namespace kwb
