// The timing lock: one timing stage at a time on a machine (docs/timing.md, "The timing lock"). Two optimization
// loops that time on one machine at once each measure the other's load: every figure of both is wrong, and nothing
// in either run says so. Every kwb process takes this lock around its timed phase (compare's and validate's A/A and
// A/B comparisons) and waits for it, saying so, when another holds it; checks, builds and profiles do not take it.
//
// The lock is flock(2) on one file (KWB_TIMING_LOCK, else /run/lock/kwb-timing.lock, else in the temporary
// folder). The kernel releases it when the holder's descriptor closes, so a kwb that dies (even by SIGKILL) never
// leaves it held; the descriptor is close-on-exec, so no worker inherits it. While it holds the lock, kwb writes
// who it is into the file (pid, what it times, since when) for the waiting message of the next one.
#pragma once

#include "util/fd.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace kwb {

// Where the lock lives: $KWB_TIMING_LOCK when set, else /run/lock/kwb-timing.lock when /run/lock exists, else
// kwb-timing.lock in the temporary folder.
std::filesystem::path timing_lock_path();

// What one timing stage's hold of the lock was, for the record (compare.json's "timing_lock").
struct TimingLockRecord {
  std::string path;
  double waited_s = 0.0;             // from the first attempt to holding it
  std::string waited_for;            // who held it when kwb began to wait ("" when it was free)
  int64_t acquired_unix_ns = 0;      // CLOCK_REALTIME, so that the holds of separate processes can be compared
  int64_t released_unix_ns = 0;      // 0 while held
};

class TimingLock {
public:
  // Called when kwb must wait: first at once, then every `reminder` seconds, with who holds the lock.
  using WaitNotice = std::function<void(const std::string& holder, double waited_s)>;

  // Blocks until this process holds the lock at `path`. `what` says what will be timed ("kwb compare: rmsnorm
  // A/B"); it is written into the file for whoever waits next. An interruption (util/interrupt.h) while waiting
  // throws Interrupted. A lock file that cannot be opened or locked is Error(unavailable), naming the file and
  // KWB_TIMING_LOCK.
  static TimingLock acquire(const std::filesystem::path& path, const std::string& what, const WaitNotice& notice = {},
                            double reminder_s = 30.0);

  TimingLock(TimingLock&&) noexcept = default;
  TimingLock& operator=(TimingLock&&) noexcept = default;
  TimingLock(const TimingLock&) = delete;
  TimingLock& operator=(const TimingLock&) = delete;
  ~TimingLock() { release(); }

  // Releases the lock (the holder note is cleared first); the record's released time is set. Idempotent.
  void release();
  const TimingLockRecord& record() const { return m_record; }

private:
  TimingLock() = default;
  UniqueFd m_fd;
  TimingLockRecord m_record;
};

int64_t unix_now_ns();

}  // namespace kwb
