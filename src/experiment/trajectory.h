// One trajectory of an experiment (docs/experiments.md): one arm on one task with one seed, from the task's baseline
// as its own incumbent, in a ledger of its own. Each attempt
//   1. runs the arm's generator in its sandbox (experiment/generator_sandbox.h): no network; it sees the task's
//      public part, its own earlier candidates and their public results, its working folder and its arm's files,
//      and nothing else: not the other arm, not the other trajectories, not the evidence, not the task's controls;
//   2. takes the candidate it wrote (a generator that reached outside its view has its candidate discarded);
//   3. validates it against the trajectory's incumbent (kwb validate, a child process, with the experiment's
//      gates and budgets and a seed derived from the replicate's seed and the attempt, so both arms' n-th attempts
//      on a (task, seed) draw the same data);
//   4. keeps it on KEEP_CANDIDATE (kwb keep, into the trajectory's ledger).
// Then the trajectory's outcome: the final incumbent against the task's original baseline in one validate at the
// end (one interleaved comparison, not the product of the steps' estimates); with nothing kept the incumbent is the
// baseline itself and its speedup is 1 by construction.
// The record is storage/trajectories/<id>/trajectory.json (kwb.trajectory), rewritten after every attempt; a
// trajectory started again resumes after its last recorded attempt.
#pragma once

#include "experiment/plan.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

// 2: the model proxy's fields, mounts, repeats, prices and replay (issue 43); a kwb of version 1 refuses them.
inline constexpr int k_trajectory_schema_version = 2;

// What became of an attempt, one word (docs/experiments.md, "Rejections by reason").
enum class AttemptCategory {
  kept,          // KEEP_CANDIDATE, and kept
  slower,        // KEEP_BASELINE: below the bar, the A/B said it is not faster, or the incumbent's own code
  inconclusive,  // INCONCLUSIVE
  incorrect,     // KEEP_BASELINE: failed its checks with a wrong or missing result (numeric_mismatch, crashed, ...)
  cheat,         // KEEP_BASELINE: a cheat's signature (forbidden_symbol, ...; stale_output with no wrong answer)
  not_built,     // KEEP_BASELINE: did not compile or export the ABI
  controls,      // INVALID: the task's error controls were not rejected as they must be
  invalid,       // INVALID for another reason: the referee could not decide (a stage error, a broken noise floor)
  sandbox,       // the generator reached outside its sandbox: candidate discarded, nothing validated
  budget,        // the generator went past its model budget (experiment/model_proxy.h): candidate discarded
  no_candidate,  // the generator failed, timed out or wrote nothing
  error,         // kwb itself failed on the attempt (validate or keep exited with an error)
};
std::string_view to_string(AttemptCategory c);
std::optional<AttemptCategory> parse_attempt_category(std::string_view s);

// The failure reasons (util/failure_reason.h) of the anti-cheat assertions of docs/threat-model.md, in two kinds.
// A signature only a cheat leaves (sandbox_violation, forbidden_symbol, work moved out of the timer, a forged
// protocol message, an implausible time); and one that a cheat or an honest bug may give (stale_output: a previous
// call's answer, also a kernel reading the wrong buffer; input_modified: also an in-place scratch; an out-of-bounds
// write). is_wrong_answer: a wrong or missing value (numeric_mismatch, nan_mismatch, output_not_written).
bool is_cheat_signature(const std::string& reason);
bool may_be_a_cheat(const std::string& reason);
bool is_wrong_answer(const std::string& reason);

// The category of a validate's decision.json (and, for final_recheck_failed, its final check's reasons).
AttemptCategory categorize_decision(const nlohmann::json& decision, const std::vector<std::string>& final_reasons);

// The geometric mean over workloads of a comparison (kwb.compare's workloads[]): the log speedup ln(A/B) and its
// interval's bounds, from each workload's improvement_pct, ci_low_pct and ci_high_pct (the mean of the bounds' logs:
// with one workload, exactly its interval). nullopt when a workload has no estimate.
struct LogSpeedup {
  double estimate = 0.0;
  double low = 0.0;
  double high = 0.0;
};
std::optional<LogSpeedup> comparison_log_speedup(const nlohmann::json& compare);

// The derived seed of a validate: the same for both arms' n-th attempt on one (task, replicate).
std::int64_t attempt_seed(std::int64_t replicate_seed, int attempt);

// What an attempt (or a trajectory's final) takes from the bundle folder its validate wrote: one private copy
// (record/bundle_snapshot.h), which must verify and whose plan's command line, from the verb on, must be `argv`'s:
// the same rules, this --output-dir and this run's --job-nonce. Otherwise no decision and `error` says why (a bundle
// made under weaker rules, or by another run under the same rules, put in the folder's place).
struct AttemptBundle {
  std::optional<nlohmann::json> decision;
  std::optional<LogSpeedup> ab;
  std::vector<std::string> final_reasons;  // the final check's failure reasons (categorize_decision)
  double lock_wait_seconds = 0.0;  // its comparisons' waits for the timing lock (others' timing, not this validate's)
  std::string error;               // why there is no decision
};
AttemptBundle read_attempt_bundle(const std::filesystem::path& bundle, const std::vector<std::string>& argv);

// Runs (or resumes) trajectory `id` of the experiment frozen in `storage`; `kwb` is kwb's own executable. Returns the
// trajectory's record. Error (exit 65) for a storage folder whose plan does not verify or an unknown id.
nlohmann::json run_trajectory(const std::filesystem::path& storage, const std::string& id,
                              const std::filesystem::path& kwb);

}  // namespace kwb
