// The worker's confinement (docs/threat-model.md). The implementation is untrusted native code in the worker's own
// address space, so the worker is confined before the implementation is loaded (its constructors run inside
// dlopen) and confined further once kwb_setup has returned:
//
//   before dlopen  rlimits (address space, CPU time, processes, file size, open files, no core files),
//                  PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE 0, capabilities dropped, the worker's code and RELRO
//                  sealed (mseal), Landlock (only the artifact can be opened; no signals or abstract sockets
//                  outside the worker; no TCP), and the *load* seccomp filter: a deny-list that already forbids
//                  exec, fork and non-thread clone, ptrace, process_vm_*, sockets, opening files for writing,
//                  signalling other processes, raising limits, timers, mounts, modules and the like.
//   after setup    the *run* seccomp filter: an allow-list of what kwb_run and the worker's request loop need.
//                  No file can be opened at all, nothing can be mapped executable, threads only where the task
//                  allows them (clone with CLONE_THREAD; mprotect without PROT_EXEC for their stacks).
//
// A denied system call raises SIGSYS (SECCOMP_RET_TRAP); the worker's handler reports the call number to the parent
// and the worker dies of SIGSYS, which the parent reports as `sandbox_violation`. kwb-profile-worker, which runs
// under valgrind, gets enter_profile_sandbox() instead.
//
// A device backend adds what its runtime needs after the implementation is loaded (backend/backend.h,
// RuntimeSandboxNeeds): its threads, the paths it reads, a private cache directory it writes, helper programs it
// starts (PoCL runs the linker), device nodes. A runtime that compiles inside kwb_run keeps the load phase's
// deny-list for the run phase instead of the allow-list; Landlock still confines every file access to those paths.
#pragma once

#include "backend/backend.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kwb {

// What the parent allows one worker; sent in the load request.
struct SandboxPolicy {
  int threads = 1;                   // > 1: clone(CLONE_THREAD) and mprotect without PROT_EXEC are allowed
  uint64_t address_space_bytes = 0;  // RLIMIT_AS; 0 leaves it as inherited
  uint64_t cpu_seconds = 0;          // RLIMIT_CPU soft limit (the hard one is 5 s later); 0 leaves it
  RuntimeSandboxNeeds runtime;       // the device runtime's own needs; the default is the cpu backend's (none)
};

// Process-wide settings that cost nothing and break nothing, valgrind included: no new privileges, not dumpable
// (no ptrace attach, no /proc/<pid>/mem for same-user processes, no core file).
void harden_process();

// kwb-profile-worker's sandbox, entered before dlopen: valgrind runs in the same process, so the timing worker's
// filters (an allow-list, SIGSYS on denial, Landlock) would break it (kwb-confine applies Landlock and rlimits
// before valgrind starts, worker/confine_main.cpp). Here: no new privileges, not dumpable, capabilities dropped (the
// worker already runs as a user of its own when kwb is root, util/worker_user.h) and a deny-list answering EPERM:
// no processes (fork, non-thread clone, exec), no sessions or process groups, no ptrace or process_vm_*, no
// sockets, no signals to other processes, no signal routing, no namespaces, mounts, modules, credential changes or
// SysV IPC (the program: worker/profile_filter.h, built by the parent and passed as a memfd).
// Returns what failed, or "" (`features` lists what is in force).
std::string enter_profile_sandbox(int program_fd, std::vector<std::string>& features);

// The filesystem a process and everything it executes may use, applied with Landlock (which survives execve): read
// and execute beneath `read_paths`, everything but execute beneath `write_paths`, nothing elsewhere (/proc included,
// unless a path under it is listed); no TCP and, from ABI 6, no signals to or abstract sockets of processes outside.
// kwb-confine applies it before it executes valgrind, which does not know the Landlock system calls
// (worker/confine_main.cpp). Paths that do not exist are skipped. Returns "" when applied or when the kernel has no
// Landlock (`features` then says "landlock:unavailable"), else what failed.
struct PathConfinement {
  std::vector<std::string> read_paths;
  std::vector<std::string> write_paths;
};
std::string confine_paths(const PathConfinement& confinement, std::vector<std::string>& features);

class Sandbox {
public:
  explicit Sandbox(const SandboxPolicy& policy);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;  // owns libseccomp contexts that must be released exactly once
  Sandbox& operator=(const Sandbox&) = delete;

  // Everything before dlopen (see the file comment). `artifact` is the one file Landlock lets the worker open.
  // Returns an empty string, or what could not be done (the worker must then refuse to load anything).
  std::string enter_load_phase(const std::string& artifact);
  // After kwb_setup: the run filter, synchronized to every thread the implementation may have started.
  std::string enter_run_phase();

  // What is in force, for the load answer and the evidence ("seccomp", "landlock:7", "mseal", ...).
  const std::vector<std::string>& features() const { return m_features; }

private:
  struct Filters;
  SandboxPolicy m_policy;
  std::unique_ptr<Filters> m_filters;
  std::vector<std::string> m_features;
};

}  // namespace kwb
