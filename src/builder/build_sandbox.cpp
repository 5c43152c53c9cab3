#include "builder/build_sandbox.h"

#include "util/error.h"
#include "util/fd.h"
#include "util/interrupt.h"
#include "util/subprocess.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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
  static const std::string path = [] {
    std::string p = find_on_path("bwrap");
    if (p.empty() && ::access("/usr/bin/bwrap", X_OK) == 0) p = "/usr/bin/bwrap";
    return p;
  }();
  if (path.empty()) {
    throw Error(ExitCode::unavailable,
                "kwb compiles candidates only inside a bubblewrap sandbox, and `bwrap` is not installed: install it "
                "(Debian/Ubuntu: apt-get install bubblewrap; scripts/setup.sh does) and run again");
  }
  return path;
}

// The bwrap arguments for the toolchain roots: binds for real folders, the same symlinks for merged-usr links.
std::vector<std::string> system_root_args() {
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

struct Spawned {
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string output;
};

// The sandbox as a child of kwb (util/subprocess.h: its own process group, registered for interruption, dying with
// kwb), with the rlimits, output merged into one pipe, killed with its process group at the wall-clock limit;
// bwrap's --die-with-parent takes the sandbox's PID namespace with it.
Spawned spawn_limited(const std::vector<std::string>& argv, const BuildSandboxLimits& limits) {
  int fds[2];
  KWB_POSIX_CALL(::pipe2(fds, O_CLOEXEC));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  ChildSpec spec;
  spec.argv = argv;
  spec.stdout_fd = write_end.get();
  spec.stderr_fd = write_end.get();
  spec.limits = {{RLIMIT_AS, {limits.address_space_bytes, limits.address_space_bytes}},
                 {RLIMIT_CPU, {limits.cpu_seconds, limits.cpu_seconds + 5}},
                 {RLIMIT_FSIZE, {limits.file_size_bytes, limits.file_size_bytes}},
                 {RLIMIT_CORE, {0, 0}}};
  int exec_errno = 0;
  const pid_t pid = spawn_child(spec, exec_errno);
  write_end.reset();
  if (pid < 0) {
    Spawned failed;
    failed.exit_code = 127;
    failed.output = fmt::format("kwb: cannot exec {}: {}\n", argv.front(), std::strerror(exec_errno));
    return failed;
  }

  Spawned result;
  const auto deadline = std::chrono::steady_clock::now() + limits.wall;
  char buffer[4096];
  bool dropped = false;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(-pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    pollfd p{read_end.get(), POLLIN, 0};
    const int pr = ::poll(&p, 1, static_cast<int>(left.count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    const ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const size_t room = limits.max_output_bytes > result.output.size() ? limits.max_output_bytes - result.output.size() : 0;
    result.output.append(buffer, std::min(room, static_cast<size_t>(n)));
    dropped = dropped || room < static_cast<size_t>(n);
  }
  const int status = reap_child(pid);
  // A sandbox killed by kwb's own interruption handler is no compiler's failure.
  throw_if_interrupted();
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  if (dropped) result.output += fmt::format("\n(kwb: compiler output cut at {} bytes)\n", limits.max_output_bytes);
  return result;
}

// The sandbox's fixed part: namespaces, session, capabilities, toolchain roots, /tmp, /dev, /proc.
std::vector<std::string> sandbox_prefix() {
  std::vector<std::string> args = {bwrap_path(), "--unshare-all", "--die-with-parent", "--new-session",
                                   "--cap-drop", "ALL"};
  const std::vector<std::string> roots = system_root_args();
  args.insert(args.end(), roots.begin(), roots.end());
  // /tmp first: binds below it (a candidate under /tmp) are made on top of the empty tmpfs.
  args.insert(args.end(), {"--size", std::to_string(256ull << 20), "--tmpfs", "/tmp", "--dev", "/dev", "--proc",
                           "/proc"});
  return args;
}

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

bool path_is_within(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return false;
  }
  return true;
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

CommandResult run_in_build_sandbox(const std::vector<std::string>& argv, const BuildSandboxSpec& spec,
                                   const BuildSandboxLimits& limits) {
  require_build_sandbox();
  if (argv.empty()) throw InternalError("run_in_build_sandbox: empty command");
  const std::string program = find_on_path(argv[0]);
  if (program.empty()) {
    CommandResult r;
    r.exit_code = 127;
    r.output = fmt::format("cannot run '{}': not found on PATH", argv[0]);
    return r;
  }
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
  args.insert(args.end(), {"--clearenv", "--setenv", "TMPDIR", tmpdir.string(), "--setenv", "HOME",
                           spec.writable.string()});
  for (const char* name : {"PATH", "LANG", "LC_ALL", "LC_MESSAGES", "LC_CTYPE"}) {
    if (const char* v = std::getenv(name); v != nullptr) args.insert(args.end(), {"--setenv", name, v});
  }
  args.push_back("--");
  args.push_back(program);
  args.insert(args.end(), argv.begin() + 1, argv.end());

  const Spawned s = spawn_limited(args, limits);
  if (is_bwrap_failure(s)) {
    throw Error(ExitCode::unavailable, fmt::format("the build sandbox could not be set up: {}",
                                                   s.output.substr(0, s.output.find('\n'))));
  }
  CommandResult r;
  r.exit_code = s.exit_code;
  r.signal = s.signal;
  r.timed_out = s.timed_out;
  r.output = s.output;
  return r;
}

}  // namespace kwb
