// Where a campaign's jobs run (docs/campaigns.md): an Executor starts one job's `kwb validate`, says where it is,
// and stops it. The campaign's loop (campaign/runner.h) is the same for every executor: it submits, polls, applies
// the queue and run limits, and judges what a job left (its exit status and its bundle, campaign/evidence.h), so the
// local and the Slurm executor reach their decisions the same way. One implementation per file:
// executor_local.cpp (a child process on this machine, one at a time, under the timing lock as validate takes it)
// and executor_slurm.cpp (sbatch, one exclusive job per candidate, polled with scontrol).
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
};

// Runs a helper command (sbatch, scontrol, scancel): a seam, so that tests can play Slurm.
using CommandRunner = std::function<CommandResult(const std::vector<std::string>& argv)>;
CommandRunner real_command_runner();

std::unique_ptr<Executor> make_local_executor();
std::unique_ptr<Executor> make_slurm_executor(const SlurmOptions& options, CommandRunner run = real_command_runner());
std::unique_ptr<Executor> make_executor(const Campaign& c);

// ---- Slurm's text, exposed for unit tests -------------------------------------------------------------------------

// sbatch's command line for an attempt whose job script is `script`.
std::vector<std::string> sbatch_argv(const SlurmOptions& options, const JobLaunch& launch,
                                     const std::filesystem::path& script);
// The job script: exports KWB_LEDGER=none (the campaign records accepted bundles itself), runs validate under
// timeout(1) with the run limit, and writes validate's exit status to attempt_dir/exit_code.
std::string slurm_job_script(const JobLaunch& launch);
// `scontrol show job -o ID`'s Key=Value pairs (JobState, Reason, ExitCode, ...); empty when it has none.
std::map<std::string, std::string> parse_scontrol_line(const std::string& line);
// The job id in sbatch --parsable's output ("5", or "5;cluster"); nullopt when there is none.
std::optional<std::string> parse_sbatch_id(const std::string& output);
// What a Slurm JobState means for the loop.
JobProbe::Where slurm_where(const std::string& job_state);
// The text a POSIX shell reads back as `s`, one word.
std::string shell_quote(const std::string& s);

}  // namespace kwb
