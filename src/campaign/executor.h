// Where a campaign's jobs run (docs/campaigns.md): an Executor starts one job's `kwb validate`, says where it is,
// and stops it. The campaign's loop (campaign/runner.h) is the same for every executor: it submits, polls, applies
// the queue and run limits, and judges what a job left (its exit status and its bundle, campaign/evidence.h), so the
// local and the Slurm executor reach their decisions the same way. One implementation per file:
// executor_local.cpp (a child process on this machine, one at a time, under the timing lock as validate takes it)
// and executor_slurm.cpp (one `sbatch --array` per wave of jobs, one exclusive array task per candidate, polled with
// one `squeue` per cycle for every job in flight, and `sacct` once for the jobs that ended).
#pragma once

#include "campaign/campaign_file.h"
#include "util/subprocess.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

// One attempt of one job, as an executor starts it.
struct JobLaunch {
  std::string name;                   // for the scheduler (kwb-<campaign>-<job id>)
  std::vector<std::string> validate;  // the whole kwb validate command line, kwb's absolute path first
  std::filesystem::path attempt_dir;  // logs, the job script, the exit status file; the bundle is below it
  double run_limit_s = 0.0;
  BackendKind backend = BackendKind::cpu;
  // `kwb doctor ... --json` for the node to run first (a Slurm job; empty: none): a node that lacks a piece leaves
  // its findings in attempt_dir/doctor.json and the job ends before validate, the node's fault.
  std::vector<std::string> doctor;
  // The container the node runs kwb in (container_prefix), put before the doctor and validate commands; empty: none.
  std::vector<std::string> container;
};

// What an executor sees of a job now.
struct JobProbe {
  enum class Where { queued, running, ended };
  Where where = Where::queued;
  // ended: kwb validate's exit status, when it left one (a Slurm job writes it to attempt_dir/exit_code), and the
  // signal that ended it (0: none).
  std::optional<int> exit_code;
  int signal = 0;
  std::string scheduler_state;   // Slurm's JobState (PENDING, RUNNING, COMPLETED, TIMEOUT, ...); "" locally
  std::string scheduler_reason;  // Slurm's Reason (Resources, TimeLimit, NonZeroExitCode, ...)
  std::string detail;            // one sentence, when the executor knows more (a job Slurm forgot)
  std::string node;              // where it runs or ran (Slurm's NodeList); "" when the executor does not say
  // The executor could not see the job this time (squeue failed: slurmctld unreachable): nothing is known, nothing
  // changed; `where` is queued and means nothing. The next poll asks again.
  bool stale = false;
  // An ended Slurm job's accounting, as `sacct` gives it: State, ExitCode, Elapsed, MaxRSS, NodeList (empty when
  // sacct has no record of it, or the cluster keeps no accounting).
  std::map<std::string, std::string> accounting;
};

// A handle and what was launched under it, for the batched calls.
struct ActiveJob {
  std::string handle;
  JobLaunch launch;
};

class Executor {
public:
  virtual ~Executor() = default;
  virtual ExecutorKind kind() const = 0;
  // How many jobs may run at once: 1 locally (two timings on one machine ruin each other); every job on Slurm,
  // which gives each an exclusive node.
  virtual size_t slots() const = 0;
  // Between polls, unless the campaign file sets executor.poll_seconds.
  virtual double poll_seconds() const = 0;
  // Past the run limit, how long the loop waits for the executor's own limit to act (Slurm checks time limits
  // every 30 s, and timeout(1) gives validate time to record its interrupted stage) before it cancels the job.
  virtual double grace_seconds() const = 0;
  // Whether a job goes on without the campaign process: a Slurm job does, and a resumed campaign polls it again; a
  // local job dies with the campaign (PR_SET_PDEATHSIG).
  virtual bool jobs_outlive_campaign() const = 0;
  // Starts the attempt; returns its handle (a Slurm job id, a process id). Error naming what refused it.
  virtual std::string submit(const JobLaunch& launch) = 0;
  virtual JobProbe probe(const std::string& handle, const JobLaunch& launch) = 0;
  // Asks the job to end (SIGTERM, scancel); the next probes see it end.
  virtual void cancel(const std::string& handle) = 0;

