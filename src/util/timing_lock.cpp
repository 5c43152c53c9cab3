#include "util/timing_lock.h"

#include "util/error.h"
#include "util/interrupt.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

namespace kwb {

namespace {

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

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what, int err) {
  throw Error(ExitCode::io_error,
              fmt::format("timing lock {}: {}: {} (every kwb on this machine takes this lock around its timing; "
                          "set KWB_TIMING_LOCK to a file all of them can open, or fix the file's owner and mode)",
                          path.string(), what, std::strerror(err)));
}

constexpr const char* k_no_note = "another process (it left no note)";

// Tickets are byte offsets of the queue file, from 1 up to this (exclusive): far beyond any queue, and no range
// below it overflows an off_t.
constexpr off_t k_ticket_end = off_t{1} << 62;

struct flock byte_range(short type, off_t from, off_t to) {
  struct flock f {};
  f.l_type = type;
  f.l_whence = SEEK_SET;
  f.l_start = from;
  f.l_len = to - from;
  return f;
}

// Whether another open file description holds a ticket in [from, to) (this descriptor's own ticket never counts).
bool any_ticket(int fd, const std::filesystem::path& queue, off_t from, off_t to) {
  struct flock f = byte_range(F_WRLCK, from, to);
  if (::fcntl(fd, F_OFD_GETLK, &f) != 0) fail(queue, "cannot read its tickets", errno);
  return f.l_type != F_UNLCK;
}

// The least m in (lo, hi] where `holds` becomes true, for a `holds` false up to some point and true from there on,
// true at hi: bisection, about 62 look-ups over the whole ticket range.
template <typename F>
off_t first_where(off_t lo, off_t hi, F holds) {
  while (hi - lo > 1) {
    const off_t mid = lo + (hi - lo) / 2;
    if (holds(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

// The lowest ticket in [from, to): the least m for which [from, m) holds one, less one.
std::optional<off_t> lowest_ticket(int fd, const std::filesystem::path& queue, off_t from, off_t to) {
  if (from >= to || !any_ticket(fd, queue, from, to)) return std::nullopt;
  return first_where(from, to, [&](off_t m) { return any_ticket(fd, queue, from, m); }) - 1;
}

// The highest ticket held now, 0 when none is: the least m above which none is held, less one.
off_t highest_ticket(int fd, const std::filesystem::path& queue) {
  if (!any_ticket(fd, queue, 1, k_ticket_end)) return 0;
  return first_where(1, k_ticket_end, [&](off_t m) { return !any_ticket(fd, queue, m, k_ticket_end); }) - 1;
}

// Every ticket in [from, to), lowest first.
std::vector<int64_t> tickets_in(int fd, const std::filesystem::path& queue, off_t from, off_t to) {
  std::vector<int64_t> tickets;
  for (std::optional<off_t> t = lowest_ticket(fd, queue, from, to); t; t = lowest_ticket(fd, queue, *t + 1, to)) {
    tickets.push_back(*t);
  }
  return tickets;
}

int64_t count_tickets(int fd, const std::filesystem::path& queue, off_t from, off_t to) {
  return static_cast<int64_t>(tickets_in(fd, queue, from, to).size());
}

// Opens the lock or the queue file. O_NOFOLLOW: the usual folders are writable by everyone, and a planted symlink
// must not make kwb create or truncate a file elsewhere. flock and read locks need only a read-only descriptor, so
// the file is 0644 and owned by whoever created it: every user's kwb can open and lock it, and no one else, no
// worker above all, can open it for writing (workers run under users of their own when kwb is root,
// util/worker_user.h, and Landlock keeps every worker away from it). A root kwb takes the file over (root's, 0644):
// a file another user made, an older kwb's 0666 one, or one a process of any other user planted first. With
// `note`, the owner gets a descriptor that can write the holder note.
UniqueFd open_lock_file(const std::filesystem::path& path, bool note) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot open it", errno);
  UniqueFd owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, "cannot stat it", errno);
  if (!S_ISREG(st.st_mode)) fail(path, "it is not a regular file", EINVAL);
  // Never through a second name (a hard link planted to another file): only the lock file itself is changed.
  const bool sole_name = st.st_nlink == 1;
  if (sole_name && ::geteuid() == 0 && st.st_uid != 0 && ::fchown(fd, 0, 0) == 0) st.st_uid = 0;
  if (sole_name && st.st_uid == ::geteuid()) {
    if ((st.st_mode & 07777) != 0644) (void)::fchmod(fd, 0644);
    // The note needs a descriptor that can write; the file is this user's, so this one may.
    if (note) {
      const int rw = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC);
      if (rw >= 0) owned.reset(rw);
    }
  }
  return owned;
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

std::filesystem::path timing_lock_queue_path(const std::filesystem::path& lock_path) {
  return lock_path.string() + ".queue";
}

std::vector<int64_t> timing_lock_queue(const std::filesystem::path& lock_path) {
  const std::filesystem::path queue = timing_lock_queue_path(lock_path);
  const UniqueFd fd(::open(queue.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return {};
    fail(queue, "cannot open it", errno);
  }
  return tickets_in(fd.get(), queue, 1, k_ticket_end);
}

TimingLock TimingLock::acquire(const std::filesystem::path& path, const Request& request) {
  TimingLock lock;
  TimingLockRecord& rec = lock.m_record;
  rec.path = path.string();
  lock.m_fd = open_lock_file(path, true);
  const int fd = lock.m_fd.get();

  // The ticket: one past the highest held now. Two arrivals in the same instant may draw the same one; flock still
  // lets only one of them hold the lock, and they are served in either order.
  const std::filesystem::path queue_path = timing_lock_queue_path(path);
  UniqueFd queue = open_lock_file(queue_path, false);
  rec.arrived_unix_ns = unix_now_ns();
  const off_t highest = highest_ticket(queue.get(), queue_path);
  if (highest + 1 >= k_ticket_end) fail(queue_path, "no ticket left below 2^62", EOVERFLOW);
  rec.ticket = highest + 1;
  struct flock mine = byte_range(F_RDLCK, rec.ticket, rec.ticket + 1);
  if (::fcntl(queue.get(), F_OFD_SETLK, &mine) != 0) fail(queue_path, "cannot take a ticket in it", errno);
  rec.waiters_ahead = count_tickets(queue.get(), queue_path, 1, rec.ticket);

  const auto start = std::chrono::steady_clock::now();
  auto waited = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double next_notice = 0.0;
  for (;;) {
    // Only the first live waiter in line tries: a later arrival never takes the lock before an earlier one.
    const bool first_in_line = !lowest_ticket(queue.get(), queue_path, 1, rec.ticket);
    if (first_in_line) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) break;
      if (errno != EWOULDBLOCK && errno != EINTR) fail(path, "cannot lock it", errno);
    }
    // Who holds the lock: the holder's note; nobody between two holders, when only earlier waiters stand ahead.
    std::string holder = read_holder(fd);
    if (holder.empty()) holder = first_in_line ? k_no_note : "nobody at this instant (the waiters ahead go first)";
    if (rec.waited_for.empty()) rec.waited_for = holder;
    const bool timed_out = request.timeout_s && waited() >= *request.timeout_s;
    if ((request.notice && waited() >= next_notice) || timed_out) {
      const TimingLockWait w{holder, waited(),
                             first_in_line ? 0 : count_tickets(queue.get(), queue_path, 1, rec.ticket)};
      if (timed_out) {
        throw Error(
            ExitCode::lock_timeout,
            fmt::format("timing lock {}: gave up after {:.1f} s of waiting (lock timeout {:g} s): it is held "
                        "by {}{} (one timing stage at a time on this machine; wait longer, or try again "
                        "when that run is over)",
                        path.string(), w.waited_s, *request.timeout_s, w.holder,
                        w.waiters_ahead > 0 ? fmt::format(", and {} other kwb {} waiting ahead of this one",
                                                          w.waiters_ahead, w.waiters_ahead == 1 ? "was" : "were")
                                            : ""));
      }
      request.notice(w);
      next_notice = waited() + request.reminder_s;
    }
    throw_if_interrupted();
    std::this_thread::sleep_for(request.retry);
    throw_if_interrupted();
  }
  queue.reset();  // the ticket goes: the next in line is now first
  rec.waited_s = rec.waited_for.empty() ? 0.0 : waited();
  rec.acquired_unix_ns = unix_now_ns();
  const std::string note =
      fmt::format("pid {}: {}, since {}\n", ::getpid(), request.what, clock_time(rec.acquired_unix_ns));
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

std::string clock_time(int64_t unix_ns) {
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace kwb
