#include "experiment/generator_supervisor.h"

#include "experiment/generator_syscalls.h"
#include "util/error.h"
#include "util/fd_passing.h"
#include "util/paths.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kwb {

namespace fs = std::filesystem;

// Absolute and lexically normal, without a trailing separator ("/a/b/" is "/a/b").
fs::path normal_path(const fs::path& p) {
  fs::path n = p.lexically_normal();
  if (n.has_relative_path() && n.filename().empty()) n = n.parent_path();
  return n;
}

bool SandboxView::contains(const fs::path& p) const {
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

bool SandboxView::is_above(const fs::path& p) const {
  return std::any_of(m_binds.begin(), m_binds.end(), [&](const fs::path& r) { return path_is_within(r, p); }) ||
         std::any_of(m_fresh.begin(), m_fresh.end(), [&](const fs::path& r) { return path_is_within(r, p); });
}

bool SandboxView::shares_folder_below(const fs::path& p, const fs::path& b, const fs::path& f) {
  const fs::path p_rel = p.lexically_relative(f), b_rel = b.lexically_relative(f);
  if (std::distance(b_rel.begin(), b_rel.end()) < 2) return false;  // b directly in f: no folder between
  return *p_rel.begin() == *b_rel.begin();
}

namespace {

constexpr std::size_t k_max_violations = 100;
constexpr std::size_t k_max_dropped_tracked = 65536;

// Files the system's libraries look for on the generator's behalf, absent inside (no /etc but the loader's cache):
// the loader's preload list, the time zone, the name service's configuration and databases (a uid's name),
// libselinux's configuration (coreutils' ls). Counting them would charge every arm for using a C library; reading
// them reads nothing.
constexpr const char* k_libc_probes[] = {"/etc/ld.so.preload", "/etc/localtime", "/etc/nsswitch.conf",
                                         "/etc/passwd",        "/etc/group",     "/etc/selinux/config"};

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

}  // namespace

// Answers the sandbox's notifications (generator_syscalls.h) and keeps the record.
class GeneratorSupervisor::Impl {
public:
  Impl(const SandboxView& view, GeneratorResult& result) : m_view(view), m_result(result) {
    for (const GeneratorPathSyscall& s : k_generator_path_syscalls) {
      const int nr = ::seccomp_syscall_resolve_name(s.name);
      if (nr != __NR_SCMP_ERROR) m_path_calls.emplace(nr, &s);
    }
    m_socket_nr = ::seccomp_syscall_resolve_name(k_generator_socket_syscall);
    for (const GeneratorAddressSyscall& s : k_generator_address_syscalls) {
      const int nr = ::seccomp_syscall_resolve_name(s.name);
      if (nr != __NR_SCMP_ERROR) m_address_calls.emplace(nr, &s);
    }
    if (::seccomp_notify_alloc(&m_req, &m_resp) != 0) throw InternalError("seccomp_notify_alloc failed");
    // The kernel's size of a notification, which it wants zeroed before each receive (libseccomp 2.5 allocates at
    // least that much, but leaves the zeroing to the caller).
    seccomp_notif_sizes sizes{};
    m_req_size = ::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) == 0
                     ? std::max<std::size_t>(sizes.seccomp_notif, sizeof(seccomp_notif))
                     : sizeof(seccomp_notif);
  }
  ~Impl() { ::seccomp_notify_free(m_req, m_resp); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

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
      // it has nothing to tell. An IP socket there reaches its own loopback and nothing else (the model bridge is
      // on it): where it sends is judged at connect, sendto and sendmsg.
      if (family == AF_UNIX || family == AF_NETLINK || family == AF_INET || family == AF_INET6) return true;
      record("network", "socket", family_name(family));
      return false;
    }
    if (const auto a = m_address_calls.find(nr); a != m_address_calls.end()) return judge_address(*a->second);
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

  // A peer's address (connect, sendto): the sandbox's own loopback (127.0.0.0/8, ::1, and 127/8 mapped into IPv6)
  // and local sockets are allowed; any other is recorded as a reach for the network. The empty network namespace is
  // what keeps such a packet in (it has no route out, whatever the memory says by the time the kernel reads it); the
  // record is what says the generator tried.
  std::optional<bool> judge_address(const GeneratorAddressSyscall& call) {
    const pid_t pid = static_cast<pid_t>(m_req->pid);
    const std::uint64_t address = m_req->data.args[call.address_arg], length = m_req->data.args[call.length_arg];
    if (address == 0 || length < sizeof(sa_family_t)) return true;  // a connected socket's peer, or EINVAL
    sockaddr_storage peer{};
    const std::size_t size = std::min<std::uint64_t>(length, sizeof peer);
    const bool read = read_bytes(pid, address, &peer, size);
    if (!still_valid()) return std::nullopt;
    if (!read) return true;  // EFAULT from the kernel
    const std::optional<std::string> outside = outside_peer(peer, size);
    if (!outside) return true;
    record("network", call.name, *outside);
    return false;
  }

  // The address as text when it lies outside the sandbox's own loopback and local sockets; nullopt when it does not.
  static std::optional<std::string> outside_peer(const sockaddr_storage& peer, std::size_t size) {
    char text[INET6_ADDRSTRLEN] = {};
    if (peer.ss_family == AF_INET && size >= sizeof(sockaddr_in)) {
      const auto& in = reinterpret_cast<const sockaddr_in&>(peer);
      if ((ntohl(in.sin_addr.s_addr) >> 24) == 127) return std::nullopt;
      ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
      return fmt::format("{}:{}", text, ntohs(in.sin_port));
    }
    if (peer.ss_family == AF_INET6 && size >= sizeof(sockaddr_in6)) {
      const auto& in6 = reinterpret_cast<const sockaddr_in6&>(peer);
      const in6_addr& a = in6.sin6_addr;
      if (IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127)) return std::nullopt;
      ::inet_ntop(AF_INET6, &a, text, sizeof text);
      return fmt::format("[{}]:{}", text, ntohs(in6.sin6_port));
    }
    if (peer.ss_family == AF_UNIX || peer.ss_family == AF_UNSPEC || peer.ss_family == AF_NETLINK) return std::nullopt;
    return family_name(peer.ss_family);  // a short address of its family: the kernel refuses it (EINVAL)
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

  // `size` bytes at `address` in the caller's memory, from /proc/PID/mem; false when they cannot all be read.
  bool read_bytes(pid_t pid, std::uint64_t address, void* out, std::size_t size) const {
    const UniqueFd mem(::open(fmt::format("/proc/{}/mem", pid).c_str(), O_RDONLY | O_CLOEXEC));
    if (!mem.valid() || !still_valid()) return false;
    return ::pread(mem.get(), out, size, static_cast<off_t>(address)) == static_cast<ssize_t>(size);
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

  const SandboxView& m_view;
  GeneratorResult& m_result;
  std::unordered_map<int, const GeneratorPathSyscall*> m_path_calls;
  int m_socket_nr = -1;
  std::unordered_map<int, const GeneratorAddressSyscall*> m_address_calls;
  seccomp_notif* m_req = nullptr;
  seccomp_notif_resp* m_resp = nullptr;
  std::size_t m_req_size = 0;
  int m_notify_fd = -1;
  bool m_seen_first = false;
  UniqueFd m_main;
  std::unordered_set<std::string> m_kept;
  std::unordered_set<std::size_t> m_dropped;
};

GeneratorSupervisor::GeneratorSupervisor(const SandboxView& view, GeneratorResult& result)
    : m_impl(std::make_unique<Impl>(view, result)) {}
GeneratorSupervisor::~GeneratorSupervisor() = default;
int GeneratorSupervisor::serve(int notify_fd) { return m_impl->serve(notify_fd); }
int GeneratorSupervisor::main_pidfd() const { return m_impl->main_pidfd(); }

int receive_notify_fd(int socket_fd, bool wait) {
  char byte = 0;
  std::vector<UniqueFd> fds;
  if (receive_with_fds(socket_fd, &byte, 1, fds, wait ? 0 : MSG_DONTWAIT) <= 0 || fds.size() != 1) return -1;
  return fds.front().release();
}

}  // namespace kwb
