#include "util/subprocess.h"

#include "util/error.h"
#include "util/fd.h"
#include "util/interrupt.h"
#include "util/worker_user.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace kwb {

namespace {

// Child side of spawn_child, between fork and exec: only async-signal-safe calls. Never returns.
[[noreturn]] void exec_child(const ChildSpec& spec, char* const* args, pid_t parent, int error_fd, int go_fd) {
  // kwb's interruption handlers must not run here (they would signal kwb's other children), and the SIGPIPE kwb
  // ignores must not be inherited through exec.
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::setpgid(0, 0);
  // Dies with kwb's main thread (the one that forked, require_main_thread); kwb may already be gone.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || ::getppid() != parent) ::_exit(127);
  // Every source descriptor moves above the standard three first, so that no dup2 below overwrites another.
  const int err = ::fcntl(error_fd, F_DUPFD_CLOEXEC, 10);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int in = devnull >= 0 ? ::fcntl(devnull, F_DUPFD_CLOEXEC, 10) : -1;
  const int out = spec.stdout_fd >= 0 ? ::fcntl(spec.stdout_fd, F_DUPFD_CLOEXEC, 10) : -1;
  const int errout = spec.stderr_fd >= 0 ? ::fcntl(spec.stderr_fd, F_DUPFD_CLOEXEC, 10) : -1;
  if (err < 0 || in < 0 || (spec.stdout_fd >= 0 && out < 0) || (spec.stderr_fd >= 0 && errout < 0)) ::_exit(127);
  const int go_in = go_fd >= 0 ? ::fcntl(go_fd, F_DUPFD_CLOEXEC, 10) : -1;
  if (go_fd >= 0 && go_in < 0) ::_exit(127);
  int inherited[4];
  const std::size_t n_inherited = spec.inherited_fds.size();
  if (n_inherited > 4) ::_exit(127);
  for (std::size_t i = 0; i < n_inherited; ++i) {
    inherited[i] = ::fcntl(spec.inherited_fds[i], F_DUPFD_CLOEXEC, 10);
    if (inherited[i] < 0) ::_exit(127);
  }
  ::dup2(in, 0);
  if (out >= 0) ::dup2(out, 1);
  if (errout >= 0) ::dup2(errout, 2);
  // Nothing of kwb's but the three standard descriptors and the inherited ones reaches the child (the error pipe
  // closes at exec). dup2 gives the inherited ones descriptors that stay open across exec.
  ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
  for (std::size_t i = 0; i < n_inherited; ++i) {
    if (::dup2(inherited[i], static_cast<int>(3 + i)) < 0) ::_exit(127);
  }
  for (const auto& [resource, limit] : spec.limits) ::setrlimit(resource, &limit);
  if (go_in >= 0) {
    // kwb's before_exec runs now; nothing but its go (one byte) lets the child on.
    char go = 0;
    ssize_t n;
    do {
      n = ::read(go_in, &go, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) ::_exit(127);
  }
  if (spec.own_user) {
    const WorkerUser user = worker_user_of(::getpid());
    int e = 0;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(user.gid, user.gid, user.gid) != 0 ||
        ::setresuid(user.uid, user.uid, user.uid) != 0) {
      e = errno;
    } else if (::getuid() == 0 || ::geteuid() == 0 || ::setresuid(0, 0, 0) == 0) {
      e = EPERM;  // root could be regained: never exec that way
    } else if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || ::getppid() != parent) {
      ::_exit(127);
    }
    if (e != 0) {
      [[maybe_unused]] ssize_t w = ::write(err, &e, sizeof e);
      ::_exit(127);
    }
  }
  if (spec.argv.front().find('/') != std::string::npos) {
    ::execv(args[0], args);
  } else {
    ::execvp(args[0], args);
  }
  const int e = errno;
  [[maybe_unused]] ssize_t n = ::write(err, &e, sizeof e);
  ::_exit(127);
}

}  // namespace

pid_t spawn_child(const ChildSpec& spec, int& exec_errno) {
  if (spec.argv.empty()) throw InternalError("spawn_child: empty command");
  require_main_thread("a child process");
  throw_if_interrupted();
  std::vector<char*> args;
  for (const std::string& a : spec.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  KWB_POSIX_CALL(::pipe2(fds, O_CLOEXEC));
  UniqueFd error_read(fds[0]), error_write(fds[1]);
  UniqueFd go_read, go_write;
  if (spec.before_exec) {
    KWB_POSIX_CALL(::pipe2(fds, O_CLOEXEC));
    go_read.reset(fds[0]);
    go_write.reset(fds[1]);
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw_system_error("fork()", __FILE__, __LINE__, errno);
  if (pid == 0) exec_child(spec, args.data(), parent, error_write.get(), go_read.get());
  (void)::setpgid(pid, pid);  // also here, so the group exists before it is registered (EACCES once it has exec'd)
  if (!register_child_group(pid)) {
    ::kill(-pid, SIGKILL);
    (void)reap_child(pid);
    throw InternalError("too many child processes at once");
  }
  error_write.reset();
  if (spec.before_exec) {
    go_read.reset();
    try {
      spec.before_exec(pid);
    } catch (...) {
      ::kill(-pid, SIGKILL);
      (void)reap_child(pid);
      throw;
    }
    const char go = 1;
    (void)!::write(go_write.get(), &go, 1);  // a child already gone is seen below (its error pipe, or its exit)
    go_write.reset();
  }
  int e = 0;
  ssize_t n;
  do {
    n = ::read(error_read.get(), &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof e)) {
    (void)reap_child(pid);
    exec_errno = e;
    return -1;
  }
  exec_errno = 0;
  return pid;
}

int reap_child(pid_t pid) {
  // Until it is reaped, the exited leader pins its pid and so its group's id: the kill below reaches only what the
  // child left behind, never a stranger's group that reused the number.
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  ::kill(-pid, SIGKILL);
  unregister_child_group(pid);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          StderrMode stderr_mode) {
  int out_fds[2], err_fds[2];
  KWB_POSIX_CALL(::pipe2(out_fds, O_CLOEXEC));
  UniqueFd out_read(out_fds[0]), out_write(out_fds[1]);
  KWB_POSIX_CALL(::pipe2(err_fds, O_CLOEXEC));
  UniqueFd err_read(err_fds[0]), err_write(err_fds[1]);
  const bool separate = stderr_mode == StderrMode::separate;

  ChildSpec spec;
  spec.argv = argv;
  spec.stdout_fd = out_write.get();
  spec.stderr_fd = separate ? err_write.get() : out_write.get();
  int exec_errno = 0;
  const pid_t pid = spawn_child(spec, exec_errno);
  out_write.reset();
  err_write.reset();

  CommandResult result;
  if (pid < 0) {
    result.exit_code = 127;
    result.output = std::string("cannot run '") + argv[0] + "': " + std::strerror(exec_errno);
    return result;
  }

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  std::vector<pollfd> fds = {{out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
  std::string* sinks[2] = {&result.output, &result.errors};
  size_t open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(-pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    int pr = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;  // poll ignores negative descriptors
        --open_fds;
        continue;
      }
      sinks[i]->append(buffer, static_cast<size_t>(n));
    }
  }
  const int status = reap_child(pid);
  // Killed by kwb's own interruption handler: not the command's result.
  throw_if_interrupted();
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

std::string first_line_of(const std::vector<std::string>& argv) {
  CommandResult r = run_command(argv, std::chrono::seconds(30));
  if (r.exit_code != 0) return "";
  return r.output.substr(0, r.output.find('\n'));
}

}  // namespace kwb
