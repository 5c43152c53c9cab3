// `kwb campaign run`: the one loop every executor goes through (docs/campaigns.md).
//
//   plan      every (task, candidate) of the campaign file is a job whose key is the digest of what its decision
//             depends on (job_key); a job already decided under the same key is skipped (resume);
//   adopt     jobs an earlier campaign process left queued or running: Slurm jobs are polled again, a local job died
//             with that process (its bundle, if it has a decision, is examined like any other);
//   submit    as many jobs at once as the executor has slots (1 locally, all of them on Slurm), as one wave (one
//             sbatch --array on Slurm);
//   poll      every active job, in one query of the executor (one squeue on Slurm, one sacct for the ended); one queued
//   past the queue limit, or running past the run limit (plus the executor's
//             grace), is cancelled and recorded as such;
//   judge     an ended job's bundle is examined (campaign/evidence.h): verified, authenticated, bound to the job; an
//             accepted bundle is recorded in the ledger (`record_accepted`, kwb validate's own recording), anything
//             else is recorded in the campaign's state with its reason.
// The state is saved after every change of a job (campaign/campaign_state.h).
#pragma once

#include "campaign/campaign_file.h"
#include "campaign/campaign_state.h"
#include "campaign/evidence.h"
#include "campaign/executor.h"
#include "util/fd.h"

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

struct RunnerHooks {
  // Records an accepted bundle in kwb's ledger, sealed with this machine's key (cli/ledger.h).
  std::function<void(const std::filesystem::path& bundle, const std::string& manifest_sha256)> record_accepted;
  std::function<void(const std::string& line)> say;  // progress, one line at a time
};

struct RunSummary {
  size_t planned = 0;
  size_t skipped = 0;                      // decided earlier under the same key
  size_t started = 0;                      // attempts submitted by this run
  std::map<std::string, size_t> outcomes;  // of the campaign's current jobs, by outcome (decided split by decision)
  // plan_only: what the executor would submit for the jobs still to decide (the sbatch line and the scripts), ""
  // for an executor that submits nothing a person would type (local).
  std::string submission;
};

// The digest a job's decision depends on: the task folder's files (not its .kwb/), the backend, the baseline's and
// the candidate's sources, and the validate options.
std::string job_key(const std::string& task_digest, BackendKind backend, const std::string& baseline_sha256,
                    const std::string& candidate_sha256, const std::string& settings);
// SHA-256 over every regular file of a task folder but .kwb/ (relative path and content digest, sorted).
std::string task_digest(const std::filesystem::path& task_dir);
// The jobs of the campaign file as they are now (not yet merged with any state).
std::vector<Job> plan_jobs(const Campaign& c);
// `kwb doctor` for a job's node (its first step on Slurm): the backend, the task folder, the candidate and baseline
// sources, the storage, and whether valgrind is needed.
std::vector<std::string> doctor_command_line(const Campaign& c, const Job& job, const std::filesystem::path& kwb);
// kwb validate's command line for one attempt: `kwb` is kwb's own executable.
std::vector<std::string> validate_command_line(const Campaign& c, const Job& job, const std::filesystem::path& kwb,
                                               const std::filesystem::path& bundle);

// How an ended job is recorded, from what the executor saw, what its bundle is, and why the campaign stopped it
// ("queue_limit", "run_limit", "cancel", or "").
struct Judgement {
  JobOutcome outcome = JobOutcome::failed;
  std::string detail;
};
Judgement judge(const JobProbe& probe, const Evidence& evidence, const std::string& stopping,
                const std::string& stderr_tail);

// The wall clock the loops' limits use, in seconds since the epoch.
double wall_seconds_now();
// Sleeps `seconds`, or less when a signal arrives; an interruption then throws Interrupted.
void nap_seconds(double seconds);

// Only one `kwb campaign run` per storage folder at a time: flock on storage/campaign.lock, which holds the
// holder's pid. Released when the process ends, however it ends.
class CampaignLock {
public:
  // Error(lock_timeout, exit 75) naming the holder when another process holds it.
  static CampaignLock acquire(const std::filesystem::path& storage);
  // The pid of the process holding it now, if any.
  static std::optional<int> holder(const std::filesystem::path& storage);

private:
  UniqueFd m_fd;
};

// plan_only: the jobs planned and saved in the state (each with its id and folder), nothing submitted.
enum class RunMode { run, plan_only };
RunSummary run_campaign(const Campaign& c, Executor& executor, const RunnerHooks& hooks, RunMode mode = RunMode::run);

// `kwb campaign cancel`: stops the running campaign process (SIGTERM, then it records its jobs), then cancels every
// job still queued or running (scancel for Slurm) and records it as cancelled. Returns the number cancelled.
size_t cancel_campaign(const std::filesystem::path& storage, Executor& slurm, const RunnerHooks& hooks);

}  // namespace kwb
