#include "experiment/generator_sandbox.h"

#include "builder/build_sandbox.h"
#include "experiment/generator_supervisor.h"
#include "experiment/generator_syscalls.h"
#include "experiment/work_folder.h"
#include "util/error.h"
#include "util/fd.h"
#include "util/interrupt.h"
#include "util/paths.h"
#include "util/subprocess.h"
#include "util/worker_user.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace kwb {

namespace fs = std::filesystem;

namespace {

constexpr const char* k_generator_path = "/usr/local/bin:/usr/bin:/bin";
// How long kwb waits, after the sandbox's root process is reaped, for the last of its processes to be gone (the
// kernel kills them as the PID namespace ends; this is milliseconds, the bound is for a machine under load).
constexpr auto k_teardown_grace = std::chrono::seconds(5);

// PATH lookup on the generator's fixed PATH (the host's files under the system roots are the sandbox's); a name
// with a '/' is taken relative to the generator's working folder. "" when not found.
std::string resolve_program(const std::string& name, const fs::path& cwd) {
  if (name.find('/') != std::string::npos) return normal_path(cwd / name).string();
  std::string_view rest = k_generator_path;
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const fs::path candidate = fs::path(rest.substr(0, colon)) / name;
    std::error_code ec;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate, ec)) return candidate.string();
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return "";
}

std::string first_output_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// ---- the spec -----------------------------------------------------------------------------------------------------

struct Prepared {
  std::string program;  // argv[0] resolved
  fs::path cwd;
  fs::path shim;
  SandboxView view;
  std::vector<std::string> bwrap_args;
};

// A folder the spec binds, as the sandbox will: absolute, existing, normalized.
fs::path bound_folder(const fs::path& path, const std::string& field) {
  std::error_code ec;
  if (!path.is_absolute()) {
    throw DataError(
        fmt::format("the generator's {} '{}' is not an absolute path; the sandbox binds folders at "
                    "their absolute paths",
                    field, path.string()));
  }
  if (!fs::exists(fs::symlink_status(path, ec))) {
    throw DataError(
        fmt::format("the generator's {} {} does not exist: create it before the run", field, path.string()));
  }
  return normal_path(path);
}

fs::path writable_folder(const fs::path& path) {
  fs::path writable = bound_folder(path, "writable folder");
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(writable, ec))) {
    throw DataError(
        fmt::format("the generator's writable folder {} is not a folder (a symbolic link or a file): "
                    "give it a real folder",
                    writable.string()));
  }
  return writable;
}

void check_environment(const std::vector<std::pair<std::string, std::string>>& env) {
  for (const auto& [name, value] : env) {
    if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos) {
      throw DataError(fmt::format("the generator's environment variable name '{}' is not a name", name));
    }
    if (name == "PATH" || name == "HOME" || name == "TMPDIR" || name == "LANG") {
      throw DataError(
          fmt::format("the generator's environment may not set {}: kwb sets PATH, HOME (the writable "
                      "folder), TMPDIR (/tmp) and LANG itself",
                      name));
    }
  }
}

// bwrap, and kwb-generator-shim beside kwb: the two programs every generator starts through.
std::string sandbox_programs(fs::path& shim) {
  std::string bwrap = find_bubblewrap();
  if (bwrap.empty()) {
    throw Error(ExitCode::unavailable,
                "kwb runs experiment generators only inside a bubblewrap sandbox, and `bwrap` is not installed: "
                "install it (Debian/Ubuntu: apt-get install bubblewrap; scripts/setup.sh does) and run again");
  }
  shim = generator_shim_executable();
  if (::access(shim.c_str(), X_OK) != 0) {
    throw Error(ExitCode::unavailable,
                fmt::format("kwb-generator-shim, which starts every generator under kwb's supervision, is missing at "
                            "{}: build it with kwb (cmake --build), install it beside kwb, or set KWB_GENERATOR_SHIM",
                            shim.string()));
  }
  return bwrap;
}

