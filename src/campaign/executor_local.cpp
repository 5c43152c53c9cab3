// The local executor: each job's kwb validate is a child of the campaign process, on this machine, one at a time.
// validate takes the machine's timing lock around its timed stages as it always does (util/timing_lock.h), so a
// campaign also waits behind any other kwb timing here; the campaign gives it --lock-timeout = the queue limit.
// The child dies with the campaign (spawn_child arms PR_SET_PDEATHSIG), so a killed campaign leaves no job
// running unwatched; its next run starts the job again.
#include "campaign/executor.h"

#include "util/error.h"
#include "util/fd.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace kwb {

namespace {

UniqueFd open_log(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    throw Error(ExitCode::io_error,
                fmt::format("{}: cannot create the job's log: {}", path.string(), std::strerror(errno)));
  }
  return UniqueFd(fd);
}

class LocalExecutor final : public Executor {
public:
  LocalExecutor() = default;
  LocalExecutor(const LocalExecutor&) = delete;  // it owns live children: one owner reaps them
  LocalExecutor& operator=(const LocalExecutor&) = delete;
  ~LocalExecutor() override {
    // The loop ends every job before it returns; a child still here (an exception on the way out) must not
    // outlive the campaign as a zombie or a process nobody watches.
    for (const auto& [pid, child] : m_children) {
      if (!child.reaped) {
        ::kill(-pid, SIGKILL);
        (void)reap_child(pid);
      }
    }
  }

  ExecutorKind kind() const override { return ExecutorKind::local; }
  size_t slots() const override { return 1; }
  double poll_seconds() const override { return 0.5; }
  // validate records its interrupted stage and exits within seconds of SIGTERM; then it is killed.
  double grace_seconds() const override { return 0.0; }
  bool jobs_outlive_campaign() const override { return false; }

  std::string submit(const JobLaunch& launch) override {
    const UniqueFd out = open_log(launch.attempt_dir / "stdout.log");
    const UniqueFd err = open_log(launch.attempt_dir / "stderr.log");
    ChildSpec spec;
    // The ledger is the campaign's to write, after it has checked the bundle (campaign/evidence.h).
    spec.argv = {"/usr/bin/env", "KWB_LEDGER=none"};
    spec.argv.insert(spec.argv.end(), launch.validate.begin(), launch.validate.end());
    spec.stdout_fd = out.get();
    spec.stderr_fd = err.get();
    int exec_errno = 0;
    const pid_t pid = spawn_child(spec, exec_errno);
    if (pid < 0) {
      throw Error(ExitCode::unavailable,
                  fmt::format("cannot run {}: {}", launch.validate.front(), std::strerror(exec_errno)));
    }
    m_children[pid] = Child{};
    return std::to_string(pid);
  }

  JobProbe probe(const std::string& handle, const JobLaunch&) override {
    JobProbe p;
    const pid_t pid = static_cast<pid_t>(std::stol(handle));
    const auto it = m_children.find(pid);
    if (it == m_children.end() || it->second.reaped) {
      p.where = JobProbe::Where::ended;
      p.signal = SIGKILL;
      p.detail = "the campaign process that started it ended, and the job with it";
      return p;
    }
    siginfo_t info{};
    const int rc = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if ((rc < 0 && errno == EINTR) || (rc == 0 && info.si_pid == 0)) {
      p.where = JobProbe::Where::running;
      return p;
    }
    if (rc < 0) throw_system_error("waitid(a campaign job)", __FILE__, __LINE__, errno);
    const int status = reap_child(pid);
    it->second.reaped = true;
    p.where = JobProbe::Where::ended;
    if (WIFEXITED(status)) p.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) p.signal = WTERMSIG(status);
    return p;
  }

  // SIGTERM first (validate records the stage it was in and writes its manifest), SIGKILL when asked again.
  void cancel(const std::string& handle) override {
    const pid_t pid = static_cast<pid_t>(std::stol(handle));
    const auto it = m_children.find(pid);
    // Only a child of this process, still unreaped: its pid, and so its group's id, cannot have been reused.
    if (it == m_children.end() || it->second.reaped) return;
    ::kill(-pid, it->second.terminated ? SIGKILL : SIGTERM);
    it->second.terminated = true;
  }

private:
  struct Child {
    bool reaped = false;
    bool terminated = false;  // SIGTERM sent
  };
  std::map<pid_t, Child> m_children;
};

}  // namespace

std::unique_ptr<Executor> make_local_executor() { return std::make_unique<LocalExecutor>(); }

}  // namespace kwb
