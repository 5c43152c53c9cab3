// A campaign's own record of its jobs: storage/campaign.json (schema kwb.campaign, docs/campaigns.md).
//
// JSON, not SQLite: one process writes it (`kwb campaign run`, which holds storage/campaign.lock for as long as it
// runs; `cancel` writes only once that lock is free), it is small (a row per candidate), it is rewritten whole
// through a temporary file and a rename after every change of a job (a campaign killed with -9 leaves the state of
// its last transition, never half of one), and a person or a script reads it without a client. What must be
// queried across runs is in kwb's ledger, where every accepted bundle is recorded.
#pragma once

#include "ledger/ledger.h"
#include "util/backend_kind.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

// Where a job is: waiting to be submitted, submitted and not started (a Slurm job PENDING), running, or ended with
// an outcome.
enum class JobPhase { waiting, queued, running, ended };

// How a job ended. Only `decided` carries a decision; everything else is run again by the next `campaign run`.
enum class JobOutcome {
  none,         // not ended
  decided,      // an authentic bundle of this job, recorded in the ledger: its decision stands
  rejected,     // a bundle that fails verify, is not authentic, or is not this job's: recorded as rejected evidence
  timeout,      // past the run limit (timeout(1), the campaign, or Slurm's TIMEOUT)
  queue_limit,  // queued past the queue limit (Slurm PENDING), or waited that long for the timing lock (exit 75)
  died,         // killed (a signal, Slurm NODE_FAIL/OUT_OF_MEMORY/...), or the campaign ended while it ran
  cancelled,    // kwb campaign cancel, or the campaign interrupted
  failed,       // kwb validate exited without a decision (bad input 64/65, unavailable 69, ...), or sbatch refused it
  node_unfit,   // the node lacked what validate needs (kwb doctor, the job's first step): the node's fault, not the
                // candidate's; the detail names the node, the missing piece and the fix
};
std::string_view to_string(JobPhase p);
std::string_view to_string(JobOutcome o);
std::optional<JobPhase> parse_job_phase(std::string_view s);
std::optional<JobOutcome> parse_job_outcome(std::string_view s);

// One earlier attempt of a job, kept when the job runs again.
struct JobAttempt {
  int attempt = 0;
  JobOutcome outcome = JobOutcome::none;
  std::string detail;
  std::string bundle;
  std::string handle;
};

struct Job {
  // Identity: the digest of everything the decision depends on (job_key); a job with the same key that was
  // decided is not run again.
  std::string key;
  std::string id;  // a folder name: <task>-<candidate stem>-<key prefix>
  std::string task;
  std::string task_dir;
  BackendKind backend = BackendKind::cpu;
  std::string candidate;
  std::string candidate_sha256;
  std::string baseline;         // the source validate gets as --baseline ("" the task's; the incumbent's, resolved)
  std::string baseline_sha256;  // what the baseline held when the job was planned
  std::string settings;         // the validate flags, as one line (shown in status)
  bool current = true;          // part of the campaign file as last run; false: superseded (kept as history)

  int attempt = 0;  // 1 for the first run
  JobPhase phase = JobPhase::waiting;
  JobOutcome outcome = JobOutcome::none;
  std::string executor;  // local, slurm
  std::string handle;    // Slurm job id, or the local process id
  std::string bundle;    // the attempt's bundle folder
  // The attempt's nonce (64 hex digits, drawn when it was made): validate gets it as --job-nonce and records it in
  // plan.json's signed command line, so the job takes no bundle made outside this attempt, even one made by hand
  // under exactly the job's rules (a lucky run picked from many).
  std::string nonce;
  std::string submitted, started, ended;  // UTC
  double queued_s = 0.0, ran_s = 0.0;
  // Wall clock (Unix seconds) of submission and start: the limits are applied to them, across campaign processes.
  double submitted_unix = 0.0, started_unix = 0.0, stop_sent_unix = 0.0;
  std::string stopping;          // why the campaign asked the job to end: queue_limit, run_limit, cancel ("" none)
  std::optional<int> exit_code;  // kwb validate's
  std::string scheduler_state, scheduler_reason;  // Slurm's JobState and Reason, as last seen
  std::string decision;                           // decided: KEEP_CANDIDATE, KEEP_BASELINE, INCONCLUSIVE, INVALID
  std::string detail;                             // one sentence: why it ended this way
  std::string manifest_sha256;
  std::vector<LedgerWorkload> workloads;  // the A/B's figures, decided only
  // Where it ran: the scheduler's node (Slurm's NodeList, "" locally), and, from the accepted bundle's signed plan,
  // the host and the machine that timed it ("AMD EPYC 9654 96-Core Processor, 2 cores[, device]").
  std::string node, host, machine;
  std::string signer;  // the public key that signed the accepted bundle (64 hex digits)
  // While it runs: what it waits for, from validate's own last line ("the timing lock: held by ..."); "" when it
  // is working.
  std::string waiting;
  // Slurm's accounting of the ended job (sacct: State, ExitCode, Elapsed, MaxRSS, NodeList); empty when none.
  std::map<std::string, std::string> accounting;
  std::vector<JobAttempt> earlier;
};

struct CampaignState {
  static constexpr int k_schema_version = 1;
  std::string name;
  std::string campaign_file;
  std::string updated;
  std::vector<Job> jobs;

  Job* find(const std::string& key);
};

nlohmann::json to_json(const Job& j);
Job job_from_json(const nlohmann::json& j);

// Reads storage/campaign.json; an empty state when there is none. DataError naming the file when it does not parse
// or is another schema version.
CampaignState load_state(const std::filesystem::path& storage);
// Writes it atomically (util/fs.h).
void save_state(const std::filesystem::path& storage, CampaignState& state);
std::filesystem::path state_path(const std::filesystem::path& storage);

}  // namespace kwb
