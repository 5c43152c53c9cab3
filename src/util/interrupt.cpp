#include "util/interrupt.h"

#include "util/error.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace kwb {

namespace {

// A few workers and helpers live at once (compare keeps one worker per arm); the rest is margin.
constexpr int k_slots = 128;

std::atomic<int> g_signal{0};
std::atomic<pid_t> g_groups[k_slots];

static_assert(std::atomic<int>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free,
              "the signal handler reads these");

constexpr int k_interrupting[] = {SIGINT, SIGTERM, SIGHUP};

void kill_registered_groups() noexcept {
  for (auto& slot : g_groups) {
    const pid_t leader = slot.load(std::memory_order_acquire);
    if (leader > 0) ::kill(-leader, SIGKILL);
  }
}

// Only async-signal-safe work: atomics and kill(2). A repeated signal (timeout(1) signals its child and then its
// whole process group, so kwb may see SIGTERM twice) forwards again and changes nothing else: the main thread
// finishes recording the interruption either way.
extern "C" void on_interrupt(int sig) {
  const int saved_errno = errno;
  int none = 0;
  g_signal.compare_exchange_strong(none, sig, std::memory_order_acq_rel);
  kill_registered_groups();
  errno = saved_errno;
}

}  // namespace

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGKILL:
      return "SIGKILL";
    default:
      return fmt::format("signal {}", signal);
  }
}

std::string Interrupted::signal_name() const { return kwb::signal_name(m_signal); }

std::string Interrupted::what() const { return "kwb was interrupted by " + signal_name(); }

void install_interrupt_handlers() {
  for (const int sig : k_interrupting) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0) continue;
    // A signal whoever started kwb chose to ignore (nohup, a background job's SIGINT) stays ignored.
    if (current.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    for (const int other : k_interrupting) sigaddset(&sa.sa_mask, other);
    // Restarted calls keep ordinary I/O unaffected; the waits that matter (poll, futex) return early anyway and
    // then find their child gone.
    sa.sa_flags = SA_RESTART;
    if (::sigaction(sig, &sa, nullptr) != 0) throw_system_error("sigaction", __FILE__, __LINE__, errno);
  }
}

int interrupt_signal() noexcept { return g_signal.load(std::memory_order_acquire); }

void throw_if_interrupted() {
  if (const int sig = interrupt_signal(); sig != 0) throw Interrupted(sig);
}

bool register_child_group(pid_t leader) noexcept {
  for (auto& slot : g_groups) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, leader, std::memory_order_acq_rel)) {
      // A signal that arrived between the spawn and this registration did not reach the new group: end it now, and
      // the caller's wait sees it die.
      if (interrupt_signal() != 0) ::kill(-leader, SIGKILL);
      return true;
    }
  }
  return false;
}

void unregister_child_group(pid_t leader) noexcept {
  if (leader <= 0) return;
  for (auto& slot : g_groups) {
    pid_t expected = leader;
    if (slot.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) return;
  }
}

void require_main_thread(const char* what) {
  if (::gettid() != ::getpid()) {
    throw InternalError(
        fmt::format("{} must be started on kwb's main thread (its PR_SET_PDEATHSIG follows the "
                    "thread that starts it)",
                    what));
  }
}

}  // namespace kwb
