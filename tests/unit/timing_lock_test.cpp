// The timing lock (util/timing_lock.h): one holder at a time, a waiter learns who holds it and gets it when it is
// released, the record's times of two holds never overlap, and a lock file kwb must not use is a clear error.
// flock(2) locks belong to open file descriptions, so two acquisitions in one process exclude each other as two
// processes would; nothing here depends on how long anything takes.
#include "util/error.h"
#include "util/timing_lock.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

namespace kwb {
namespace {

namespace fs = std::filesystem;

class TimingLockTest : public ::testing::Test {
protected:
  fs::path lock_file() const { return m_dir / "timing.lock"; }

  const test::TempDir m_dir{"kwb-timing-lock-test"};
};

TEST_F(TimingLockTest, a_free_lock_is_taken_at_once_and_says_who_holds_it) {
  TimingLock lock = TimingLock::acquire(lock_file(), "kwb compare: rmsnorm");
  EXPECT_EQ(lock.record().waited_s, 0.0);
  EXPECT_TRUE(lock.record().waited_for.empty());
  EXPECT_GT(lock.record().acquired_unix_ns, 0);
  EXPECT_EQ(lock.record().released_unix_ns, 0);
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
  auto first = std::make_unique<TimingLock>(TimingLock::acquire(lock_file(), "first loop"));
  std::promise<std::string> told;
  std::atomic<int> notices{0};
  auto second = std::async(std::launch::async, [&] {
    return TimingLock::acquire(
        lock_file(), "second loop",
        [&](const std::string& holder, double) {
          if (notices++ == 0) told.set_value(holder);
        },
        0.0);
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
  { TimingLock lock = TimingLock::acquire(lock_file(), "short-lived"); }
  TimingLock next = TimingLock::acquire(lock_file(), "next");
  EXPECT_EQ(next.record().waited_s, 0.0);
}

// The usual folders are writable by everyone: a symlink planted at the lock's name is refused, never followed.
TEST_F(TimingLockTest, a_symlink_at_the_locks_name_is_an_io_error_naming_the_file_and_the_override) {
  const fs::path target = m_dir / "victim";
  { std::ofstream(target) << "keep me"; }
  fs::create_symlink(target, lock_file());
  try {
    TimingLock::acquire(lock_file(), "x");
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
  TimingLock lock = TimingLock::acquire(lock_file(), "narrowing");
  struct stat st {};
  ASSERT_EQ(::stat(lock_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  lock.release();
  fs::remove(lock_file());
  TimingLock fresh = TimingLock::acquire(lock_file(), "fresh");
  ASSERT_EQ(::stat(lock_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

// A hard link planted at the lock's name is locked through but never changed: its mode and owner stay.
TEST_F(TimingLockTest, a_hard_link_at_the_locks_name_keeps_its_mode) {
  const fs::path target = m_dir / "victim";
  { std::ofstream(target) << "keep me"; }
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write);  // 0600
  fs::create_hard_link(target, lock_file());
  { TimingLock lock = TimingLock::acquire(lock_file(), "x"); }
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  std::ifstream in(target);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "keep me");
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