std::vector<std::string> bwrap_arguments(const std::string& bwrap, const GeneratorSpec& spec, const Prepared& p,
                                         const fs::path& writable, const std::vector<fs::path>& read_only) {
  std::vector<std::string> a = sandbox_base_args(bwrap);
  // Its own user namespace, and none further inside: a namespace of its own would give the generator capabilities
  // (mounts, chroot) under which the paths it names stop meaning what they mean to kwb.
  a.insert(a.end(), {"--unshare-user", "--disable-userns"});
  // The generator is the PID namespace's init, not a child of bwrap's: everything it leaves is killed and reaped into
  // its rusage when it exits, and bwrap waits for it, so kwb's wait4 of bwrap counts the CPU of every process. (bwrap's
  // own init reports the exit and is never waited for: its CPU would be lost.)
  a.push_back("--as-pid-1");
  // Binds from the shallowest: one inside another (a writable folder below a read-only one) is mounted over it.
  std::vector<std::pair<fs::path, bool>> binds = {{p.shim, false}, {writable, true}};
  for (const fs::path& r : read_only) binds.emplace_back(r, false);
  std::stable_sort(binds.begin(), binds.end(), [](const auto& x, const auto& y) {
    return std::distance(x.first.begin(), x.first.end()) < std::distance(y.first.begin(), y.first.end());
  });
  for (const auto& [path, rw] : binds) a.insert(a.end(), {rw ? "--bind" : "--ro-bind", path.string(), path.string()});
  a.insert(a.end(), {"--chdir", p.cwd.string(), "--clearenv", "--setenv", "PATH", k_generator_path, "--setenv", "HOME",
                     writable.string(), "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8"});
  for (const auto& [name, value] : spec.env) a.insert(a.end(), {"--setenv", name, value});
  a.insert(a.end(), {"--", p.shim.string(), p.program});
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());
  return a;
}

Prepared prepare_sandbox(const GeneratorSpec& spec, bool own_user) {
  if (spec.argv.empty() || spec.argv.front().empty()) throw InternalError("run_generator: empty argv");
  Prepared p;
  const std::string bwrap = sandbox_programs(p.shim);
  const fs::path writable = writable_folder(spec.writable);
  std::vector<fs::path> read_only;
  for (const fs::path& r : spec.read_only) read_only.push_back(bound_folder(r, "read-only folder"));
  p.cwd = spec.cwd.empty() ? writable : normal_path(spec.cwd);
  const bool cwd_bound =
      path_is_within(p.cwd, writable) ||
      std::any_of(read_only.begin(), read_only.end(), [&](const fs::path& r) { return path_is_within(p.cwd, r); });
  if (!p.cwd.is_absolute() || !cwd_bound) {
    throw DataError(
        fmt::format("the generator's working folder {} lies outside its writable folder and its "
                    "read-only folders, so it does not exist inside the sandbox: pick one within them",
                    p.cwd.string()));
  }
  check_environment(spec.env);
  if (own_user) {
    for (const fs::path& r : read_only) require_reachable_by_others(r, true, "a generator's read-only folder");
    require_reachable_by_others(writable, false, "the generator's writable folder");
    require_reachable_by_others(p.shim, true, "kwb-generator-shim");
  }

  // What it sees. Inside, paths are the same as outside: every bind keeps its absolute name.
  for (const fs::path& root : build_sandbox_system_roots()) p.view.bind(root);
  for (const char* mount : {"/dev", "/proc"}) p.view.bind(mount);
  p.view.fresh("/tmp");
  p.view.bind(p.shim);
  for (const fs::path& r : read_only) p.view.bind(r);
  p.view.bind(writable);

  p.program = resolve_program(spec.argv.front(), p.cwd);
  if (!p.program.empty() && !p.view.contains(p.program)) {
    throw DataError(
        fmt::format("the generator's program {} lies outside what the generator sees (the system roots, "
                    "its read-only and writable folders): bind its folder read-only",
                    p.program));
  }
  p.bwrap_args = bwrap_arguments(bwrap, spec, p, writable, read_only);
  return p;
}

// The sandbox could not be set up (nothing of the generator ran): what to enable.
[[noreturn]] void throw_unavailable(const std::string& output, bool timed_out) {
  const std::string line = output.empty() ? (timed_out ? "it did not start within the wall-clock limit" : "no output")
                                          : first_output_line(output);
  if (output.starts_with("bwrap: ")) {
    throw Error(ExitCode::unavailable,
                fmt::format("kwb runs experiment generators only inside a bubblewrap sandbox, and it cannot be created "
                            "here ({}). Allow unprivileged user namespaces (sysctl "
                            "kernel.unprivileged_userns_clone=1; on Ubuntu also "
                            "kernel.apparmor_restrict_unprivileged_userns=0), or run in a container that permits "
                            "them (e.g. docker --security-opt seccomp=unconfined)",
                            line));
  }
  throw Error(ExitCode::unavailable,
              fmt::format("kwb runs experiment generators only under seccomp supervision, and it cannot be set up "
                          "here ({}). It needs Linux 5.5 or later with seccomp user notification, libseccomp 2.5 or "
                          "later, and a container that permits seccomp filters",
                          line));
}

