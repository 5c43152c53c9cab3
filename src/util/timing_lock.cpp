#include "util/timing_lock.h"

#include "util/error.h"
#include "util/interrupt.h"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace kwb {

namespace {

// How often a waiting kwb tries again. Short against any timing stage (tens of seconds), long against a system
// call.
constexpr std::chrono::milliseconds k_retry{100};

// Who holds the lock, as the holder wrote it; "" when nothing readable is there.
std::string read_holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  // The note is another process's text: keep it printable.
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f) c = ' ';
  }
  return s;
}

std::string clock_time(int64_t unix_ns) {
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what, int err) {
  throw Error(ExitCode::io_error,
              fmt::format("timing lock {}: {}: {} (every kwb on this machine takes this lock around its timing; "
                          "set KWB_TIMING_LOCK to a file all of them can open, or fix the file's owner and mode)",
                          path.string(), what, std::strerror(err)));
}

}  // namespace

int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::filesystem::path timing_lock_path() {
  if (const char* env = std::getenv("KWB_TIMING_LOCK"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  if (std::filesystem::is_directory("/run/lock", ec)) return "/run/lock/kwb-timing.lock";
  return std::filesystem::temp_directory_path(ec) / "kwb-timing.lock";
}

TimingLock TimingLock::acquire(const std::filesystem::path& path, const std::string& what, const WaitNotice& notice,
                               double reminder_s) {
  TimingLock lock;
  lock.m_record.path = path.string();
  // O_NOFOLLOW: the usual folders are writable by everyone, and a planted symlink must not make kwb create or
  // truncate a file elsewhere. flock needs only a read-only descriptor, so the file is 0644 and owned by whoever
  // created it: every user's kwb can open and lock it, and no one else, no worker above all, can open it for writing
  // (workers run under users of their own when kwb is root, util/worker_user.h, and Landlock keeps every worker
  // away from it). A root kwb takes the file over (root's, 0644): a file another user made, an older kwb's 0666 one,
  // or one a process of any other user planted first. Only the owner writes the holder note.
  int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot open it", errno);
  lock.m_fd.reset(fd);
  struct stat st{};
  if (::fstat(fd, &st) != 0) fail(path, "cannot stat it", errno);
  if (!S_ISREG(st.st_mode)) fail(path, "it is not a regular file", EINVAL);
  // Never through a second name (a hard link planted to another file): only the lock file itself is changed.
  const bool sole_name = st.st_nlink == 1;
  if (sole_name && ::geteuid() == 0 && st.st_uid != 0 && ::fchown(fd, 0, 0) == 0) st.st_uid = 0;
  if (sole_name && st.st_uid == ::geteuid()) {
    if ((st.st_mode & 07777) != 0644) (void)::fchmod(fd, 0644);
    // The note needs a descriptor that can write; the file is this user's, so this one may.
    const int rw = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC);
    if (rw >= 0) {
      lock.m_fd.reset(rw);
      fd = rw;
    }
  }

  const auto start = std::chrono::steady_clock::now();
  auto waited = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double next_notice = 0.0;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) break;
    if (errno != EWOULDBLOCK && errno != EINTR) fail(path, "cannot lock it", errno);
    if (lock.m_record.waited_for.empty()) {
      lock.m_record.waited_for = read_holder(fd);
      if (lock.m_record.waited_for.empty()) lock.m_record.waited_for = "another process (it left no note)";
    }
    if (notice && waited() >= next_notice) {
      notice(read_holder(fd).empty() ? lock.m_record.waited_for : read_holder(fd), waited());
      next_notice = waited() + reminder_s;
    }
    throw_if_interrupted();
    std::this_thread::sleep_for(k_retry);
    throw_if_interrupted();
  }
  lock.m_record.waited_s = lock.m_record.waited_for.empty() ? 0.0 : waited();
  lock.m_record.acquired_unix_ns = unix_now_ns();
  const std::string note = fmt::format("pid {}: {}, since {}\n", ::getpid(), what,
                                       clock_time(lock.m_record.acquired_unix_ns));
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, note.data(), note.size(), 0);
  return lock;
}

void TimingLock::release() {
  if (!m_fd.valid()) return;
  (void)!::ftruncate(m_fd.get(), 0);
  m_record.released_unix_ns = unix_now_ns();
  (void)::flock(m_fd.get(), LOCK_UN);
  m_fd.reset();
}

}  // namespace kwb
