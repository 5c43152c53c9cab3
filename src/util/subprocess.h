#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kwb {

struct CommandResult {
  int exit_code = -1;  // valid when !signaled && !timed_out
  int signal = 0;      // terminating signal, 0 if none
  bool timed_out = false;
  std::string output;  // stdout (and stderr, unless StderrMode::separate)
  std::string errors;  // stderr with StderrMode::separate
};

enum class StderrMode { merged, separate };

// Runs argv[0] (looked up in PATH) with stdin from /dev/null, capturing stdout+stderr. Killed (its process group)
// after `timeout`. Started with spawn_child; throws Interrupted (util/interrupt.h) when kwb was interrupted.
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          StderrMode stderr_mode = StderrMode::merged);

// First line of `cmd --version`-style output, or "" when the command cannot run.
std::string first_line_of(const std::vector<std::string>& argv);

// The type setrlimit takes (an enum in glibc's C++ headers).
using RlimitResource = decltype(RLIMIT_AS);

// A helper process (the build sandbox, a `--version` query). Workers start their own way (worker/worker_process.h)
// and follow the same rules.
struct ChildSpec {
  std::vector<std::string> argv;                          // argv[0]: a path, or a name looked up in PATH
  int stdout_fd = -1;                                     // becomes fd 1
  int stderr_fd = -1;                                     // becomes fd 2
  std::vector<std::pair<RlimitResource, rlimit>> limits;  // setrlimit in the child before exec
  // Descriptors that become fds 3, 4, ... in the child (at most 4): the only ones besides 0-2 that reach it.
  std::vector<int> inherited_fds;
  // A root kwb only: the child switches to the user of its own that worker_user_of(its pid) names (util/worker_user.h:
  // no supplementary groups, real, effective and saved ids) before exec, re-arms PR_SET_PDEATHSIG (a credential change
  // clears it) and checks that it cannot become root again.
  bool own_user = false;
  // When set, runs in kwb after the fork, with the child's pid, while the child waits before its user switch and exec:
  // what the child's user must own is handed over here (the user is known only once the pid is). Should it throw,
  // the child is killed and reaped and the exception leaves spawn_child.
  std::function<void(pid_t)> before_exec;
};

// Starts a child on kwb's main thread (util/interrupt.h: require_main_thread) that cannot outlive kwb: it leads a
// process group of its own, registered for interruption (register_child_group), and arms PR_SET_PDEATHSIG(SIGKILL)
// before exec, then exits at once if kwb is already gone. It gets stdin from /dev/null, the two given descriptors,
// the inherited ones and nothing else, an empty signal mask and default signal dispositions. Returns its pid, or -1
// with `exec_errno` set when it could not be executed (the child has been reaped then).
pid_t spawn_child(const ChildSpec& spec, int& exec_errno);

// Waits for the child to exit, kills whatever it left in its process group, unregisters the group and reaps the
// child: its wait status.
int reap_child(pid_t pid);

}  // namespace kwb
