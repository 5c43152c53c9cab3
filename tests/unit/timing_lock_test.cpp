// The timing lock (util/timing_lock.h): one holder at a time, a waiter learns who holds it and gets it when it is
// released, the record's times of two holds never overlap, waiters are served in the order they arrived, a waiter or
// holder killed by SIGKILL blocks nothing, a lock timeout names the holder, and a lock file kwb must not use is a
// clear error. flock(2) and OFD record locks belong to open file descriptions, so two acquisitions in one process
// exclude and queue behind each other as two processes would. Nothing here depends on how long anything takes: a
// test waits for a condition (a ticket in the queue, a notice), never for a duration, and its only bounds are
// generous deadlines that fail it instead of hanging.
#include "util/timing_lock.h"
#include "support/temp_dir.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kwb {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

TimingLock::Request request_for(const std::string& what) {
  TimingLock::Request r;
  r.what = what;
  r.retry = 2ms;  // waiters look often: the tests never wait long for a turn
  return r;
}

class TimingLockTest : public ::testing::Test {
protected:
  fs::path lock_file() const { return m_dir / "timing.lock"; }

  const test::TempDir m_dir{"kwb-timing-lock-test"};
};

TEST_F(TimingLockTest, a_free_lock_is_taken_at_once_and_says_who_holds_it) {
  TimingLock lock = TimingLock::acquire(lock_file(), request_for("kwb compare: rmsnorm"));
  EXPECT_EQ(lock.record().waited_s, 0.0);
  EXPECT_TRUE(lock.record().waited_for.empty());
  EXPECT_GT(lock.record().acquired_unix_ns, 0);
  EXPECT_EQ(lock.record().released_unix_ns, 0);
  EXPECT_EQ(lock.record().ticket, 1) << "the first in an empty queue";
  EXPECT_EQ(lock.record().waiters_ahead, 0);
  EXPECT_GT(lock.record().arrived_unix_ns, 0);
  EXPECT_LE(lock.record().arrived_unix_ns, lock.record().acquired_unix_ns);
  EXPECT_TRUE(timing_lock_queue(lock_file()).empty()) << "the holder keeps no ticket";
  std::ifstream in(lock_file());
  std::string note((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(note.find("pid " + std::to_string(::getpid()) + ": kwb compare: rmsnorm, since "), std::string::npos)
      << note;
  lock.release();
  EXPECT_GE(lock.record().released_unix_ns, lock.record().acquired_unix_ns);
  std::ifstream again(lock_file());
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()), "")
      << "the holder note is cleared on release";
}

// The second acquisition waits while the first holds the lock, is told who holds it, and gets the lock only after
// the first has released it: the holds do not overlap.
TEST_F(TimingLockTest, a_second_taker_waits_is_told_the_holder_and_never_overlaps_the_first) {
  auto first = std::make_unique<TimingLock>(TimingLock::acquire(lock_file(), request_for("first loop")));
  std::promise<std::string> told;
  std::atomic<int> notices{0};
  auto second = std::async(std::launch::async, [&] {
    TimingLock::Request r = request_for("second loop");
    r.notice = [&](const TimingLockWait& w) {
      if (notices++ == 0) told.set_value(w.holder);
    };
    r.reminder_s = 0.0;
    return TimingLock::acquire(lock_file(), r);
  });
  // The waiter has seen the lock held (its notice came) before the first releases: no sleep decides this.
  const std::string holder = told.get_future().get();
  EXPECT_NE(holder.find("first loop"), std::string::npos) << holder;
  EXPECT_NE(holder.find("pid " + std::to_string(::getpid())), std::string::npos) << holder;
  first->release();
  const TimingLockRecord first_hold = first->record();
  TimingLock got = second.get();
  EXPECT_GT(notices.load(), 0);
  EXPECT_NE(got.record().waited_for.find("first loop"), std::string::npos) << got.record().waited_for;
  EXPECT_GT(got.record().waited_s, 0.0);
  EXPECT_GE(got.record().acquired_unix_ns, first_hold.released_unix_ns);
}

