#include "experiment/generator_sandbox.h"

#include "builder/build_sandbox.h"
#include "experiment/generator_syscalls.h"
#include "util/error.h"
#include "util/fd.h"
#include "util/interrupt.h"
#include "util/paths.h"
#include "util/subprocess.h"
#include "util/worker_user.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

namespace kwb {

namespace fs = std::filesystem;

namespace {

constexpr const char* k_generator_path = "/usr/local/bin:/usr/bin:/bin";
constexpr std::size_t k_max_violations = 100;
constexpr std::size_t k_max_dropped_tracked = 65536;
// How long kwb waits, after the sandbox's root process is reaped, for the last of its processes to be gone (the
// kernel kills them as the PID namespace ends; this is milliseconds, the bound is for a machine under load).
constexpr auto k_teardown_grace = std::chrono::seconds(5);

// Files the system's libraries look for on the generator's behalf, absent inside (no /etc but the loader's cache):
// the loader's preload list, the time zone, the name service's configuration and databases (a uid's name),
// libselinux's configuration (coreutils' ls). Counting them would charge every arm for using a C library; reading
// them reads nothing.
constexpr const char* k_libc_probes[] = {"/etc/ld.so.preload", "/etc/localtime", "/etc/nsswitch.conf",
                                         "/etc/passwd",        "/etc/group",     "/etc/selinux/config"};

// Absolute and lexically normal, without a trailing separator ("/a/b/" is "/a/b").
fs::path normal_path(const fs::path& p) {
  fs::path n = p.lexically_normal();
  if (n.has_relative_path() && n.filename().empty()) n = n.parent_path();
  return n;
}

// PATH lookup on the generator's fixed PATH (the host's files under the system roots are the sandbox's); a name
// with a '/' is taken relative to the generator's working folder. "" when not found.
std::string resolve_program(const std::string& name, const fs::path& cwd) {
  if (name.find('/') != std::string::npos) return normal_path(cwd / name).string();
  std::string_view rest = k_generator_path;
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const fs::path candidate = fs::path(rest.substr(0, colon)) / name;
    std::error_code ec;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate, ec)) return candidate.string();
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return "";
}

// What the generator sees, by absolute path inside: the binds, at the same paths as outside, and the sandbox's own
// fresh /tmp. A bind below /tmp (a writable folder in /tmp/kwb-XXXX/arm/out) has folders above it inside /tmp that
// bwrap made empty (/tmp/kwb-XXXX, /tmp/kwb-XXXX/arm): a path below those that is not within a bind names the host's
// file beside the bind (/tmp/kwb-XXXX/arm/secret), which the generator must not reach, so it is not the fresh /tmp.
class View {
public:
  void bind(const fs::path& root) { m_binds.push_back(normal_path(root)); }
  void fresh(const fs::path& root) { m_fresh.push_back(normal_path(root)); }
  bool contains(const fs::path& p) const {
    if (std::any_of(m_binds.begin(), m_binds.end(), [&](const fs::path& b) { return path_is_within(p, b); })) {
      return true;
    }
    return std::any_of(m_fresh.begin(), m_fresh.end(), [&](const fs::path& f) {
      return path_is_within(p, f) && !std::any_of(m_binds.begin(), m_binds.end(), [&](const fs::path& b) {
               // p below a folder that lies strictly between f and a bind
               return b != f && path_is_within(b, f) && shares_folder_below(p, b, f);
             });
    });
  }
  // `p` is a folder above something bound (/, /work when /work/x is bound): inside, an empty folder bwrap made.
  bool is_above(const fs::path& p) const {
    return std::any_of(m_binds.begin(), m_binds.end(), [&](const fs::path& r) { return path_is_within(r, p); }) ||
           std::any_of(m_fresh.begin(), m_fresh.end(), [&](const fs::path& r) { return path_is_within(r, p); });
  }

private:
  // Whether p and b (both within f) share at least the first folder below f, and that folder is b's ancestor, not b.
  static bool shares_folder_below(const fs::path& p, const fs::path& b, const fs::path& f) {
    const fs::path p_rel = p.lexically_relative(f), b_rel = b.lexically_relative(f);
    if (std::distance(b_rel.begin(), b_rel.end()) < 2) return false;  // b directly in f: no folder between
    return *p_rel.begin() == *b_rel.begin();
  }
  std::vector<fs::path> m_binds;
  std::vector<fs::path> m_fresh;
};

// ---- the writable folder's owner ------------------------------------------------------------------------------

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

// What a walk of the writable folder found past its bounds (GeneratorSpec::work_quota_bytes, k_max_work_depth).
struct FolderWalk {
  std::vector<std::string> problems;
  std::uint64_t bytes = 0;
};

