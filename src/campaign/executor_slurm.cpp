// The Slurm executor: one batch job per candidate (sbatch --parsable --exclusive), so that both arms of a
// comparison run on one node, in one job, timed by that node's clock against itself, with nothing else of the
// campaign beside them. The payload is kwb validate under timeout(1) with the run limit: Slurm checks time limits
// only every 30 s (tests/slurm/NOTES.md), and --time (one minute more, Slurm counts minutes) is the backstop.
// The campaign polls `scontrol show job -o ID`; the job writes validate's exit status to a file of its attempt, so
// a job Slurm has forgotten (MinJobAge) still says how it ended.
#include "campaign/executor.h"

#include "util/error.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

namespace kwb {

namespace {

constexpr std::chrono::seconds k_command_timeout{60};

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// validate's exit status from the attempt's exit_code file, when the job got that far.
std::optional<int> recorded_exit(const std::filesystem::path& attempt_dir) {
  std::ifstream in(attempt_dir / "exit_code");
  int rc = -1;
  if (in >> rc) return rc;
  return std::nullopt;
}

class SlurmExecutor final : public Executor {
public:
  SlurmExecutor(SlurmOptions options, CommandRunner run) : m_options(std::move(options)), m_run(std::move(run)) {}

  ExecutorKind kind() const override { return ExecutorKind::slurm; }
  size_t slots() const override { return std::numeric_limits<size_t>::max(); }
  double poll_seconds() const override { return 5.0; }
  // Slurm's 30 s timer, timeout(1)'s 30 s grace before SIGKILL, and slack.
  double grace_seconds() const override { return 90.0; }
  bool jobs_outlive_campaign() const override { return true; }

  std::string submit(const JobLaunch& launch) override {
    const std::filesystem::path script = launch.attempt_dir / "job.sh";
    write_file_atomic(script, slurm_job_script(launch));
    std::filesystem::permissions(script, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
    const CommandResult r = m_run(sbatch_argv(m_options, launch, script));
    const std::optional<std::string> id = r.exit_code == 0 ? parse_sbatch_id(r.output) : std::nullopt;
    if (!id) {
      throw Error(ExitCode::unavailable, fmt::format("sbatch refused the job (exit {}): {}", r.exit_code,
                                                     first_line(r.errors.empty() ? r.output : r.errors)));
    }
    return *id;
  }

  JobProbe probe(const std::string& handle, const JobLaunch& launch) override {
    JobProbe p;
    const CommandResult r = m_run({"scontrol", "show", "job", "-o", handle});
    const std::map<std::string, std::string> kv =
        r.exit_code == 0 ? parse_scontrol_line(r.output) : std::map<std::string, std::string>{};
    if (const auto it = kv.find("JobState"); it != kv.end()) {
      p.scheduler_state = it->second;
      if (const auto reason = kv.find("Reason"); reason != kv.end()) p.scheduler_reason = reason->second;
      p.where = slurm_where(p.scheduler_state);
    } else {
      // Forgotten by slurmctld (MinJobAge), or never known: the job's own record decides.
      p.where = JobProbe::Where::ended;
      p.scheduler_state = "UNKNOWN";
      p.detail =
          fmt::format("Slurm no longer lists job {} ({})", handle, first_line(r.errors.empty() ? r.output : r.errors));
    }
    if (p.where == JobProbe::Where::ended) p.exit_code = recorded_exit(launch.attempt_dir);
    return p;
  }

  void cancel(const std::string& handle) override { (void)m_run({"scancel", handle}); }

private:
  SlurmOptions m_options;
  CommandRunner m_run;
};

}  // namespace

CommandRunner real_command_runner() {
  return [](const std::vector<std::string>& argv) {
    return run_command(argv, std::chrono::duration_cast<std::chrono::milliseconds>(k_command_timeout),
                       StderrMode::separate);
  };
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> sbatch_argv(const SlurmOptions& o, const JobLaunch& launch,
                                     const std::filesystem::path& script) {
  // Slurm counts whole minutes; one more than the run limit, so that timeout(1) acts first and validate records
  // where it stopped.
  const long minutes = static_cast<long>(std::ceil(launch.run_limit_s / 60.0)) + 1;
  std::vector<std::string> a = {"sbatch",
                                "--parsable",
                                "--exclusive",
                                "--job-name=" + launch.name,
                                fmt::format("--time={}", minutes),
                                "--output=" + (launch.attempt_dir / "slurm-%j.out").string()};
  if (!o.partition.empty()) a.push_back("--partition=" + o.partition);
  if (!o.account.empty()) a.push_back("--account=" + o.account);
  if (launch.backend == BackendKind::cuda && !o.gres.empty()) a.push_back("--gres=" + o.gres);
  a.insert(a.end(), o.sbatch_options.begin(), o.sbatch_options.end());
  a.push_back(script.string());
  return a;
}

std::string slurm_job_script(const JobLaunch& launch) {
  std::string command;
  for (const std::string& arg : launch.validate) command += (command.empty() ? "" : " ") + shell_quote(arg);
  return fmt::format(
      "#!/bin/sh\n"
      "# kwb campaign job {name}: kwb validate on this node, under timeout(1) with the run limit ({limit} s).\n"
      "# The campaign records the bundle in its ledger once it has verified and authenticated it.\n"
      "export KWB_LEDGER=none\n"
      "cd {dir} || exit 70\n"
      "timeout --signal=TERM --kill-after=30 {limit}s {cmd} > stdout.log 2> stderr.log\n"
      "rc=$?\n"
      "echo \"$rc\" > exit_code.tmp && mv exit_code.tmp exit_code\n"
      "exit \"$rc\"\n",
      fmt::arg("name", launch.name), fmt::arg("limit", launch.run_limit_s),
      fmt::arg("dir", shell_quote(launch.attempt_dir.string())), fmt::arg("cmd", command));
}

std::map<std::string, std::string> parse_scontrol_line(const std::string& line) {
  std::map<std::string, std::string> kv;
  std::istringstream words(first_line(line));
  std::string w;
  while (words >> w) {
    const size_t eq = w.find('=');
    if (eq != std::string::npos && eq > 0) kv[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return kv;
}

std::optional<std::string> parse_sbatch_id(const std::string& output) {
  const std::string id = first_line(output).substr(0, first_line(output).find(';'));
  if (id.empty() || id.find_first_not_of("0123456789_") != std::string::npos) return std::nullopt;
  return id;
}

JobProbe::Where slurm_where(const std::string& s) {
  if (s == "PENDING" || s == "CONFIGURING" || s == "REQUEUED" || s == "REQUEUE_HOLD" || s == "RESV_DEL_HOLD") {
    return JobProbe::Where::queued;
  }
  if (s == "RUNNING" || s == "COMPLETING" || s == "SUSPENDED" || s == "STAGE_OUT" || s == "SIGNALING" ||
      s == "RESIZING") {
    return JobProbe::Where::running;
  }
  return JobProbe::Where::ended;  // COMPLETED, FAILED, TIMEOUT, CANCELLED, NODE_FAIL, OUT_OF_MEMORY, ...
}

std::unique_ptr<Executor> make_slurm_executor(const SlurmOptions& options, CommandRunner run) {
  return std::make_unique<SlurmExecutor>(options, std::move(run));
}

std::unique_ptr<Executor> make_executor(const Campaign& c) {
  return c.executor == ExecutorKind::slurm ? make_slurm_executor(c.slurm) : make_local_executor();
}

}  // namespace kwb
