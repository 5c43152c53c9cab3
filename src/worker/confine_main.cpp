// kwb-confine: confines a process before it executes a program that cannot confine itself, and then executes it.
// The profile worker runs inside valgrind, which knows neither the Landlock system calls nor seccomp(2), so the
// timing worker's sandbox cannot be entered from inside it (worker/sandbox.h). What survives execve is applied here
// instead, by the process that becomes valgrind and then the profile worker (the same process id):
//
//   kwb-confine [--own PATH]... [--read PATH]... [--write DIR]... [--cpu-seconds N] -- PROGRAM ARGS...
//
//   1. when started by root: chown every --own path (made by the parent) to the user this process will be
//      (util/worker_user.h, worker_user_of its own pid), so that valgrind may write its output there;
//   2. rlimits: CPU time (N, the hard limit 5 s later), no core file, 4 GiB per written file;
//   3. PR_SET_NO_NEW_PRIVS, then Landlock (sandbox.h, confine_paths): read and execute only the --read paths, the
//      toolchain roots valgrind and the worker's libraries live in, the loader's cache and this process's own
//      /proc/PID; write only beneath the --write folders (TMPDIR is the first, where valgrind makes its temporaries);
//   4. when started by root: the user of step 1 (no groups, no capabilities, root cannot be regained);
//   5. PR_SET_PDEATHSIG, and a check that the parent named in KWB_PARENT_PID is still there; then execv.
//
// Any failure is reported on stderr and ends it with status 71 before PROGRAM runs: nothing unconfined ever starts.
#include "util/worker_user.h"
#include "worker/sandbox.h"

#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& what) {
  const std::string msg = "kwb-confine: " + what + "\n";
  (void)!::write(2, msg.data(), msg.size());
  ::_exit(71);
}

[[noreturn]] void fail_errno(const std::string& what) { fail(what + ": " + std::strerror(errno)); }

struct Options {
  std::vector<std::string> own;
  kwb::PathConfinement paths;
  unsigned long cpu_seconds = 0;
  std::vector<char*> program;
};

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) fail("option " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--own") {
      o.own.push_back(v);
    } else if (a == "--read") {
      o.paths.read_paths.push_back(v);
    } else if (a == "--write") {
      o.paths.write_paths.push_back(v);
    } else if (a == "--cpu-seconds") {
      char* end = nullptr;
      o.cpu_seconds = std::strtoul(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0') fail("--cpu-seconds takes a whole number, not '" + v + "'");
    } else {
      fail("unknown option " + a);
    }
  }
  for (; i < argc; ++i) o.program.push_back(argv[i]);
  if (o.program.empty() || o.program.front()[0] != '/') fail("no program to execute (an absolute path after --)");
  o.program.push_back(nullptr);
  return o;
}

void set_limit(int resource, rlim_t soft, rlim_t hard, const char* name) {
  const rlimit r{soft, hard};
  if (::setrlimit(resource, &r) != 0) fail_errno(std::string("setrlimit(") + name + ")");
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  const bool root = kwb::workers_change_user();
  const kwb::WorkerUser user = kwb::worker_user_of(::getpid());
  if (root) {
    for (const std::string& p : o.own) {
      if (::lchown(p.c_str(), user.uid, user.gid) != 0) fail_errno("chown(" + p + ")");
    }
  }
  if (o.cpu_seconds > 0) set_limit(RLIMIT_CPU, o.cpu_seconds, o.cpu_seconds + 5, "RLIMIT_CPU");
  set_limit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE");
  set_limit(RLIMIT_FSIZE, 4ull << 30, 4ull << 30, "RLIMIT_FSIZE");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail_errno("prctl(PR_SET_NO_NEW_PRIVS)");

  // What valgrind and the profile worker read besides the --read paths: the toolchain roots (valgrind's tools, the
  // C and C++ runtimes), the loader's configuration, the few devices every program opens, the CPU topology glibc
  // asks for, and this process's own /proc entry (valgrind reads /proc/self/maps, auxv, exe). /proc/self is a link
  // to /proc/PID, so other processes' entries, their command lines included, stay closed.
  for (const char* p : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
                        "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/dev/null", "/dev/zero", "/dev/urandom",
                        "/sys/devices/system/cpu", "/proc/cpuinfo", "/proc/meminfo"}) {
    o.paths.read_paths.emplace_back(p);
  }
  o.paths.read_paths.push_back("/proc/" + std::to_string(::getpid()));
  if (!o.paths.write_paths.empty() && ::setenv("TMPDIR", o.paths.write_paths.front().c_str(), 1) != 0) {
    fail_errno("setenv(TMPDIR)");
  }
  o.paths.write_paths.emplace_back("/dev/null");
  std::vector<std::string> features;
  if (std::string e = kwb::confine_paths(o.paths, features); !e.empty()) fail(e);

  if (root) {
    if (::setgroups(0, nullptr) != 0) fail_errno("setgroups");
    if (::setresgid(user.gid, user.gid, user.gid) != 0) fail_errno("setresgid");
    if (::setresuid(user.uid, user.uid, user.uid) != 0) fail_errno("setresuid");
    if (::getuid() == 0 || ::geteuid() == 0 || ::setresuid(0, 0, 0) == 0) fail("root could be regained");
  }
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail_errno("prctl(PR_SET_PDEATHSIG)");
  if (const char* parent = std::getenv("KWB_PARENT_PID"); parent != nullptr && std::to_string(::getppid()) != parent) {
    fail("the parent is already gone");
  }
  ::execv(o.program.front(), o.program.data());
  fail_errno(std::string("execv(") + o.program.front() + ")");
}
