#include "builder/build_sandbox.h"

#include "util/error.h"
#include "util/fd.h"
#include "util/interrupt.h"
#include "util/paths.h"
#include "util/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

namespace kwb {

namespace fs = std::filesystem;

namespace {

// The folders a compiler driver and its tools are installed under, and the /etc entries they read (the
// alternatives links c++ -> g++ go through, the dynamic loader's cache).
constexpr const char* k_root_dirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
constexpr const char* k_etc_entries[] = {"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf",
                                         "/etc/ld.so.conf.d"};

// PATH lookup as execvp does it; "" when not found. Names with a '/' are taken as they are, made absolute.
std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return fs::absolute(name).lexically_normal().string();
  const char* path = std::getenv("PATH");
  std::string_view rest = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const size_t colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    const fs::path candidate = (dir.empty() ? fs::path(".") : fs::path(dir)) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) {
      return fs::absolute(candidate).lexically_normal().string();
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return "";
}

std::string bwrap_path() {
  std::string path = find_bubblewrap();
  if (path.empty()) {
    throw Error(ExitCode::unavailable,
                "kwb compiles candidates only inside a bubblewrap sandbox, and `bwrap` is not installed: install it "
                "(Debian/Ubuntu: apt-get install bubblewrap; scripts/setup.sh does) and run again");
  }
  return path;
}

struct Spawned {
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string output;
};

// One sandbox running as a child of kwb (util/subprocess.h: its own process group, registered for interruption,
// dying with kwb), with the rlimits and its output merged into one pipe.
struct Running {
  std::size_t index = 0;  // in the caller's list of commands
  pid_t pid = -1;
  UniqueFd output;
  std::chrono::steady_clock::time_point deadline;
  Spawned result;
  bool dropped = false;
};

Running start_limited(const std::vector<std::string>& argv, const BuildSandboxLimits& limits) {
  int fds[2];
  KWB_POSIX_CALL(::pipe2(fds, O_CLOEXEC));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  ChildSpec spec;
  spec.argv = argv;
  spec.stdout_fd = write_end.get();
  spec.stderr_fd = write_end.get();
  spec.limits = sandbox_rlimits(limits.address_space_bytes, limits.cpu_seconds, limits.file_size_bytes);
  int exec_errno = 0;
  Running r;
  r.pid = spawn_child(spec, exec_errno);
  if (r.pid < 0) {
    r.result.exit_code = 127;
    r.result.output = fmt::format("kwb: cannot exec {}: {}\n", argv.front(), std::strerror(exec_errno));
    return r;
  }
  r.output = std::move(read_end);
  r.deadline = std::chrono::steady_clock::now() + limits.wall;
  return r;
}

// Reaps a sandbox whose output has ended (or that was killed) and completes its result.
Spawned finish_limited(Running& r, const BuildSandboxLimits& limits) {
  r.output.reset();
  const int status = reap_child(r.pid);
  r.pid = -1;
  // A sandbox killed by kwb's own interruption handler is no compiler's failure.
  throw_if_interrupted();
  if (WIFSIGNALED(status)) {
    r.result.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    r.result.exit_code = WEXITSTATUS(status);
  }
  if (r.dropped) r.result.output += fmt::format("\n(kwb: compiler output cut at {} bytes)\n", limits.max_output_bytes);
  return std::move(r.result);
}

// Runs every command in its sandbox, at most `jobs` at once, all started from this (kwb's main) thread; each is
// killed with its process group at its own wall-clock limit; bwrap's --die-with-parent takes the sandbox's PID
// namespace with it. Results in the commands' order. Should one throw (an interruption), the others are killed and
// reaped before the exception leaves.
std::vector<Spawned> spawn_limited_all(const std::vector<std::vector<std::string>>& commands, std::size_t jobs,
                                       const BuildSandboxLimits& limits) {
  std::vector<Spawned> results(commands.size());
  std::vector<Running> running;
  std::size_t next = 0;
  try {
    while (next < commands.size() || !running.empty()) {
      while (running.size() < std::max<std::size_t>(jobs, 1) && next < commands.size()) {
        Running r = start_limited(commands[next], limits);
        r.index = next++;
        if (r.pid < 0) {
          results[r.index] = std::move(r.result);
        } else {
          running.push_back(std::move(r));
        }
      }
      if (running.empty()) continue;
      const auto now = std::chrono::steady_clock::now();
      // The soonest deadline of the sandboxes still running (those past theirs are killed here first).
      auto soonest = std::chrono::steady_clock::time_point::max();
      for (std::size_t i = 0; i < running.size();) {
        if (running[i].deadline <= now) {
          ::kill(-running[i].pid, SIGKILL);
          running[i].result.timed_out = true;
          results[running[i].index] = finish_limited(running[i], limits);
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        soonest = std::min(soonest, running[i].deadline);
        ++i;
      }
      if (running.empty()) continue;
      std::vector<pollfd> polls;
      polls.reserve(running.size());
      for (const Running& r : running) polls.push_back({r.output.get(), POLLIN, 0});
      const auto left =
          std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(soonest - now).count() + 1);
      const int pr = ::poll(polls.data(), polls.size(), static_cast<int>(left));
      if (pr <= 0) continue;  // EINTR or a deadline: looked at above
      char buffer[4096];
      for (std::size_t i = polls.size(); i-- > 0;) {
        if (polls[i].revents == 0) continue;
        Running& r = running[i];
        const ssize_t n = ::read(r.output.get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          results[r.index] = finish_limited(r, limits);
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        const std::size_t room =
            limits.max_output_bytes > r.result.output.size() ? limits.max_output_bytes - r.result.output.size() : 0;
        r.result.output.append(buffer, std::min(room, static_cast<std::size_t>(n)));
        r.dropped = r.dropped || room < static_cast<std::size_t>(n);
      }
    }
  } catch (...) {
    for (Running& r : running) {
      if (r.pid < 0) continue;
      ::kill(-r.pid, SIGKILL);
      (void)reap_child(r.pid);
    }
    throw;
  }
  return results;
}

Spawned spawn_limited(const std::vector<std::string>& argv, const BuildSandboxLimits& limits) {
  return std::move(spawn_limited_all({argv}, 1, limits).front());
}

std::vector<std::string> sandbox_prefix() { return sandbox_base_args(bwrap_path()); }

// bwrap reports its own failures (namespaces refused, a bind source missing) as "bwrap: ..." with status 1.
bool is_bwrap_failure(const Spawned& s) { return s.exit_code == 1 && s.output.starts_with("bwrap: "); }

std::string namespaces_refused_message(const std::string& bwrap_output) {
  std::string why = bwrap_output.substr(0, bwrap_output.find('\n'));
  return fmt::format(
      "kwb compiles candidates only inside a bubblewrap sandbox, and it cannot be created here ({}). kwb never "
      "compiles a candidate without it. Allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
      "on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0), run in a container that permits them "
      "(e.g. docker --security-opt seccomp=unconfined), or run kwb as root",
      why);
}

}  // namespace

std::string find_bubblewrap() {
  static const std::string path = []() -> std::string {
    // A site's own bubblewrap (a module, a prefix off PATH): KWB_BWRAP names it; one that is not executable is none.
    if (const char* named = std::getenv("KWB_BWRAP"); named != nullptr && *named != '\0') {
      return ::access(named, X_OK) == 0 ? named : "";
    }
    std::string p = find_on_path("bwrap");
    if (p.empty() && ::access("/usr/bin/bwrap", X_OK) == 0) p = "/usr/bin/bwrap";
    return p;
  }();
  return path;
}

std::vector<std::string> sandbox_system_root_args() {
  std::vector<std::string> args;
  for (const char* root : k_root_dirs) {
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(root, ec);
    if (ec || !fs::exists(st)) continue;
    if (fs::is_symlink(st)) {
      args.insert(args.end(), {"--symlink", fs::read_symlink(root, ec).string(), root});
    } else if (fs::is_directory(st)) {
      args.insert(args.end(), {"--ro-bind", root, root});
    }
  }
  for (const char* entry : k_etc_entries) args.insert(args.end(), {"--ro-bind-try", entry, entry});
  return args;
}

std::vector<std::string> sandbox_base_args(const std::string& bwrap) {
  std::vector<std::string> args = {bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"};
  const std::vector<std::string> roots = sandbox_system_root_args();
  args.insert(args.end(), roots.begin(), roots.end());
  // /tmp first: binds below it (a candidate under /tmp) are made on top of the empty tmpfs.
  args.insert(args.end(),
              {"--size", std::to_string(256ull << 20), "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc"});
  return args;
}

std::vector<std::pair<RlimitResource, rlimit>> sandbox_rlimits(std::uint64_t address_space_bytes,
                                                               std::uint64_t cpu_seconds,
                                                               std::uint64_t file_size_bytes) {
  // The CPU hard limit a little above the soft one: SIGXCPU at the limit, SIGKILL 5 s later.
  return {{RLIMIT_AS, {address_space_bytes, address_space_bytes}},
          {RLIMIT_CPU, {cpu_seconds, cpu_seconds + 5}},
          {RLIMIT_FSIZE, {file_size_bytes, file_size_bytes}},
          {RLIMIT_CORE, {0, 0}}};
}

std::vector<fs::path> build_sandbox_system_roots() {
  std::vector<fs::path> roots;
  for (const char* r : k_root_dirs) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(r, ec))) roots.emplace_back(r);
  }
  for (const char* e : k_etc_entries) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(e, ec))) roots.emplace_back(e);
  }
  return roots;
}