// One generator's run: the descriptors between kwb and the sandbox, the child, its supervision, and the state the
// event loop moves. Not copied or moved: the supervisor holds a reference to the result.
class GeneratorRun {
public:
  GeneratorRun(const GeneratorSpec& spec, const Prepared& prep, bool own_user)
      : m_spec(spec), m_prep(prep), m_own_user(own_user), m_writable(normal_path(spec.writable)) {
    int fds[2];
    KWB_POSIX_CALL(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds));
    m_control.reset(fds[0]);
    m_shim_end.reset(fds[1]);
    KWB_POSIX_CALL(::pipe2(fds, O_CLOEXEC));
    m_output.reset(fds[0]);
    m_output_write.reset(fds[1]);
  }
  GeneratorRun(const GeneratorRun&) = delete;
  GeneratorRun& operator=(const GeneratorRun&) = delete;

  GeneratorResult run() {
    // Before the run: what a run kwb did not see end left past the folder's bounds (a hard link, a deep tree, too
    // many bytes) is reset, so that it neither wedges this run's hand-over nor counts against this run.
    if (!walk_work_folder(m_writable, std::nullopt, false, m_spec.work_quota_bytes).problems.empty()) {
      reset_work_folder(m_writable);
    }
    spawn();
    try {
      supervise();
      reap();
      drain();
    } catch (...) {
      if (m_pid > 0) {
        ::kill(-m_pid, SIGKILL);
        (void)reap_child(m_pid);
      }
      take_back_quietly();
      throw;
    }
    take_back();
    throw_if_interrupted();  // killed by kwb's own interruption handler: no generator's result
    // No listener came: the sandbox or the supervision could not be set up, and the shim executed nothing.
    if (!m_supervised) throw_unavailable(m_result.output, m_result.timed_out);
    finish();
    return std::move(m_result);
  }