// Walks `root` and everything below it, to at most k_max_work_depth folders deep, with one descriptor per level (so
// a tree of any depth costs at most that many), never following a symbolic link: every name is looked at relative to
// its folder's descriptor, and folders are opened O_NOFOLLOW, so nothing outside `root` can be reached. It records
// what is past the folder's bounds: a file with a second name (a hard link), a folder deeper than the bound (not
// descended), more bytes than the quota. With an owner (`uid`), it also makes uid:gid the owner of every entry it
// walks; taking back (`handing_over` false), every entry also loses its write permission for group and others and
// its set-id bits (the kernel drops set-id bits on chown too), so that what the generator left writable by all is not
// left so under kwb's user. Nothing races a walk: the generator's processes are not running yet, or are gone.
FolderWalk walk_tree(const fs::path& root, std::optional<std::pair<uid_t, gid_t>> owner, bool handing_over,
                     std::uint64_t quota_bytes) {
  constexpr mode_t k_stripped = S_IWGRP | S_IWOTH | S_ISUID | S_ISGID;
  const auto fail = [&](const std::string& what, int e) {
    throw Error(
        ExitCode::io_error,
        fmt::format("cannot walk {} (the generator's writable folder){}: {}: {}", root.string(),
                    owner ? fmt::format(" to make uid {} its owner", owner->first) : "", what, std::strerror(e)));
  };
  FolderWalk out;
  const int top = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) fail(root.string(), errno);
  DirPtr first(::fdopendir(top));
  if (!first) {
    const int e = errno;
    ::close(top);
    fail(root.string(), e);
  }
  if (owner) {
    if (::fchown(top, owner->first, owner->second) != 0) fail(root.string(), errno);
    struct stat top_st {};
    if (!handing_over && (::fstat(top, &top_st) != 0 || ::fchmod(top, top_st.st_mode & 07777 & ~k_stripped) != 0)) {
      fail(root.string(), errno);
    }
  }
  struct Frame {
    DirPtr dir;
    fs::path path;
  };
  std::vector<Frame> stack;
  stack.push_back({std::move(first), root});
  bool too_deep = false;
  while (!stack.empty()) {
    DIR* d = stack.back().dir.get();
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      if (errno != 0) fail(stack.back().path.string(), errno);
      stack.pop_back();
      continue;
    }
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const fs::path path = stack.back().path / name;
    const int dfd = ::dirfd(d);
    struct stat st {};
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) fail(path.string(), errno);
    if (S_ISDIR(st.st_mode)) {
      if (static_cast<int>(stack.size()) >= k_max_work_depth) {
        if (!too_deep) {
          out.problems.push_back(
              fmt::format("folders nested deeper than {} levels ({})", k_max_work_depth, path.string()));
        }
        too_deep = true;
        continue;  // not descended: the walk's descriptors stay bounded
      }
      const int sub = ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) fail(path.string(), errno);
      DirPtr subdir(::fdopendir(sub));
      if (!subdir) {
        const int err = errno;
        ::close(sub);
        fail(path.string(), err);
      }
      if (owner) {
        if (::fchown(sub, owner->first, owner->second) != 0) fail(path.string(), errno);
        if (!handing_over && ::fchmod(sub, st.st_mode & 07777 & ~k_stripped) != 0) fail(path.string(), errno);
      }
      stack.push_back({std::move(subdir), path});
      continue;
    }
    if (st.st_nlink > 1) {
      // Handed over, its owner would own the file under its other names too; left in the folder, it would make
      // every later hand-over refuse the folder.
      out.problems.push_back(fmt::format("{} has {} names (a hard link)", path.string(), st.st_nlink));
      continue;  // never chowned
    }
    if (S_ISREG(st.st_mode)) out.bytes += static_cast<std::uint64_t>(st.st_size);
    if (!owner) continue;
    if (::fchownat(dfd, name.c_str(), owner->first, owner->second, AT_SYMLINK_NOFOLLOW) != 0) {
      fail(path.string(), errno);
    }
    // Not a symbolic link (looked at above, and nothing can have replaced it), so fchmodat changes this very entry.
    if (!handing_over && !S_ISLNK(st.st_mode) && (st.st_mode & k_stripped) != 0 &&
        ::fchmodat(dfd, name.c_str(), st.st_mode & 07777 & ~k_stripped, 0) != 0) {
      fail(path.string(), errno);
    }
  }
  if (out.bytes > quota_bytes) {
    out.problems.push_back(
        fmt::format("{} bytes in its files, over the folder's quota of {} bytes", out.bytes, quota_bytes));
  }
  return out;
}

// Empties `root` (kwb's user owns it again, with the mode it had): rm -rf (coreutils, which removes a tree of any
// depth with a bounded number of descriptors and never follows a symbolic link), then the folder made again.
void reset_folder(const fs::path& root) {
  struct stat st {};
  if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error(ExitCode::io_error, fmt::format("cannot reset {} (the generator's writable folder): {}", root.string(),
                                                std::strerror(errno)));
  }
  const CommandResult r =
      run_command({"/bin/rm", "-rf", "--one-file-system", "--", root.string()}, std::chrono::minutes(10));
  std::error_code ec;
  if (r.exit_code != 0 || fs::exists(root, ec) || ::mkdir(root.c_str(), st.st_mode & 07777) != 0 ||
      ::chmod(root.c_str(), st.st_mode & 07777) != 0) {
    throw Error(ExitCode::io_error, fmt::format("cannot reset {} (the generator's writable folder): rm exited {}: {}",
                                                root.string(), r.exit_code, r.output));
  }
}