fs::path compiler_prefix_to_bind(const std::string& compiler) {
  const std::string found = find_on_path(compiler);
  if (found.empty()) return {};
  std::error_code ec;
  const fs::path real = fs::canonical(found, ec);
  if (ec) return {};
  for (const fs::path& root : build_sandbox_system_roots()) {
    std::error_code ec2;
    const fs::path real_root = fs::canonical(root, ec2);
    if (!ec2 && path_is_within(real, real_root)) return {};
  }
  // <prefix>/bin/<compiler>: the whole prefix (a CUDA toolkit's nvvm/, targets/, lib64/ sit beside bin/).
  fs::path prefix = real.parent_path();
  if (prefix.filename() == "bin") prefix = prefix.parent_path();
  return prefix;
}

std::vector<std::string> build_environment_identity(const std::string& compiler) {
  std::vector<std::string> out;
  const char* path = std::getenv("PATH");
  out.push_back(std::string("PATH=") + (path != nullptr ? path : ""));
  const std::string found = find_on_path(compiler);
  std::error_code ec;
  const fs::path real = found.empty() ? fs::path() : fs::canonical(found, ec);
  out.push_back("compiler=" + (ec ? found : real.string()));
  // The first processor's model and flags: what -march=native resolves from (cpuid) shows in both.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string model, flags;
  for (std::string line; std::getline(cpuinfo, line) && (model.empty() || flags.empty());) {
    if (model.empty() && line.starts_with("model name")) model = line;
    if (flags.empty() && line.starts_with("flags")) flags = line;
  }
  out.push_back("cpu " + model);
  out.push_back("cpu " + flags);
  return out;
}