private:
  // Takes the writable folder back from the generator's user (kwb's own user owns it again, so that nothing the
  // generator left there can be changed by whoever gets that user's id next), and checks it against its bounds: a
  // folder past them is reset, and the run's result says why. The generator is gone by then.
  void take_back() {
    const std::optional<std::pair<uid_t, gid_t>> owner =
        m_handed_over ? std::optional(std::pair{::geteuid(), ::getegid()}) : std::nullopt;
    m_handed_over = false;
    FolderWalk w = walk_work_folder(m_writable, owner, false, m_spec.work_quota_bytes);
    if (!w.problems.empty()) {
      reset_work_folder(m_writable);
      m_result.folder_problems = std::move(w.problems);
    }
  }

  // On the way out of a failure: the first failure is the one to report.
  void take_back_quietly() {
    try {
      take_back();
    } catch (const Error&) {
    }
  }

  ChildSpec child_spec() {
    ChildSpec child;
    child.argv = m_prep.bwrap_args;
    child.stdout_fd = m_output_write.get();
    child.stderr_fd = m_output_write.get();
    child.limits = sandbox_rlimits(m_spec.address_space_bytes, m_spec.cpu_seconds, m_spec.file_size_bytes);
    child.inherited_fds = {m_shim_end.get()};
    static_assert(k_generator_shim_socket_fd == 3, "the shim's socket is the first inherited descriptor");
    if (!m_own_user) return child;
    child.own_user = true;
    child.limits.push_back({RLIMIT_NPROC, {m_spec.max_processes, m_spec.max_processes}});
    child.before_exec = [this](pid_t pid) {
      const WorkerUser user = worker_user_of(pid);
      m_handed_over = true;
      const FolderWalk w = walk_work_folder(m_writable, std::pair{user.uid, user.gid}, true, m_spec.work_quota_bytes);
      if (!w.problems.empty()) {  // reset just before; only a change since could leave one
        throw Error(ExitCode::io_error, fmt::format("the generator's writable folder {} changed while it was handed "
                                                    "over: {}",
                                                    m_writable.string(), w.problems.front()));
      }
    };
    return child;
  }

  void spawn() {
    const ChildSpec child = child_spec();
    m_start = std::chrono::steady_clock::now();
    m_deadline = m_start + m_spec.wall;
    try {
      int exec_errno = 0;
      m_pid = spawn_child(child, exec_errno);
      if (m_pid < 0) {
        throw Error(ExitCode::unavailable, fmt::format("cannot start bwrap ({}) for the generator: {}",
                                                       m_prep.bwrap_args.front(), std::strerror(exec_errno)));
      }
    } catch (...) {
      take_back_quietly();
      throw;
    }
    m_output_write.reset();
    m_shim_end.reset();
    m_pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, m_pid, 0)));
  }

  // One loop for everything: the shim's descriptor, the sandbox's calls, its output, its end, the deadline. A
  // generator that closes its output and runs on is still ended by the deadline.
  void supervise() {
    m_supervisor.emplace(m_prep.view, m_result);
    while (!m_exited) {
      const auto now = std::chrono::steady_clock::now();
      kill_if_due(now);
      poll_once(now);
      if (!m_pidfd.valid()) {
        siginfo_t info{};
        m_exited =
            ::waitid(P_PID, static_cast<id_t>(m_pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == m_pid;
      }
    }
    if (m_control.valid()) take_listener(false);  // sent before the end that was seen first
  }

  void kill_if_due(std::chrono::steady_clock::time_point now) {
    if ((now >= m_deadline || m_stop_now) && !m_killed_at) {
      // The generator first: the namespace ends with it and bwrap reaps it, its CPU included. Should that not end
      // bwrap within a second (the generator not started yet), bwrap's group: --die-with-parent takes the rest.
      if (m_supervisor->main_pidfd() >= 0) {
        (void)::syscall(SYS_pidfd_send_signal, m_supervisor->main_pidfd(), SIGKILL, nullptr, 0);
      } else {
        ::kill(-m_pid, SIGKILL);
      }
      m_result.timed_out = !m_stop_now;
      m_result.stopped = m_stop_now;
      m_killed_at = now;
    } else if (m_killed_at && now >= *m_killed_at + std::chrono::seconds(1)) {
      ::kill(-m_pid, SIGKILL);
    }
  }

  void poll_once(std::chrono::steady_clock::time_point now) {
    const bool stoppable = m_spec.stop_fd >= 0 && !m_killed_at, serviced = m_spec.service_fd >= 0 && m_spec.service;
    std::array<pollfd, 6> polls = {{{m_pidfd.valid() ? m_pidfd.get() : -1, POLLIN, 0},
                                    {m_notify.valid() ? m_notify.get() : -1, POLLIN, 0},
                                    {m_control.valid() ? m_control.get() : -1, POLLIN, 0},
                                    {m_output_open ? m_output.get() : -1, POLLIN, 0},
                                    {stoppable ? m_spec.stop_fd : -1, POLLIN, 0},
                                    {serviced ? m_spec.service_fd : -1, POLLIN, 0}}};
    auto left = m_killed_at ? std::chrono::milliseconds(100)
                            : std::chrono::duration_cast<std::chrono::milliseconds>(m_deadline - now) +
                                  std::chrono::milliseconds(1);
    // Without a pidfd (pidfd_open is older than seccomp notification: not expected) the exit is looked for often.
    if (!m_pidfd.valid()) left = std::min(left, std::chrono::milliseconds(50));
    if (::poll(polls.data(), polls.size(), static_cast<int>(left.count())) <= 0) return;
    if (polls[1].revents & POLLIN) serve();
    if (polls[1].revents & (POLLHUP | POLLERR | POLLNVAL)) m_notify.reset();  // every supervised process is gone
    if (polls[2].revents != 0) take_listener(true);
    if (polls[3].revents != 0) read_output();
    if (polls[0].revents != 0) m_exited = true;
    if (polls[4].revents != 0) m_stop_now = true;
    if (polls[5].revents != 0) m_spec.service();
  }

  void take_listener(bool wait) {
    m_notify.reset(receive_notify_fd(m_control.get(), wait));
    m_supervised = m_supervised || m_notify.valid();
    m_control.reset();
  }

  void read_output() {
    char buffer[4096];
    const ssize_t n = ::read(m_output.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {
      m_output_open = false;
      return;
    }
    const std::size_t room =
        m_spec.max_output_bytes > m_result.output.size() ? m_spec.max_output_bytes - m_result.output.size() : 0;
    m_result.output.append(buffer, std::min(room, static_cast<std::size_t>(n)));
    m_dropped = m_dropped || room < static_cast<std::size_t>(n);
  }

  void serve() {
    if (const int e = m_supervisor->serve(m_notify.get()); e != 0) {
      m_supervision_failure = fmt::format(
          "\n(kwb: the sandbox's supervision failed ({}): the generator's calls that "
          "name a path failed from then on)\n",
          std::strerror(e));
      m_notify.reset();
    }
  }

  // Reaped as util/subprocess.h's reap_child does (the leader's zombie pins its group while it is killed), with the
  // rusage of everything the sandbox's processes reaped.
  void reap() {
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(m_pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    ::kill(-m_pid, SIGKILL);
    unregister_child_group(m_pid);
    while (::wait4(m_pid, &m_status, 0, &m_usage) < 0 && errno == EINTR) {
    }
    m_pid = -1;
    m_result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
  }

  // The PID namespace ends with its init, which bwrap waited for; a killed bwrap's init follows it within moments.
  // Its processes are gone when the listener hangs up (no process holds the filter) and the output ends.
  void drain() {
    const auto grace = std::chrono::steady_clock::now() + k_teardown_grace;
    while ((m_notify.valid() || m_output_open) && std::chrono::steady_clock::now() < grace) {
      std::array<pollfd, 2> polls = {
          {{m_notify.valid() ? m_notify.get() : -1, POLLIN, 0}, {m_output_open ? m_output.get() : -1, POLLIN, 0}}};
      if (::poll(polls.data(), polls.size(), 100) <= 0) continue;
      if (polls[0].revents & POLLIN) serve();
      if (polls[0].revents & (POLLHUP | POLLERR | POLLNVAL)) m_notify.reset();
      if (polls[1].revents != 0) read_output();
    }
  }

  void finish() {
    if (WIFSIGNALED(m_status)) {
      m_result.signal = WTERMSIG(m_status);
    } else if (WIFEXITED(m_status)) {
      m_result.exit_code = WEXITSTATUS(m_status);
    }
    m_result.cpu_seconds = static_cast<double>(m_usage.ru_utime.tv_sec + m_usage.ru_stime.tv_sec) +
                           static_cast<double>(m_usage.ru_utime.tv_usec + m_usage.ru_stime.tv_usec) / 1e6;
    if (m_dropped)
      m_result.output += fmt::format("\n(kwb: generator output cut at {} bytes)\n", m_spec.max_output_bytes);
    m_result.output += m_supervision_failure;
  }

  const GeneratorSpec& m_spec;
  const Prepared& m_prep;
  const bool m_own_user;
  const fs::path m_writable;
  GeneratorResult m_result;
  UniqueFd m_control, m_shim_end, m_output, m_output_write, m_notify, m_pidfd;
  bool m_handed_over = false, m_output_open = true, m_dropped = false, m_exited = false, m_supervised = false,
       m_stop_now = false;
  pid_t m_pid = -1;
  std::chrono::steady_clock::time_point m_start, m_deadline;
  std::optional<std::chrono::steady_clock::time_point> m_killed_at;  // when the generator was killed
  std::optional<GeneratorSupervisor> m_supervisor;
  std::string m_supervision_failure;
  int m_status = 0;
  rusage m_usage{};
};

}  // namespace

GeneratorResult run_generator(const GeneratorSpec& spec) {
  const bool own_user = workers_change_user();
  const Prepared prep = prepare_sandbox(spec, own_user);
  if (prep.program.empty()) {
    GeneratorResult result;
    result.exit_code = 127;
    result.output = fmt::format("kwb: cannot run '{}': not found on the generator's PATH={}\n", spec.argv.front(),
                                k_generator_path);
    return result;
  }
  GeneratorRun run(spec, prep, own_user);
  return run.run();
}

std::optional<std::string> read_generated_file(const fs::path& dir, const std::string& name, size_t max_bytes,
                                               std::string& why) {
  const fs::path path = dir / name;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    why = fmt::format("'{}' is not a plain file name, so kwb does not read it from {}", name, dir.string());
    return std::nullopt;
  }
  const UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dfd.valid()) {
    why = fmt::format("cannot open the folder of {}: {}", path.string(), std::strerror(errno));
    return std::nullopt;
  }
  const UniqueFd fd(::openat(dfd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    const int e = errno;
    why = e == ELOOP
              ? fmt::format("{} is a symbolic link; kwb reads only regular files a generator wrote", path.string())
              : fmt::format("cannot open {}: {}", path.string(), std::strerror(e));
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    why = fmt::format("cannot stat {}: {}", path.string(), std::strerror(errno));
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    const char* what = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISDIR(st.st_mode)  ? "a folder"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    why = fmt::format("{} is {}, not a regular file; kwb reads only regular files a generator wrote", path.string(),
                      what);
    return std::nullopt;
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    why = fmt::format("{} is {} bytes, more than the {} kwb reads", path.string(), st.st_size, max_bytes);
    return std::nullopt;
  }
  std::string text;
  text.resize(max_bytes + 1);
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = fmt::format("cannot read {}: {}", path.string(), std::strerror(errno));
      return std::nullopt;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max_bytes) {  // it grew after the size was looked at
    why = fmt::format("{} is more than the {} bytes kwb reads", path.string(), max_bytes);
    return std::nullopt;
  }
  text.resize(got);
  return text;
}

}  // namespace kwb