// A root kwb's generator is another user: bwrap (run as that user) must reach every bind, and that user must read the
// read-only ones. `read` asks for o+r on `p` itself (and o+x when a folder); the folders above need o+x.
void require_reachable_by_others(const fs::path& p, bool read, const std::string& role) {
  fs::path so_far = "/";
  std::vector<fs::path> chain;
  for (const fs::path& part : p.relative_path()) {
    so_far /= part;
    chain.push_back(so_far);
  }
  for (std::size_t i = 0; i + 1 < chain.size(); ++i) {
    struct stat st {};
    if (::stat(chain[i].c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & S_IXOTH) == 0) {
      throw DataError(
          fmt::format("{} ({}): the folder {} above it is not searchable by others (mode {:o}); kwb runs "
                      "generators as a user of their own and cannot bind it: chmod o+x {}",
                      p.string(), role, chain[i].string(), st.st_mode & 07777, chain[i].string()));
    }
  }
  if (!read) return;
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return;  // reported where the spec is checked
  const mode_t need = S_ISDIR(st.st_mode) ? (S_IROTH | S_IXOTH) : S_IROTH;
  if ((st.st_mode & need) != need) {
    throw DataError(
        fmt::format("{} ({}) is not readable by others (mode {:o}); kwb runs generators as a user of "
                    "their own: make it and what is in it readable by all (chmod -R o+rX {})",
                    p.string(), role, st.st_mode & 07777, p.string()));
  }
}

// ---- the supervisor ----------------------------------------------------------------------------------------------

std::string family_name(int family) {
  switch (family) {
    case AF_INET:
      return "AF_INET";
    case AF_INET6:
      return "AF_INET6";
    case AF_PACKET:
      return "AF_PACKET";
    case AF_NETLINK:
      return "AF_NETLINK";
    case AF_BLUETOOTH:
      return "AF_BLUETOOTH";
    case AF_VSOCK:
      return "AF_VSOCK";
    case AF_ALG:
      return "AF_ALG";
    case AF_KEY:
      return "AF_KEY";
    case AF_APPLETALK:
      return "AF_APPLETALK";
    case AF_X25:
      return "AF_X25";
    case AF_CAN:
      return "AF_CAN";
    case AF_TIPC:
      return "AF_TIPC";
    case AF_XDP:
      return "AF_XDP";
    default:
      return fmt::format("address family {}", family);
  }
}

// Answers the sandbox's notifications (generator_syscalls.h) and keeps the record.
class Supervisor {
public:
  Supervisor(const View& view, GeneratorResult& result) : m_view(view), m_result(result) {
    for (const GeneratorPathSyscall& s : k_generator_path_syscalls) {
      const int nr = ::seccomp_syscall_resolve_name(s.name);
      if (nr != __NR_SCMP_ERROR) m_path_calls.emplace(nr, &s);
    }
    m_socket_nr = ::seccomp_syscall_resolve_name(k_generator_socket_syscall);
    if (::seccomp_notify_alloc(&m_req, &m_resp) != 0) throw InternalError("seccomp_notify_alloc failed");
    // The kernel's size of a notification, which it wants zeroed before each receive (libseccomp 2.5 allocates at
    // least that much, but leaves the zeroing to the caller).
    seccomp_notif_sizes sizes{};
    m_req_size = ::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) == 0
                     ? std::max<std::size_t>(sizes.seccomp_notif, sizeof(seccomp_notif))
                     : sizeof(seccomp_notif);
  }
  ~Supervisor() { ::seccomp_notify_free(m_req, m_resp); }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Receives one notification and answers it. A caller that is gone meanwhile (killed, or its call interrupted by a
  // signal) is no error: the kernel has withdrawn the notification. Any other failure to receive is returned (errno):
  // the caller then closes the listener, after which every supervised call in the sandbox fails (ENOSYS) rather
  // than waits.
  int serve(int notify_fd) {
    std::memset(static_cast<void*>(m_req), 0, m_req_size);
    if (::seccomp_notify_receive(notify_fd, m_req) != 0) {
      const int e = errno;
      return e == ENOENT || e == EINTR ? 0 : (e != 0 ? e : EIO);
    }
    m_notify_fd = notify_fd;
    if (!m_seen_first) {
      // The first call is the shim's execve of the generator: its process is the generator's main one (PID 1 of the
      // sandbox), held by a pidfd so that a kill at the deadline reaches it and nothing that reused its number.
      m_seen_first = true;
      m_main.reset(static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(m_req->pid), 0)));
      if (!still_valid()) m_main.reset();
    }
    const std::optional<bool> allow = judge();
    if (!allow) return 0;  // the caller is gone
    m_resp->id = m_req->id;
    m_resp->val = 0;
    m_resp->error = *allow ? 0 : -EACCES;
    m_resp->flags = *allow ? SECCOMP_USER_NOTIF_FLAG_CONTINUE : 0;
    (void)::seccomp_notify_respond(notify_fd, m_resp);  // fails only when the caller is gone meanwhile
    return 0;
  }

  // The generator's main process, once its first call was seen; -1 before.
  int main_pidfd() const { return m_main.get(); }