TEST_F(TimingLockTest, the_lock_is_released_when_its_holder_goes_away) {
  { TimingLock lock = TimingLock::acquire(lock_file(), request_for("short-lived")); }
  TimingLock next = TimingLock::acquire(lock_file(), request_for("next"));
  EXPECT_EQ(next.record().waited_s, 0.0);
}

// The usual folders are writable by everyone: a symlink planted at the lock's name is refused, never followed.
TEST_F(TimingLockTest, a_symlink_at_the_locks_name_is_an_io_error_naming_the_file_and_the_override) {
  const fs::path target = m_dir / "victim";
  { std::ofstream(target) << "keep me"; }
  fs::create_symlink(target, lock_file());
  try {
    TimingLock::acquire(lock_file(), request_for("x"));
    FAIL() << "a symlinked lock file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::io_error);
    const std::string what = e.what();
    EXPECT_NE(what.find(lock_file().string()), std::string::npos) << what;
    EXPECT_NE(what.find("KWB_TIMING_LOCK"), std::string::npos) << what;
  }
  std::ifstream in(target);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "keep me");
}

// No worker may open the lock for writing (docs/threat-model.md): the file is 0644 and its creator's, and a file an
// older kwb left 0666 is narrowed. flock on the read-only descriptor still excludes a second taker.
TEST_F(TimingLockTest, the_lock_file_is_writable_only_by_its_owner) {
  { std::ofstream(lock_file()) << ""; }
  fs::permissions(lock_file(), fs::perms::all & ~fs::perms::owner_exec & ~fs::perms::group_exec &
                                   ~fs::perms::others_exec);  // 0666, as an older kwb made it
  TimingLock lock = TimingLock::acquire(lock_file(), request_for("narrowing"));
  struct stat st {};
  ASSERT_EQ(::stat(lock_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  lock.release();
  fs::remove(lock_file());
  TimingLock fresh = TimingLock::acquire(lock_file(), request_for("fresh"));
  ASSERT_EQ(::stat(lock_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

// A hard link planted at the lock's name is locked through but never changed: its mode and owner stay.
TEST_F(TimingLockTest, a_hard_link_at_the_locks_name_keeps_its_mode) {
  const fs::path target = m_dir / "victim";
  { std::ofstream(target) << "keep me"; }
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write);  // 0600
  fs::create_hard_link(target, lock_file());
  { TimingLock lock = TimingLock::acquire(lock_file(), request_for("x")); }
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  std::ifstream in(target);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "keep me");
}

// ---- the queue: first come, first served, and nothing a dead process can block ---------------------------------

// What a waiter in a child process reports through a pipe the moment it holds the lock (one write, under
// PIPE_BUF, so the reports of several children never interleave; they come in the order the lock was held).
struct Served {
  int index = -1;
  int64_t ticket = 0;
  int64_t waiters_ahead = 0;
  int64_t arrived_unix_ns = 0;
  int64_t acquired_unix_ns = 0;
};

// Forks a process that queues for the lock, reports when it holds it, releases it and exits 0 (3 on an error).
pid_t spawn_waiter(const fs::path& lock, int index, int report_fd) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  try {
    TimingLock l = TimingLock::acquire(lock, request_for("waiter " + std::to_string(index)));
    const Served s{index, l.record().ticket, l.record().waiters_ahead, l.record().arrived_unix_ns,
                   l.record().acquired_unix_ns};
    if (::write(report_fd, &s, sizeof s) != static_cast<ssize_t>(sizeof s)) ::_exit(4);
    l.release();
    ::_exit(0);
  } catch (...) {
    ::_exit(3);
  }
}

// Forks a process that takes the lock, says so through the pipe, and holds it until it is killed.
pid_t spawn_holder(const fs::path& lock, int ready_fd) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  try {
    TimingLock l = TimingLock::acquire(lock, request_for("a holder that will be killed"));
    const char c = 'h';
    if (::write(ready_fd, &c, 1) != 1) ::_exit(4);
    for (;;) ::pause();
  } catch (...) {
    ::_exit(3);
  }
}

// Whether `cond` becomes true within a deadline far beyond what it needs on a loaded machine.
template <typename F>
bool eventually(F cond) {
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Reads one Served report, or none when every writer has gone without one (or the deadline passed).
std::optional<Served> next_report(int fd) {
  Served s;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 120'000) != 1) return std::nullopt;
  if (::read(fd, &s, sizeof s) != static_cast<ssize_t>(sizeof s)) return std::nullopt;
  return s;
}

int exit_status(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Pipe {
  Pipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  void close_write() { ::close(std::exchange(fds[1], -1)); }
  int fds[2] = {-1, -1};
};

// Four processes queue one after the other behind a holder; each arrives only when the one before it has its
// ticket. flock alone would hand the lock to whichever retried first after each release; the queue serves them in
// the order they came, and each knew at arrival how many were ahead of it.
TEST_F(TimingLockTest, waiters_are_served_in_the_order_they_arrived) {
  auto holder = std::make_unique<TimingLock>(TimingLock::acquire(lock_file(), request_for("the test")));
  Pipe reports;
  constexpr int k_waiters = 4;
  std::vector<pid_t> pids;
  for (int i = 0; i < k_waiters; ++i) {
    pids.push_back(spawn_waiter(lock_file(), i, reports.fds[1]));
    ASSERT_GT(pids.back(), 0);
    ASSERT_TRUE(eventually([&] { return timing_lock_queue(lock_file()).size() == static_cast<size_t>(i + 1); }))
        << "waiter " << i << " never took a ticket";
  }
  reports.close_write();
  const std::vector<int64_t> queue = timing_lock_queue(lock_file());
  EXPECT_TRUE(std::is_sorted(queue.begin(), queue.end()));
  holder->release();
  int64_t last_acquired = holder->record().released_unix_ns;
  for (int i = 0; i < k_waiters; ++i) {
    const std::optional<Served> s = next_report(reports.fds[0]);
    ASSERT_TRUE(s.has_value()) << "no report from the waiter served " << i << "th";
    EXPECT_EQ(s->index, i) << "served out of arrival order";
    EXPECT_EQ(s->ticket, queue[static_cast<size_t>(i)]);
    EXPECT_EQ(s->waiters_ahead, i);
    EXPECT_GE(s->acquired_unix_ns, last_acquired);
    last_acquired = s->acquired_unix_ns;
  }
  for (pid_t pid : pids) EXPECT_EQ(exit_status(pid), 0);
  EXPECT_TRUE(timing_lock_queue(lock_file()).empty());
}

// A waiter killed by SIGKILL (no destructor, no cleanup) leaves no ticket: the one behind it is served next.
TEST_F(TimingLockTest, a_waiter_killed_by_sigkill_does_not_block_the_queue) {
  auto holder = std::make_unique<TimingLock>(TimingLock::acquire(lock_file(), request_for("the test")));
  Pipe reports;
  const pid_t doomed = spawn_waiter(lock_file(), 0, reports.fds[1]);
  ASSERT_TRUE(eventually([&] { return timing_lock_queue(lock_file()).size() == 1; }));
  const pid_t next = spawn_waiter(lock_file(), 1, reports.fds[1]);
  ASSERT_TRUE(eventually([&] { return timing_lock_queue(lock_file()).size() == 2; }));
  reports.close_write();
  ASSERT_EQ(::kill(doomed, SIGKILL), 0);
  EXPECT_EQ(exit_status(doomed), 128 + SIGKILL);
  EXPECT_EQ(timing_lock_queue(lock_file()).size(), 1u) << "the killed waiter's ticket went with it";
  holder->release();
  const std::optional<Served> s = next_report(reports.fds[0]);
  ASSERT_TRUE(s.has_value()) << "the waiter behind a killed one was never served";
  EXPECT_EQ(s->index, 1);
  EXPECT_EQ(s->waiters_ahead, 1) << "it arrived behind the one that was killed";
  EXPECT_EQ(exit_status(next), 0);
}

// A holder killed by SIGKILL never releases anything itself: the kernel drops its flock, and the waiter is served.
TEST_F(TimingLockTest, a_holder_killed_by_sigkill_does_not_block_the_queue) {
  Pipe ready, reports;
  const pid_t holder = spawn_holder(lock_file(), ready.fds[1]);
  ready.close_write();
  char c = 0;
  ASSERT_EQ(::read(ready.fds[0], &c, 1), 1) << "the holder never took the lock";
  const pid_t waiter = spawn_waiter(lock_file(), 0, reports.fds[1]);
  reports.close_write();
  ASSERT_TRUE(eventually([&] { return timing_lock_queue(lock_file()).size() == 1; }));
  ASSERT_EQ(::kill(holder, SIGKILL), 0);
  EXPECT_EQ(exit_status(holder), 128 + SIGKILL);
  const std::optional<Served> s = next_report(reports.fds[0]);
  ASSERT_TRUE(s.has_value()) << "the waiter behind a killed holder was never served";
  EXPECT_EQ(exit_status(waiter), 0);
  // And the lock is free again for whoever comes next.
  TimingLock after = TimingLock::acquire(lock_file(), request_for("after"));
  EXPECT_EQ(after.record().waited_s, 0.0);
  EXPECT_TRUE(after.record().waited_for.empty());
}

// A zero timeout gives up at the first look: a lock timeout error (exit 75) naming the holder, since when it holds
// the lock, and the waiter ahead; the timed-out waiter's ticket goes with it.
TEST_F(TimingLockTest, the_lock_timeout_gives_up_naming_the_holder_since_when_and_the_queue) {
  auto holder = std::make_unique<TimingLock>(TimingLock::acquire(lock_file(), request_for("kwb validate: the holder")));
  auto ahead = std::async(std::launch::async, [&] { return TimingLock::acquire(lock_file(), request_for("ahead")); });
  ASSERT_TRUE(eventually([&] { return timing_lock_queue(lock_file()).size() == 1; }));
  TimingLock::Request r = request_for("impatient");
  r.timeout_s = 0.0;
  try {
    TimingLock::acquire(lock_file(), r);
    ADD_FAILURE() << "a busy lock was taken or waited for past its timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::lock_timeout);
    EXPECT_EQ(static_cast<int>(e.code()), 75);
    const std::string what = e.what();
    EXPECT_NE(what.find(lock_file().string()), std::string::npos) << what;
    EXPECT_NE(what.find("pid " + std::to_string(::getpid()) + ": kwb validate: the holder, since 20"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("1 other kwb was waiting ahead"), std::string::npos) << what;
  }
  EXPECT_EQ(timing_lock_queue(lock_file()).size(), 1u) << "the timed-out waiter's ticket went with it";
  holder->release();
  EXPECT_EQ(ahead.get().record().waiters_ahead, 0);
}

// A positive timeout waits at least that long, telling the notice meanwhile, before it gives up.
TEST_F(TimingLockTest, a_positive_lock_timeout_waits_that_long_then_gives_up) {
  TimingLock holder = TimingLock::acquire(lock_file(), request_for("the holder"));
  TimingLock::Request r = request_for("patient");
  r.timeout_s = 0.05;
  std::vector<TimingLockWait> told;
  r.notice = [&](const TimingLockWait& w) { told.push_back(w); };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(TimingLock::acquire(lock_file(), r), Error);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
  ASSERT_FALSE(told.empty());
  EXPECT_NE(told.front().holder.find("the holder"), std::string::npos) << told.front().holder;
  EXPECT_EQ(told.front().waiters_ahead, 0);
}

// The queue file is opened like the lock: a symlink at its name is refused, never followed.
TEST_F(TimingLockTest, a_symlink_at_the_queues_name_is_an_io_error_naming_it) {
  const fs::path target = m_dir / "victim";
  { std::ofstream(target) << "keep me"; }
  fs::create_symlink(target, timing_lock_queue_path(lock_file()));
  try {
    TimingLock::acquire(lock_file(), request_for("x"));
    FAIL() << "a symlinked queue file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::io_error);
    EXPECT_NE(std::string(e.what()).find(timing_lock_queue_path(lock_file()).string()), std::string::npos) << e.what();
  }
}

TEST_F(TimingLockTest, the_path_comes_from_kwb_timing_lock_when_set) {
  ::setenv("KWB_TIMING_LOCK", lock_file().c_str(), 1);
  EXPECT_EQ(timing_lock_path(), lock_file());
  ::unsetenv("KWB_TIMING_LOCK");
  EXPECT_NE(timing_lock_path(), lock_file());
  EXPECT_EQ(timing_lock_path().filename(), "kwb-timing.lock");
}

}  // namespace
}  // namespace kwb
