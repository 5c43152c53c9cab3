// Interruption: no process kwb starts outlives it. kwb keeps a process-wide registry of the process groups of its
// live children (workers, the build sandbox, helper commands); on SIGINT, SIGTERM or SIGHUP its handler sends
// SIGKILL to every one of them and records the signal. The waits of the main thread then see their child die, and
// instead of classifying that death they throw Interrupted; the verb records what it can (validate: the stage log
// and the manifest) and kwb exits with 128 + the signal. Against SIGKILL of kwb itself only the children's
// PR_SET_PDEATHSIG helps: every spawn arms it (the worker itself, after dropping privileges; the others in the child
// before exec), and every spawn happens on kwb's main thread, the thread whose death the signal follows.
#pragma once

#include <sys/types.h>

#include <string>

namespace kwb {

// Thrown where kwb notices that it was interrupted. Deliberately not a std::exception: no handler for failures
// (a stage's error, a profile that may fail) can swallow it on the way to the verb.
class Interrupted {
public:
  explicit Interrupted(int signal) : m_signal(signal) {}
  int signal() const noexcept { return m_signal; }
  // "SIGTERM"
  std::string signal_name() const;
  // "kwb was interrupted by SIGTERM"
  std::string what() const;

private:
  int m_signal;
};

// "SIGINT", "SIGTERM", "SIGHUP", or "signal N".
std::string signal_name(int signal);

// Installs the handlers for SIGINT, SIGTERM and SIGHUP (main does, once).
void install_interrupt_handlers();

// The first interrupting signal received, 0 when none. Async-signal-safe.
int interrupt_signal() noexcept;
// Throws Interrupted when a signal was received.
void throw_if_interrupted();

// The registry of live child process groups, by the pid of their leader (every child kwb starts leads a group of
// its own). Fixed size, lock-free, no allocation: the signal handler reads it. Register right after the spawn,
// unregister before reaping the leader (a zombie's pid, and so its group's id, cannot be reused). A group registered
// after an interruption is killed at once (the caller's wait sees it die). False when the registry is full: the
// caller kills and reaps the child and gives up.
bool register_child_group(pid_t leader) noexcept;
void unregister_child_group(pid_t leader) noexcept;

// Throws InternalError unless called on the main thread: PR_SET_PDEATHSIG fires when the thread that spawned a
// child exits, so children are spawned only on the thread that lives as long as kwb.
void require_main_thread(const char* what);

}  // namespace kwb