void require_build_sandbox() {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    std::vector<std::string> argv = sandbox_prefix();
    const std::string truth = find_on_path("true");
    argv.insert(argv.end(), {"--clearenv", "--", truth.empty() ? "/usr/bin/true" : truth});
    BuildSandboxLimits limits;
    limits.wall = std::chrono::seconds(30);
    const Spawned s = spawn_limited(argv, limits);
    if (s.exit_code != 0) failure = namespaces_refused_message(s.output.empty() ? "no output" : s.output);
  });
  if (!failure.empty()) throw Error(ExitCode::unavailable, failure);
}

namespace {

std::vector<std::string> sandboxed_argv(const SandboxedCommand& c) {
  const std::vector<std::string>& argv = c.argv;
  const BuildSandboxSpec& spec = c.spec;
  if (argv.empty()) throw InternalError("run_in_build_sandbox: empty command");
  std::vector<std::string> args = sandbox_prefix();
  std::vector<fs::path> read_only = spec.read_only;
  if (fs::path prefix = compiler_prefix_to_bind(argv[0]); !prefix.empty()) read_only.push_back(prefix);
  for (const fs::path& p : read_only) args.insert(args.end(), {"--ro-bind", p.string(), p.string()});
  const fs::path tmpdir = spec.writable / ".tmp";
  fs::create_directories(tmpdir);
  args.insert(args.end(), {"--bind", spec.writable.string(), spec.writable.string()});
  args.insert(args.end(), {"--chdir", (spec.workdir.empty() ? spec.writable : spec.workdir).string()});
  // A clean environment: no CPATH, GCC_EXEC_PREFIX, LD_PRELOAD or secrets reach the compiler; PATH and the
  // locale are kept (messages), temporaries go to the private folder.
  args.insert(args.end(),
              {"--clearenv", "--setenv", "TMPDIR", tmpdir.string(), "--setenv", "HOME", spec.writable.string()});
  for (const char* name : {"PATH", "LANG", "LC_ALL", "LC_MESSAGES", "LC_CTYPE"}) {
    if (const char* v = std::getenv(name); v != nullptr) args.insert(args.end(), {"--setenv", name, v});
  }
  args.push_back("--");
  args.push_back(find_on_path(argv[0]));
  args.insert(args.end(), argv.begin() + 1, argv.end());
  return args;
}

}  // namespace