private:
  bool still_valid() const { return ::seccomp_notify_id_valid(m_notify_fd, m_req->id) == 0; }

  // Allowed (true), denied and recorded (false), or the caller is gone (nullopt).
  std::optional<bool> judge() {
    const int nr = m_req->data.nr;
    if (nr == m_socket_nr) {
      const int family = static_cast<int>(m_req->data.args[0]);
      // glibc's getaddrinfo and if_nametoindex ask the kernel over netlink; in the sandbox's empty network namespace
      // it has nothing to tell.
      if (family == AF_UNIX || family == AF_NETLINK) return true;
      record("network", "socket", family_name(family));
      return false;
    }
    const auto it = m_path_calls.find(nr);
    if (it == m_path_calls.end()) return true;  // not one the filter hands over
    const GeneratorPathSyscall& call = *it->second;
    bool allowed = true;
    for (const GeneratorPathArg& arg : call.paths) {
      if (arg.path_arg < 0) continue;
      const std::optional<std::optional<fs::path>> path = resolve(arg);
      if (!path) return std::nullopt;
      if (!*path) continue;  // nothing kwb can name: the kernel refuses it (EFAULT, ENAMETOOLONG) or it names the fd
      if (within_view(**path, call.looks_only)) continue;
      record("path", call.name, (*path)->string());
      allowed = false;
    }
    return allowed;
  }

  bool within_view(const fs::path& p, bool looks_only) const {
    if (m_view.contains(p)) return true;
    if (looks_only && m_view.is_above(p)) return true;
    return std::any_of(std::begin(k_libc_probes), std::end(k_libc_probes),
                       [&](const char* probe) { return p == probe; });
  }

  // The path argument as the caller names it, made absolute: an empty optional when there is nothing to judge (a
  // null or unreadable address, an empty path, a relative path against a descriptor that is no folder), nullopt when
  // the caller is gone.
  std::optional<std::optional<fs::path>> resolve(const GeneratorPathArg& arg) {
    const std::uint64_t address = m_req->data.args[arg.path_arg];
    if (address == 0) return std::optional<fs::path>();
    const pid_t pid = static_cast<pid_t>(m_req->pid);
    std::optional<std::string> text = read_string(pid, address);
    if (!still_valid()) return std::nullopt;
    if (!text || text->empty()) return std::optional<fs::path>();
    if ((*text)[0] == '/') return std::optional<fs::path>(normal_path(*text));
    const int dirfd = arg.dirfd_arg < 0 ? AT_FDCWD : static_cast<int>(m_req->data.args[arg.dirfd_arg]);
    const std::string link =
        dirfd == AT_FDCWD ? fmt::format("/proc/{}/cwd", pid) : fmt::format("/proc/{}/fd/{}", pid, dirfd);
    std::error_code ec;
    const fs::path base = fs::read_symlink(link, ec);
    if (!still_valid()) return std::nullopt;
    // A folder's name as the caller's mount namespace has it (/proc/PID/cwd is named from the root of the namespace
    // it lives in: the binds' names, /tmp the sandbox's own); a pipe or socket is "pipe:[N]", no folder at all.
    if (ec || !base.is_absolute()) return std::optional<fs::path>();
    return std::optional<fs::path>(normal_path(base / *text));
  }

  // The NUL-terminated string at `address` in the caller's memory, read from /proc/PID/mem (page by page: the
  // string may end just before an unmapped page), at most PATH_MAX bytes. nullopt when unreadable or longer.
  std::optional<std::string> read_string(pid_t pid, std::uint64_t address) const {
    const UniqueFd mem(::open(fmt::format("/proc/{}/mem", pid).c_str(), O_RDONLY | O_CLOEXEC));
    if (!mem.valid()) return std::nullopt;
    // The descriptor is the notifying task's only if its notification is still pending (the pid was not reused).
    if (!still_valid()) return std::nullopt;
    constexpr std::size_t k_path_max = 4096, k_page = 4096;
    std::string out;
    std::array<char, k_page> buffer{};
    while (out.size() < k_path_max) {
      const std::size_t chunk = std::min(k_page - address % k_page, k_path_max - out.size());
      const ssize_t n = ::pread(mem.get(), buffer.data(), chunk, static_cast<off_t>(address));
      if (n <= 0) return std::nullopt;
      const auto* end = static_cast<const char*>(std::memchr(buffer.data(), '\0', static_cast<std::size_t>(n)));
      if (end != nullptr) {
        out.append(buffer.data(), static_cast<std::size_t>(end - buffer.data()));
        return out;
      }
      out.append(buffer.data(), static_cast<std::size_t>(n));
      address += static_cast<std::uint64_t>(n);
    }
    return std::nullopt;
  }

  void record(const std::string& kind, const std::string& syscall, const std::string& target) {
    std::string key = kind + '\0' + syscall + '\0' + target;
    if (m_kept.contains(key)) return;
    if (m_result.violations.size() < k_max_violations) {
      m_kept.insert(std::move(key));
      m_result.violations.push_back({kind, syscall, target});
      return;
    }
    const std::size_t h = std::hash<std::string>{}(key);
    if (m_dropped.size() < k_max_dropped_tracked) {
      if (m_dropped.insert(h).second) ++m_result.violations_dropped;
    } else if (!m_dropped.contains(h)) {
      ++m_result.violations_dropped;
    }
  }

  const View& m_view;
  GeneratorResult& m_result;
  std::unordered_map<int, const GeneratorPathSyscall*> m_path_calls;
  int m_socket_nr = -1;
  seccomp_notif* m_req = nullptr;
  seccomp_notif_resp* m_resp = nullptr;
  std::size_t m_req_size = 0;
  int m_notify_fd = -1;
  bool m_seen_first = false;
  UniqueFd m_main;
  std::unordered_set<std::string> m_kept;
  std::unordered_set<std::size_t> m_dropped;
};

