// The Slurm executor. A campaign's wave of jobs is one `sbatch --array` (a site caps submissions, MaxSubmitJobs, and
// expects arrays): array task i runs the i-th job's script, one candidate per task, with the whole node by default
// (--exclusive), so that both arms of a comparison run on one node, in one job, timed by that node's clock against
// itself, with nothing else of the campaign beside them. The payload is kwb validate under timeout(1) with the run
// limit: Slurm checks time limits only every 30 s (tests/slurm/NOTES.md), and --time (one minute more, Slurm counts
// minutes) is the backstop.
// The campaign polls every job in flight with one `squeue` per cycle (never a query per job: with 1000 jobs in
// flight that would be hundreds of RPCs a second to slurmctld), and asks `sacct` once for the jobs that ended, for
// their final State, ExitCode, Elapsed, MaxRSS and NodeList. The job writes validate's exit status to a file of its
// attempt, so a job Slurm has forgotten (MinJobAge) and sacct does not know (a cluster without accounting) still says
// how it ended.
#include "campaign/executor.h"

#include "util/error.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

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

// Comma-separated, for --jobs.
std::string joined(const std::vector<std::string>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

// The job id a handle belongs to in squeue's and sacct's --jobs: an array task's array ("7_3" -> "7").
std::string array_of(const std::string& handle) { return handle.substr(0, handle.find('_')); }

class SlurmExecutor final : public Executor {
public:
  SlurmExecutor(SlurmOptions options, CommandRunner run, std::filesystem::path waves_dir)
      : m_options(std::move(options)), m_run(std::move(run)), m_waves_dir(std::move(waves_dir)) {}

  ExecutorKind kind() const override { return ExecutorKind::slurm; }
  size_t slots() const override { return std::numeric_limits<size_t>::max(); }
  double poll_seconds() const override { return 5.0; }
  // Slurm's 30 s timer, timeout(1)'s 30 s grace before SIGKILL, and slack.
  double grace_seconds() const override { return 90.0; }
  bool jobs_outlive_campaign() const override { return true; }

  // One job on its own (the experiment's trajectories): one sbatch.
  std::string submit(const JobLaunch& launch) override {
    const std::filesystem::path script = write_job_script(launch);
    return sbatch(sbatch_argv(m_options, launch, script));
  }

  // A wave: one array per k_max_array_tasks jobs. Array task i is handle "<array id>_<i>".
  std::vector<std::string> submit_all(const std::vector<JobLaunch>& launches) override {
    std::vector<std::string> handles;
    for (size_t from = 0; from < launches.size(); from += k_max_array_tasks) {
      const std::vector<JobLaunch> wave(
          launches.begin() + static_cast<std::ptrdiff_t>(from),
          launches.begin() + static_cast<std::ptrdiff_t>(std::min(launches.size(), from + k_max_array_tasks)));
      for (const JobLaunch& l : wave) (void)write_job_script(l);
      const std::filesystem::path dir = waves_dir(wave);
      std::filesystem::create_directories(dir);
      const std::filesystem::path script = dir / fmt::format("wave-{}-{}.sh", ::getpid(), ++m_waves);
      write_file_atomic(script, slurm_array_script(wave));
      std::filesystem::permissions(script, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
      const std::string array = sbatch(sbatch_array_argv(m_options, wave, script, dir));
      for (size_t i = 0; i < wave.size(); ++i) handles.push_back(fmt::format("{}_{}", array, i));
    }
    return handles;
  }

  JobProbe probe(const std::string& handle, const JobLaunch& launch) override {
    return probe_all({ActiveJob{handle, launch}}).front();
  }

  // One squeue for every job in flight; one sacct for those that ended.
  std::vector<JobProbe> probe_all(const std::vector<ActiveJob>& jobs) override {
    std::vector<JobProbe> out(jobs.size());
    if (jobs.empty()) return out;
    std::set<std::string> arrays;
    for (const ActiveJob& j : jobs) arrays.insert(array_of(j.handle));
    const std::vector<std::string> ids(arrays.begin(), arrays.end());
    const CommandResult q =
        m_run({"squeue", "--noheader", "--array", "--states=all", "--jobs=" + joined(ids), "--format=%i|%T|%r|%N"});
    // squeue asked for one id that Slurm no longer knows says "Invalid job id specified" and exits 1: that job (or
    // array) is forgotten. Asked for several, it filters what it knows and exits 0. Any other failure (slurmctld
    // unreachable) says nothing about the jobs.
    const bool listed =
        q.exit_code == 0 || (ids.size() == 1 && (q.errors + q.output).find("Invalid job id") != std::string::npos);
    const std::map<std::string, SqueueRow> rows =
        q.exit_code == 0 ? parse_squeue(q.output) : std::map<std::string, SqueueRow>{};
    std::vector<size_t> ended;
    for (size_t i = 0; i < jobs.size(); ++i) {
      JobProbe& p = out[i];
      if (const auto it = rows.find(jobs[i].handle); it != rows.end()) {
        p.scheduler_state = it->second.state;
        p.scheduler_reason = it->second.reason;
        p.node = it->second.nodes;
        p.where = slurm_where(p.scheduler_state);
      } else {
        // Forgotten by slurmctld (MinJobAge), or never known: sacct and the job's own record decide.
        p.where = JobProbe::Where::ended;
        p.scheduler_state = "UNKNOWN";
        p.detail = listed ? fmt::format("Slurm no longer lists job {}", jobs[i].handle)
                          : fmt::format("squeue failed (exit {}): {}", q.exit_code,
                                        first_line(q.errors.empty() ? q.output : q.errors));
      }
      if (p.where == JobProbe::Where::ended) ended.push_back(i);
    }
    if (!listed) {
      // squeue itself failed (slurmctld unreachable): nothing is known, so nothing is ended; the next cycle asks again.
      for (size_t i : ended) {
        out[i].where = JobProbe::Where::queued;
        out[i].scheduler_state.clear();
        out[i].stale = true;
      }
      return out;
    }
    account(jobs, ended, out);
    return out;
  }

  void cancel(const std::string& handle) override { (void)m_run({"scancel", handle}); }

  void cancel_all(const std::vector<std::string>& handles) override {
    if (handles.empty()) return;
    std::vector<std::string> argv = {"scancel"};
    argv.insert(argv.end(), handles.begin(), handles.end());
    (void)m_run(argv);
  }

  std::string describe_submission(const std::vector<JobLaunch>& launches) const override {
    if (launches.empty()) return "";
    const std::vector<JobLaunch> wave(
        launches.begin(), launches.begin() + static_cast<std::ptrdiff_t>(std::min(launches.size(), k_max_array_tasks)));
    const std::filesystem::path dir = waves_dir(wave);
    const std::filesystem::path script = dir / "wave-<pid>-<n>.sh";
    std::string out = fmt::format("would run ({} array(s) of at most {} tasks):\n  {}\n\n{}:\n{}\n",
                                  (launches.size() + k_max_array_tasks - 1) / k_max_array_tasks, k_max_array_tasks,
                                  command_text(sbatch_array_argv(m_options, wave, script, dir)), script.string(),
                                  slurm_array_script(wave));
    out += fmt::format("{}:\n{}", (wave.front().attempt_dir / "job.sh").string(), slurm_job_script(wave.front()));
    return out;
  }

private:
  std::filesystem::path write_job_script(const JobLaunch& launch) const {
    std::filesystem::path script = launch.attempt_dir / "job.sh";
    write_file_atomic(script, slurm_job_script(launch));
    std::filesystem::permissions(script, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
    return script;
  }

  std::filesystem::path waves_dir(const std::vector<JobLaunch>& wave) const {
    return m_waves_dir.empty() ? wave.front().attempt_dir : m_waves_dir;
  }

  std::string sbatch(const std::vector<std::string>& argv) {
    const CommandResult r = m_run(argv);
    const std::optional<std::string> id = r.exit_code == 0 ? parse_sbatch_id(r.output) : std::nullopt;
    if (!id) {
      throw Error(ExitCode::unavailable, fmt::format("sbatch refused the job (exit {}): {}", r.exit_code,
                                                     first_line(r.errors.empty() ? r.output : r.errors)));
    }
    return *id;
  }

  // sacct once for the jobs that ended: their final State (a forgotten job's too), exit and node; then each one's
  // exit status from its attempt's file.
  void account(const std::vector<ActiveJob>& jobs, const std::vector<size_t>& ended, std::vector<JobProbe>& out) {
    if (ended.empty()) return;
    std::set<std::string> arrays;
    for (size_t i : ended) arrays.insert(array_of(jobs[i].handle));
    const CommandResult a =
        m_run({"sacct", "--noheader", "--parsable2", "--jobs=" + joined({arrays.begin(), arrays.end()}),
               "--format=JobID,State,ExitCode,Elapsed,MaxRSS,NodeList"});
    const auto records =
        a.exit_code == 0 ? parse_sacct(a.output) : std::map<std::string, std::map<std::string, std::string>>{};
    for (size_t i : ended) {
      JobProbe& p = out[i];
      if (const auto it = records.find(jobs[i].handle); it != records.end()) {
        p.accounting = it->second;
        const std::string& state = it->second.at("State");
        if (p.scheduler_state == "UNKNOWN" && !state.empty() && slurm_where(state) == JobProbe::Where::ended) {
          p.scheduler_state = state;
          p.detail += " (its state is sacct's)";
        }
        if (p.node.empty() || p.node == "(null)") p.node = it->second.at("NodeList");
      } else if (a.exit_code != 0 && p.scheduler_state == "UNKNOWN") {
        p.detail += fmt::format("; sacct has no record ({})", first_line(a.errors.empty() ? a.output : a.errors));
      }
      if (p.node == "(null)" || p.node == "None assigned") p.node.clear();
      p.exit_code = recorded_exit(jobs[i].launch.attempt_dir);
    }
  }

  static std::string command_text(const std::vector<std::string>& argv) {
    std::string out;
    for (const std::string& a : argv) out += (out.empty() ? "" : " ") + shell_quote(a);
    return out;
  }

  SlurmOptions m_options;
  CommandRunner m_run;
  std::filesystem::path m_waves_dir;
  int m_waves = 0;
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

namespace {

// What every job of the campaign is given, whether alone or in an array: where it may run and how much of the node.
void placement(const SlurmOptions& o, BackendKind backend, std::vector<std::string>& a) {
  if (o.exclusive) a.push_back("--exclusive");
  if (!o.partition.empty()) a.push_back("--partition=" + o.partition);
  if (!o.account.empty()) a.push_back("--account=" + o.account);
  if (!o.constraint.empty()) a.push_back("--constraint=" + o.constraint);
  if (!o.nodelist.empty()) a.push_back("--nodelist=" + o.nodelist);
  if (!o.exclude.empty()) a.push_back("--exclude=" + o.exclude);
  if (backend == BackendKind::cuda) a.push_back("--gres=" + (o.gres.empty() ? std::string("gpu:1") : o.gres));
  if (backend == BackendKind::opencl && !o.gres.empty()) a.push_back("--gres=" + o.gres);
  a.insert(a.end(), o.sbatch_options.begin(), o.sbatch_options.end());
}

// Slurm counts whole minutes; one more than the run limit, so that timeout(1) acts first and validate records where
// it stopped.
std::string time_flag(double run_limit_s) {
  return fmt::format("--time={}", static_cast<long>(std::ceil(run_limit_s / 60.0)) + 1);
}

}  // namespace

std::vector<std::string> sbatch_argv(const SlurmOptions& o, const JobLaunch& launch,
                                     const std::filesystem::path& script) {
  std::vector<std::string> a = {"sbatch", "--parsable", "--job-name=" + launch.name, time_flag(launch.run_limit_s),
                                "--output=" + (launch.attempt_dir / "slurm-%j.out").string()};
  placement(o, launch.backend, a);
  a.push_back(script.string());
  return a;
}

std::vector<std::string> sbatch_array_argv(const SlurmOptions& o, const std::vector<JobLaunch>& launches,
                                           const std::filesystem::path& script, const std::filesystem::path& log_dir) {
  double limit = 0.0;
  for (const JobLaunch& l : launches) limit = std::max(limit, l.run_limit_s);
  // The campaign's name: every launch is kwb-<campaign>-<job>; the array is kwb-<campaign>.
  std::string name = launches.empty() ? "kwb" : launches.front().name;
  if (launches.size() > 1) {
    for (const JobLaunch& l : launches) {
      size_t common = 0;
      while (common < name.size() && common < l.name.size() && name[common] == l.name[common]) ++common;
      name.resize(common);
    }
    while (!name.empty() && name.back() == '-') name.pop_back();
  }
  std::vector<std::string> a = {"sbatch",
                                "--parsable",
                                fmt::format("--array=0-{}{}", launches.empty() ? 0 : launches.size() - 1,
                                            o.array_limit > 0 ? fmt::format("%{}", o.array_limit) : ""),
                                "--job-name=" + (name.empty() ? std::string("kwb") : name),
                                time_flag(limit),
                                "--output=" + (log_dir / "slurm-%A_%a.out").string()};
  placement(o, launches.empty() ? BackendKind::cpu : launches.front().backend, a);
  a.push_back(script.string());
  return a;
}

std::vector<std::string> container_prefix(const SlurmOptions& o, const std::vector<std::filesystem::path>& binds,
                                          const std::filesystem::path& workdir) {
  if (o.apptainer_image.empty() && o.pyxis_image.empty()) return {};
  std::vector<std::string> all;
  all.reserve(binds.size());
  for (const std::filesystem::path& b : binds) all.push_back(b.lexically_normal().string());
  all.insert(all.end(), o.container_mounts.begin(), o.container_mounts.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  if (!o.apptainer_image.empty()) {
    return {"apptainer", "exec", "--bind", fmt::format("{}", fmt::join(all, ",")), o.apptainer_image};
  }
  std::vector<std::string> mounts;
  mounts.reserve(all.size());
  for (const std::string& m : all) mounts.push_back(m + ":" + m);
  return {"srun", "--ntasks=1", "--container-image=" + o.pyxis_image,
          fmt::format("--container-mounts={}", fmt::join(mounts, ",")), "--container-workdir=" + workdir.string()};
}

std::string slurm_array_script(const std::vector<JobLaunch>& launches) {
  std::string cases;
  for (size_t i = 0; i < launches.size(); ++i) {
    cases += fmt::format("  {}) exec /bin/sh {} ;;  # {}\n", i,
                         shell_quote((launches[i].attempt_dir / "job.sh").string()), launches[i].name);
  }
  return fmt::format(
      "#!/bin/sh\n"
      "# kwb campaign wave: one array task per job; task i runs the i-th job's script (its attempt's job.sh).\n"
      "case \"$SLURM_ARRAY_TASK_ID\" in\n"
      "{}"
      "  *) echo \"kwb: no job for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 70 ;;\n"
      "esac\n",
      cases);
}

std::string slurm_job_script(const JobLaunch& launch) {
  // Each kwb command line, inside the campaign's container when it has one.
  const auto words = [&](const std::vector<std::string>& argv) {
    std::string out;
    for (const std::string& arg : launch.container) out += (out.empty() ? "" : " ") + shell_quote(arg);
    for (const std::string& arg : argv) out += (out.empty() ? "" : " ") + shell_quote(arg);
    return out;
  };
  // The node first: a node without bubblewrap, a compiler or the task's folder is reported as such (doctor.json),
  // with exit 69, before validate could blame the candidate for it.
  const std::string doctor = launch.doctor.empty() ? ""
                                                   : fmt::format(
                                                         "if ! {} > doctor.json 2> doctor.log; then\n"
                                                         "  echo 69 > exit_code.tmp && mv exit_code.tmp exit_code\n"
                                                         "  exit 69\n"
                                                         "fi\n",
                                                         words(launch.doctor));
  return fmt::format(
      "#!/bin/sh\n"
      "# kwb campaign job {name}: kwb validate on this node, under timeout(1) with the run limit ({limit} s).\n"
      "# The campaign records the bundle in its ledger once it has verified and authenticated it.\n"
      "export KWB_LEDGER=none\n"
      "cd {dir} || exit 70\n"
      "{doctor}"
      "timeout --signal=TERM --kill-after=30 {limit}s {cmd} > stdout.log 2> stderr.log\n"
      "rc=$?\n"
      "echo \"$rc\" > exit_code.tmp && mv exit_code.tmp exit_code\n"
      "exit \"$rc\"\n",
      fmt::arg("name", launch.name), fmt::arg("limit", launch.run_limit_s),
      fmt::arg("dir", shell_quote(launch.attempt_dir.string())), fmt::arg("doctor", doctor),
      fmt::arg("cmd", words(launch.validate)));
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

std::map<std::string, SqueueRow> parse_squeue(const std::string& output) {
  std::map<std::string, SqueueRow> rows;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, '|');) f.push_back(x);
    if (f.size() < 2 || f[0].empty()) continue;
    f.resize(4);
    rows[f[0]] = SqueueRow{f[1], f[2], f[3]};
  }
  return rows;
}

std::map<std::string, std::map<std::string, std::string>> parse_sacct(const std::string& output) {
  std::map<std::string, std::map<std::string, std::string>> jobs;
  std::map<std::string, long long> rss;  // the largest MaxRSS of a job's steps, in KiB
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, '|');) f.push_back(x);
    if (f.size() < 6 || f[0].empty()) continue;
    const size_t dot = f[0].find('.');
    const std::string id = f[0].substr(0, dot);
    std::map<std::string, std::string>& j = jobs[id];
    if (dot == std::string::npos) {
      j["State"] = f[1].substr(0, f[1].find(' '));
      j["ExitCode"] = f[2];
      j["Elapsed"] = f[3];
      j["NodeList"] = f[5];
      j.try_emplace("MaxRSS", "");
    } else if (!f[4].empty()) {
      // "1234K", "12M", "1.5G": sacct's units, kept as written for the largest.
      const double v = std::atof(f[4].c_str());
      const char unit = f[4].back();
      const double kib = unit == 'G' ? v * 1024 * 1024 : unit == 'M' ? v * 1024 : unit == 'K' ? v : v / 1024;
      if (!rss.contains(id) || kib > static_cast<double>(rss[id])) {
        rss[id] = static_cast<long long>(kib);
        j["MaxRSS"] = f[4];
      }
    }
    for (const char* key : {"State", "ExitCode", "Elapsed", "NodeList", "MaxRSS"}) j.try_emplace(key, "");
  }
  return jobs;
}

std::unique_ptr<Executor> make_slurm_executor(const SlurmOptions& options, CommandRunner run,
                                              std::filesystem::path waves_dir) {
  return std::make_unique<SlurmExecutor>(options, std::move(run), std::move(waves_dir));
}

std::unique_ptr<Executor> make_executor(const Campaign& c) {
  return c.executor == ExecutorKind::slurm ? make_slurm_executor(c.slurm, real_command_runner(), c.storage / "slurm")
                                           : make_local_executor();
}

}  // namespace kwb