  // The batched forms the campaign's loop uses, so that a wave of 500 jobs is not 500 submissions and a poll of
  // 1000 jobs in flight is not 1000 queries of the scheduler. The defaults call the single forms one by one; the
  // Slurm executor overrides them (one sbatch --array per wave, one squeue per poll, one sacct for the ended).
  //
  // Starts every launch; returns one handle per launch, in order. Throws Error naming what refused them (then none
  // was started).
  virtual std::vector<std::string> submit_all(const std::vector<JobLaunch>& launches);
  // What each job is now, in the order given.
  virtual std::vector<JobProbe> probe_all(const std::vector<ActiveJob>& jobs);
  virtual void cancel_all(const std::vector<std::string>& handles);
  // What submit_all would run, for `kwb campaign run --dry-run`: the command lines and the scripts they submit,
  // as text a person reads (nothing is written or run). "" when the executor submits nothing a person would type.
  virtual std::string describe_submission(const std::vector<JobLaunch>& launches) const;
};

// Runs a helper command (sbatch, scontrol, scancel): a seam, so that tests can play Slurm.
using CommandRunner = std::function<CommandResult(const std::vector<std::string>& argv)>;
CommandRunner real_command_runner();

std::unique_ptr<Executor> make_local_executor();
// `waves_dir`: where the array scripts of the waves go (a campaign's storage/slurm); "" keeps them in the first
// attempt's folder.
std::unique_ptr<Executor> make_slurm_executor(const SlurmOptions& options, CommandRunner run = real_command_runner(),
                                              std::filesystem::path waves_dir = {});
std::unique_ptr<Executor> make_executor(const Campaign& c);

// ---- Slurm's text, exposed for unit tests -------------------------------------------------------------------------

// The most array tasks one sbatch --array gets (Slurm's default MaxArraySize is 1001: indices 0 to 1000); a larger
// wave is several arrays.
inline constexpr size_t k_max_array_tasks = 1000;

// sbatch's command line for an attempt whose job script is `script`.
std::vector<std::string> sbatch_argv(const SlurmOptions& options, const JobLaunch& launch,
                                     const std::filesystem::path& script);
// sbatch's command line for a wave: one array of launches.size() tasks (`--array=0-N%K`, K = options.array_limit
// when set), the time limit of the longest, every task's output in `log_dir` (%A_%a.out).
std::vector<std::string> sbatch_array_argv(const SlurmOptions& options, const std::vector<JobLaunch>& launches,
                                           const std::filesystem::path& script, const std::filesystem::path& log_dir);
// The job script: exports KWB_LEDGER=none (the campaign records accepted bundles itself), runs validate under
// timeout(1) with the run limit, and writes validate's exit status to attempt_dir/exit_code.
std::string slurm_job_script(const JobLaunch& launch);
// The command that runs a kwb command line inside the campaign's container, with `binds` (and the options' mounts)
// at the same paths: `apptainer exec --bind A,B IMAGE` or `srun --ntasks=1 --container-image=IMAGE
// --container-mounts=A:A,B:B --container-workdir=W`; empty without a container.
std::vector<std::string> container_prefix(const SlurmOptions& options, const std::vector<std::filesystem::path>& binds,
                                          const std::filesystem::path& workdir);
// The array script of a wave: task i runs the i-th launch's job script (attempt_dir/job.sh).
std::string slurm_array_script(const std::vector<JobLaunch>& launches);
// The job id in sbatch --parsable's output ("5", or "5;cluster"); nullopt when there is none.
std::optional<std::string> parse_sbatch_id(const std::string& output);
// One job of `squeue --noheader --array --format=%i|%T|%r|%N`: its state, reason and node list, by job id ("7",
// or "7_3" for an array task).
struct SqueueRow {
  std::string state, reason, nodes;
};
std::map<std::string, SqueueRow> parse_squeue(const std::string& output);
// `sacct --noheader --parsable2 --format=JobID,State,ExitCode,Elapsed,MaxRSS,NodeList`, by job id: the job's own
// line gives State, ExitCode, Elapsed and NodeList, its steps (ID.batch, ID.0, ...) the largest MaxRSS. State is
// Slurm's first word ("CANCELLED by 0" is CANCELLED).
std::map<std::string, std::map<std::string, std::string>> parse_sacct(const std::string& output);
// What a Slurm JobState means for the loop.
JobProbe::Where slurm_where(const std::string& job_state);
// The text a POSIX shell reads back as `s`, one word.
std::string shell_quote(const std::string& s);

}  // namespace kwb