// The notification descriptor kwb-generator-shim sends (SCM_RIGHTS); -1 when the socket ended without one (bwrap or
// the shim failed before), or, with `wait` false, when none is there now.
int receive_fd(int socket_fd, bool wait) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC | (wait ? 0 : MSG_DONTWAIT));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int))) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      return fd;
    }
  }
  return -1;
}

std::string first_output_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// ---- the spec -----------------------------------------------------------------------------------------------------

struct Prepared {
  std::string program;  // argv[0] resolved
  fs::path cwd;
  fs::path shim;
  View view;
  std::vector<std::string> bwrap_args;
};

Prepared prepare_sandbox(const GeneratorSpec& spec, bool own_user) {
  if (spec.argv.empty() || spec.argv.front().empty()) throw InternalError("run_generator: empty argv");
  const std::string bwrap = find_bubblewrap();
  if (bwrap.empty()) {
    throw Error(ExitCode::unavailable,
                "kwb runs experiment generators only inside a bubblewrap sandbox, and `bwrap` is not installed: "
                "install it (Debian/Ubuntu: apt-get install bubblewrap; scripts/setup.sh does) and run again");
  }
  Prepared p;
  p.shim = generator_shim_executable();
  if (::access(p.shim.c_str(), X_OK) != 0) {
    throw Error(ExitCode::unavailable,
                fmt::format("kwb-generator-shim, which starts every generator under kwb's supervision, is missing at "
                            "{}: build it with kwb (cmake --build), install it beside kwb, or set KWB_GENERATOR_SHIM",
                            p.shim.string()));
  }
  const auto folder = [](const fs::path& path, const std::string& field) {
    std::error_code ec;
    if (!path.is_absolute()) {
      throw DataError(
          fmt::format("the generator's {} '{}' is not an absolute path; the sandbox binds folders at "
                      "their absolute paths",
                      field, path.string()));
    }
    if (!fs::exists(fs::symlink_status(path, ec))) {
      throw DataError(
          fmt::format("the generator's {} {} does not exist: create it before the run", field, path.string()));
    }
    return normal_path(path);
  };
  const fs::path writable = folder(spec.writable, "writable folder");
  {
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(writable, ec);
    if (!fs::is_directory(st)) {
      throw DataError(
          fmt::format("the generator's writable folder {} is not a folder (a symbolic link or a file): "
                      "give it a real folder",
                      writable.string()));
    }
  }
  std::vector<fs::path> read_only;
  for (const fs::path& r : spec.read_only) read_only.push_back(folder(r, "read-only folder"));
  p.cwd = spec.cwd.empty() ? writable : normal_path(spec.cwd);
  const bool cwd_bound =
      path_is_within(p.cwd, writable) ||
      std::any_of(read_only.begin(), read_only.end(), [&](const fs::path& r) { return path_is_within(p.cwd, r); });
  if (!p.cwd.is_absolute() || !cwd_bound) {
    throw DataError(
        fmt::format("the generator's working folder {} lies outside its writable folder and its "
                    "read-only folders, so it does not exist inside the sandbox: pick one within them",
                    p.cwd.string()));
  }
  for (const auto& [name, value] : spec.env) {
    if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos) {
      throw DataError(fmt::format("the generator's environment variable name '{}' is not a name", name));
    }
    if (name == "PATH" || name == "HOME" || name == "TMPDIR" || name == "LANG") {
      throw DataError(
          fmt::format("the generator's environment may not set {}: kwb sets PATH, HOME (the writable "
                      "folder), TMPDIR (/tmp) and LANG itself",
                      name));
    }
  }
  if (own_user) {
    for (const fs::path& r : read_only) require_reachable_by_others(r, true, "a generator's read-only folder");
    require_reachable_by_others(writable, false, "the generator's writable folder");
    require_reachable_by_others(p.shim, true, "kwb-generator-shim");
  }

  // What it sees. Inside, paths are the same as outside: every bind keeps its absolute name.
  for (const fs::path& root : build_sandbox_system_roots()) p.view.bind(root);
  for (const char* mount : {"/dev", "/proc"}) p.view.bind(mount);
  p.view.fresh("/tmp");
  p.view.bind(p.shim);
  for (const fs::path& r : read_only) p.view.bind(r);
  p.view.bind(writable);

  p.program = resolve_program(spec.argv.front(), p.cwd);
  if (!p.program.empty() && !p.view.contains(p.program)) {
    throw DataError(
        fmt::format("the generator's program {} lies outside what the generator sees (the system roots, "
                    "its read-only and writable folders): bind its folder read-only",
                    p.program));
  }

  std::vector<std::string>& a = p.bwrap_args;
  a = sandbox_base_args(bwrap);
  // Its own user namespace, and none further inside: a namespace of its own would give the generator capabilities
  // (mounts, chroot) under which the paths it names stop meaning what they mean to kwb.
  a.insert(a.end(), {"--unshare-user", "--disable-userns"});
  // The generator is the PID namespace's init, not a child of bwrap's: everything it leaves is killed and reaped into
  // its rusage when it exits, and bwrap waits for it, so kwb's wait4 of bwrap counts the CPU of every process. (bwrap's
  // own init reports the exit and is never waited for: its CPU would be lost.)
  a.push_back("--as-pid-1");
  // Binds from the shallowest: one inside another (a writable folder below a read-only one) is mounted over it.
  std::vector<std::pair<fs::path, bool>> binds = {{p.shim, false}, {writable, true}};
  for (const fs::path& r : read_only) binds.emplace_back(r, false);
  std::stable_sort(binds.begin(), binds.end(), [](const auto& x, const auto& y) {
    return std::distance(x.first.begin(), x.first.end()) < std::distance(y.first.begin(), y.first.end());
  });
  for (const auto& [path, rw] : binds) a.insert(a.end(), {rw ? "--bind" : "--ro-bind", path.string(), path.string()});
  a.insert(a.end(), {"--chdir", p.cwd.string(), "--clearenv", "--setenv", "PATH", k_generator_path, "--setenv", "HOME",
                     writable.string(), "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8"});
  for (const auto& [name, value] : spec.env) a.insert(a.end(), {"--setenv", name, value});
  a.insert(a.end(), {"--", p.shim.string(), p.program});
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());
  return p;
}

