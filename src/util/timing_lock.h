// The timing lock: one timing stage at a time on a machine (docs/timing.md, "The timing lock"). Two optimization
// loops that time on one machine at once each measure the other's load: every figure of both is wrong, and nothing
// in either run says so. Every kwb process takes this lock around its timed phase (compare's and validate's A/A and
// A/B comparisons) and waits for it, saying so, when another holds it; checks, builds and profiles do not take it.
//
// The lock is flock(2) on one file (KWB_TIMING_LOCK, else /run/lock/kwb-timing.lock, else in the temporary
// folder). The kernel releases it when the holder's descriptor closes, so a kwb that dies (even by SIGKILL) never
// leaves it held; the descriptor is close-on-exec, so no worker inherits it. While it holds the lock, kwb writes
// who it is into the file (pid, what it times, since when) for the waiting message of the next one.
//
// Waiters are served first come, first served. flock alone is not fair (whoever retries first after a release
// wins), so a waiter first takes a ticket: a read lock (fcntl F_OFD_SETLK) on one byte of a second file, the lock's
// path + ".queue", at the offset one past the highest ticket held now. It takes the lock only when no byte below
// its own is locked, that is when no live waiter arrived before it, and drops its ticket once it holds the lock.
// Record locks, like flock, belong to an open file description and go with it: a waiter that dies, by SIGKILL too,
// leaves no ticket behind, and nothing ever has to be cleaned up. Read locks need only a read-only descriptor, so
// every user's kwb queues in the same file.
#pragma once

#include "util/fd.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

// Where the lock lives: $KWB_TIMING_LOCK when set, else /run/lock/kwb-timing.lock when /run/lock exists, else
// kwb-timing.lock in the temporary folder.
std::filesystem::path timing_lock_path();
// Where its waiters queue: the lock's path + ".queue".
std::filesystem::path timing_lock_queue_path(const std::filesystem::path& lock_path);
// The tickets of the processes waiting for the lock at `lock_path` now, in the order they will be served (the
// holder has none). An absent queue file is an empty queue.
std::vector<int64_t> timing_lock_queue(const std::filesystem::path& lock_path);

// What one timing stage's hold of the lock was, for the record (compare.json's "timing_lock").
struct TimingLockRecord {
  std::string path;
  int64_t arrived_unix_ns = 0;   // when it took its ticket (CLOCK_REALTIME, comparable across processes)
  int64_t ticket = 0;            // its place in the queue: a later arrival among live waiters has a higher one
  int64_t waiters_ahead = 0;     // live waiters that arrived before it (the holder not counted)
  double waited_s = 0.0;         // from the first attempt to holding it
  std::string waited_for;        // who held it when kwb began to wait ("" when it was free)
  int64_t acquired_unix_ns = 0;  // CLOCK_REALTIME, so that the holds of separate processes can be compared
  int64_t released_unix_ns = 0;  // 0 while held
};

// What a waiting kwb is told: at once, then every reminder.
struct TimingLockWait {
  std::string holder;  // the holder's note: "pid 1650: kwb compare: rmsnorm ..., since 2026-...Z"
  double waited_s = 0.0;
  int64_t waiters_ahead = 0;  // live waiters to be served before this one, after the holder
};

class TimingLock {
public:
  using WaitNotice = std::function<void(const TimingLockWait&)>;

  struct Request {
    std::string what;   // what will be timed ("kwb compare: rmsnorm A/B"), for whoever waits next
    WaitNotice notice;  // called when kwb must wait: at once, then every reminder_s seconds
    double reminder_s = 30.0;
    std::optional<double> timeout_s;  // give up after this long (Error lock_timeout); none: wait as long as it takes
    std::chrono::milliseconds retry{100};  // how often a waiter looks again: short against any timing stage
  };

  // Blocks until this process holds the lock at `path`, after every live waiter that arrived before it. An
  // interruption (util/interrupt.h) while waiting throws Interrupted. Past request.timeout_s it throws
  // Error(lock_timeout), naming the holder, since when it holds the lock, and the waiters ahead. A lock or queue
  // file that cannot be opened or locked is Error(io_error), naming the file and KWB_TIMING_LOCK.
  static TimingLock acquire(const std::filesystem::path& path, const Request& request);

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

// A Unix time in nanoseconds as UTC, ISO 8601 to the second ("2026-12-02T10:15:21Z").
std::string clock_time(int64_t unix_ns);

}  // namespace kwb