std::vector<CommandResult> run_all_in_build_sandbox(const std::vector<SandboxedCommand>& commands, std::size_t jobs,
                                                    const BuildSandboxLimits& limits) {
  if (commands.empty()) return {};  // everything came from the cache: no sandbox is needed, nor probed
  require_build_sandbox();
  std::vector<CommandResult> results(commands.size());
  std::vector<std::vector<std::string>> to_run;
  std::vector<std::size_t> run_index;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    if (commands[i].argv.empty()) throw InternalError("run_in_build_sandbox: empty command");
    if (find_on_path(commands[i].argv[0]).empty()) {
      results[i].exit_code = 127;
      results[i].output = fmt::format("cannot run '{}': not found on PATH", commands[i].argv[0]);
      continue;
    }
    to_run.push_back(sandboxed_argv(commands[i]));
    run_index.push_back(i);
  }
  std::vector<Spawned> spawned = spawn_limited_all(to_run, jobs, limits);
  for (std::size_t k = 0; k < spawned.size(); ++k) {
    const Spawned& s = spawned[k];
    if (is_bwrap_failure(s)) {
      throw Error(ExitCode::unavailable,
                  fmt::format("the build sandbox could not be set up: {}", s.output.substr(0, s.output.find('\n'))));
    }
    CommandResult& r = results[run_index[k]];
    r.exit_code = s.exit_code;
    r.signal = s.signal;
    r.timed_out = s.timed_out;
    r.output = s.output;
  }
  return results;
}

CommandResult run_in_build_sandbox(const std::vector<std::string>& argv, const BuildSandboxSpec& spec,
                                   const BuildSandboxLimits& limits) {
  return std::move(run_all_in_build_sandbox({{argv, spec}}, 1, limits).front());
}

std::size_t build_jobs() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const std::size_t cpus =
      ::sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<std::size_t>(std::max(CPU_COUNT(&set), 1)) : 1;
  // No more compiles than 2 GiB of memory each can hold: nvcc's cicc and ptxas peak near 1-2 GiB.
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const std::size_t by_memory = pages > 0 && page > 0
                                    ? static_cast<std::size_t>(static_cast<unsigned long long>(pages) *
                                                               static_cast<unsigned long long>(page) / (2ull << 30))
                                    : cpus;
  return std::max<std::size_t>(1, std::min(cpus, by_memory));
}

}  // namespace kwb