// The sandbox could not be set up (nothing of the generator ran): what to enable.
[[noreturn]] void throw_unavailable(const std::string& output, bool timed_out) {
  const std::string line = output.empty() ? (timed_out ? "it did not start within the wall-clock limit" : "no output")
                                          : first_output_line(output);
  if (output.starts_with("bwrap: ")) {
    throw Error(ExitCode::unavailable,
                fmt::format("kwb runs experiment generators only inside a bubblewrap sandbox, and it cannot be created "
                            "here ({}). Allow unprivileged user namespaces (sysctl "
                            "kernel.unprivileged_userns_clone=1; on Ubuntu also "
                            "kernel.apparmor_restrict_unprivileged_userns=0), or run in a container that permits "
                            "them (e.g. docker --security-opt seccomp=unconfined)",
                            line));
  }
  throw Error(ExitCode::unavailable,
              fmt::format("kwb runs experiment generators only under seccomp supervision, and it cannot be set up "
                          "here ({}). It needs Linux 5.5 or later with seccomp user notification, libseccomp 2.5 or "
                          "later, and a container that permits seccomp filters",
                          line));
}

}  // namespace

GeneratorResult run_generator(const GeneratorSpec& spec) {
  const bool own_user = workers_change_user();
  Prepared prep = prepare_sandbox(spec, own_user);
  GeneratorResult result;
  if (prep.program.empty()) {
    result.exit_code = 127;
    result.output = fmt::format("kwb: cannot run '{}': not found on the generator's PATH={}\n", spec.argv.front(),
                                k_generator_path);
    return result;
  }

  int fds[2];
  KWB_POSIX_CALL(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds));
  UniqueFd control(fds[0]), shim_end(fds[1]);
  KWB_POSIX_CALL(::pipe2(fds, O_CLOEXEC));
  UniqueFd output(fds[0]), output_write(fds[1]);

  const fs::path writable = normal_path(spec.writable);
  // Before the run: what a run kwb did not see end left past the folder's bounds (a hard link, a deep tree, too many
  // bytes) is reset, so that it neither wedges this run's hand-over nor counts against this run.
  if (!walk_tree(writable, std::nullopt, false, spec.work_quota_bytes).problems.empty()) reset_folder(writable);
  bool handed_over = false;
  // Takes the writable folder back from the generator's user (kwb's own user owns it again, so that nothing the
  // generator left there can be changed by whoever gets that user's id next), and checks it against its bounds: a
  // folder past them is reset, and the run's result says why. The generator is gone by then.
  const auto take_back = [&] {
    const std::optional<std::pair<uid_t, gid_t>> owner =
        handed_over ? std::optional(std::pair{::geteuid(), ::getegid()}) : std::nullopt;
    handed_over = false;
    FolderWalk w = walk_tree(writable, owner, false, spec.work_quota_bytes);
    if (!w.problems.empty()) {
      reset_folder(writable);
      result.folder_problems = std::move(w.problems);
    }
  };

  ChildSpec child;
  child.argv = prep.bwrap_args;
  child.stdout_fd = output_write.get();
  child.stderr_fd = output_write.get();
  child.limits = sandbox_rlimits(spec.address_space_bytes, spec.cpu_seconds, spec.file_size_bytes);
  child.inherited_fds = {shim_end.get()};
  static_assert(k_generator_shim_socket_fd == 3, "the shim's socket is the first inherited descriptor");
  if (own_user) {
    child.own_user = true;
    child.limits.push_back({RLIMIT_NPROC, {spec.max_processes, spec.max_processes}});
    child.before_exec = [&](pid_t pid) {
      const WorkerUser user = worker_user_of(pid);
      handed_over = true;
      const FolderWalk w = walk_tree(writable, std::pair{user.uid, user.gid}, true, spec.work_quota_bytes);
      if (!w.problems.empty()) {  // reset just before; only a change since could leave one
        throw Error(ExitCode::io_error, fmt::format("the generator's writable folder {} changed while it was handed "
                                                    "over: {}",
                                                    writable.string(), w.problems.front()));
      }
    };
  }

  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  try {
    int exec_errno = 0;
    pid = spawn_child(child, exec_errno);
    if (pid < 0) {
      throw Error(ExitCode::unavailable, fmt::format("cannot start bwrap ({}) for the generator: {}",
                                                     prep.bwrap_args.front(), std::strerror(exec_errno)));
    }
  } catch (...) {
    try {
      take_back();
    } catch (const Error&) {  // the first failure is the one to report
    }
    throw;
  }
  output_write.reset();
  shim_end.reset();

  Supervisor supervisor(prep.view, result);
  UniqueFd notify;
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  bool output_open = true, dropped = false, exited = false, supervised = false, stop_now = false;
  std::optional<std::chrono::steady_clock::time_point> killed_at;  // when the generator was killed
  const auto deadline = start + spec.wall;
  char buffer[4096];
  const auto read_output = [&] {
    const ssize_t n = ::read(output.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {
      output_open = false;
      return;
    }
    const std::size_t room =
        spec.max_output_bytes > result.output.size() ? spec.max_output_bytes - result.output.size() : 0;
    result.output.append(buffer, std::min(room, static_cast<std::size_t>(n)));
    dropped = dropped || room < static_cast<std::size_t>(n);
  };

  std::string supervision_failure;
  const auto serve = [&] {
    if (const int e = supervisor.serve(notify.get()); e != 0) {
      supervision_failure = fmt::format(
          "\n(kwb: the sandbox's supervision failed ({}): the generator's calls that "
          "name a path failed from then on)\n",
          std::strerror(e));
      notify.reset();
    }
  };
  int status = 0;
  rusage usage{};
  try {
    // One loop for everything: the shim's descriptor, the sandbox's calls, its output, its end, the deadline. A
    // generator that closes its output and runs on is still ended by the deadline.
    while (!exited) {
      const auto now = std::chrono::steady_clock::now();
      if ((now >= deadline || stop_now) && !killed_at) {
        // The generator first: the namespace ends with it and bwrap reaps it, its CPU included. Should that not end
        // bwrap within a second (the generator not started yet), bwrap's group: --die-with-parent takes the rest.
        if (supervisor.main_pidfd() >= 0) {
          (void)::syscall(SYS_pidfd_send_signal, supervisor.main_pidfd(), SIGKILL, nullptr, 0);
        } else {
          ::kill(-pid, SIGKILL);
        }
        result.timed_out = !stop_now;
        result.stopped = stop_now;
        killed_at = now;
      } else if (killed_at && now >= *killed_at + std::chrono::seconds(1)) {
        ::kill(-pid, SIGKILL);
      }
      std::vector<pollfd> polls;
      polls.push_back({pidfd.valid() ? pidfd.get() : -1, POLLIN, 0});
      polls.push_back({notify.valid() ? notify.get() : -1, POLLIN, 0});
      polls.push_back({control.valid() ? control.get() : -1, POLLIN, 0});
      polls.push_back({output_open ? output.get() : -1, POLLIN, 0});
      polls.push_back({spec.stop_fd >= 0 && !killed_at ? spec.stop_fd : -1, POLLIN, 0});
      polls.push_back({spec.service_fd >= 0 && spec.service ? spec.service_fd : -1, POLLIN, 0});
      auto left = killed_at ? std::chrono::milliseconds(100)
                            : std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                                  std::chrono::milliseconds(1);
      // Without a pidfd (pidfd_open is older than seccomp notification: not expected) the exit is looked for often.
      if (!pidfd.valid()) left = std::min(left, std::chrono::milliseconds(50));
      const int pr = ::poll(polls.data(), polls.size(), static_cast<int>(left.count()));
      if (pr > 0) {
        if (polls[1].revents & POLLIN) serve();
        if (polls[1].revents & (POLLHUP | POLLERR | POLLNVAL)) notify.reset();  // every supervised process is gone
        if (polls[2].revents != 0) {
          notify.reset(receive_fd(control.get(), true));
          supervised = supervised || notify.valid();
          control.reset();
        }
        if (polls[3].revents != 0) read_output();
        if (polls[0].revents != 0) exited = true;
        if (polls[4].revents != 0) stop_now = true;
        if (polls[5].revents != 0) spec.service();
      }
      if (!pidfd.valid()) {
        siginfo_t info{};
        exited = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
      }
    }
    if (control.valid()) {  // sent before the end that was seen first
      notify.reset(receive_fd(control.get(), false));
      supervised = supervised || notify.valid();
      control.reset();
    }
    // Reaped as util/subprocess.h's reap_child does (the leader's zombie pins its group while it is killed), with the
    // rusage of everything the sandbox's processes reaped.
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    ::kill(-pid, SIGKILL);
    unregister_child_group(pid);
    while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
    }
    pid = -1;
    result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The PID namespace ends with its init, which bwrap waited for; a killed bwrap's init follows it within moments.
    // Its processes are gone when the listener hangs up (no process holds the filter) and the output ends.
    const auto grace = std::chrono::steady_clock::now() + k_teardown_grace;
    while ((notify.valid() || output_open) && std::chrono::steady_clock::now() < grace) {
      std::vector<pollfd> polls = {{notify.valid() ? notify.get() : -1, POLLIN, 0},
                                   {output_open ? output.get() : -1, POLLIN, 0}};
      if (::poll(polls.data(), polls.size(), 100) <= 0) continue;
      if (polls[0].revents & POLLIN) serve();
      if (polls[0].revents & (POLLHUP | POLLERR | POLLNVAL)) notify.reset();
      if (polls[1].revents != 0) read_output();
    }
  } catch (...) {
    if (pid > 0) {
      ::kill(-pid, SIGKILL);
      (void)reap_child(pid);
    }
    try {
      take_back();
    } catch (const Error&) {  // the first failure is the one to report
    }
    throw;
  }
  take_back();
  throw_if_interrupted();  // killed by kwb's own interruption handler: no generator's result
  // No listener came: the sandbox or the supervision could not be set up, and the shim executed nothing.
  if (!supervised) throw_unavailable(result.output, result.timed_out);

  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  result.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  if (dropped) result.output += fmt::format("\n(kwb: generator output cut at {} bytes)\n", spec.max_output_bytes);
  result.output += supervision_failure;
  return result;
}

std::optional<std::string> read_generated_file(const fs::path& dir, const std::string& name, size_t max_bytes,
                                               std::string& why) {
  const fs::path path = dir / name;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    why = fmt::format("'{}' is not a plain file name, so kwb does not read it from {}", name, dir.string());
    return std::nullopt;
  }
  const UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dfd.valid()) {
    why = fmt::format("cannot open the folder of {}: {}", path.string(), std::strerror(errno));
    return std::nullopt;
  }
  const UniqueFd fd(::openat(dfd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    const int e = errno;
    why = e == ELOOP
              ? fmt::format("{} is a symbolic link; kwb reads only regular files a generator wrote", path.string())
              : fmt::format("cannot open {}: {}", path.string(), std::strerror(e));
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    why = fmt::format("cannot stat {}: {}", path.string(), std::strerror(errno));
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    const char* what = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISDIR(st.st_mode)  ? "a folder"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    why = fmt::format("{} is {}, not a regular file; kwb reads only regular files a generator wrote", path.string(),
                      what);
    return std::nullopt;
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    why = fmt::format("{} is {} bytes, more than the {} kwb reads", path.string(), st.st_size, max_bytes);
    return std::nullopt;
  }
  std::string text;
  text.resize(max_bytes + 1);
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = fmt::format("cannot read {}: {}", path.string(), std::strerror(errno));
      return std::nullopt;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max_bytes) {  // it grew after the size was looked at
    why = fmt::format("{} is more than the {} bytes kwb reads", path.string(), max_bytes);
    return std::nullopt;
  }
  text.resize(got);
  return text;
}

}  // namespace kwb
