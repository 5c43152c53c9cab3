#include "worker/sandbox.h"

#include <fcntl.h>
#include <link.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <linux/sockios.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <utility>

namespace kwb {

namespace {

std::string errno_text(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

// ---- rlimits ----------------------------------------------------------------------------------------------------

// Lowers a limit (soft and hard). Never raises one: an unprivileged process cannot, and a limit the parent already
// set lower stays lower.
void lower_limit(int resource, rlim_t soft, rlim_t hard) {
  rlimit now{};
  if (::getrlimit(resource, &now) != 0) return;
  rlimit want{std::min(soft, now.rlim_max), std::min(hard, now.rlim_max)};
  want.rlim_cur = std::min(want.rlim_cur, want.rlim_max);
  (void)::setrlimit(resource, &want);
}

// The worker's stdout/stderr is a memfd the parent reads the tail of; this bounds what a chatty (or hostile)
// implementation can write there. Writing beyond it raises SIGXFSZ, reported as resource_limit.
constexpr rlim_t k_output_file_bytes = rlim_t{64} << 20;
// fds 0-3, one received buffer fd at a time, dlopen's fd of the artifact, Landlock's two during setup.
constexpr rlim_t k_open_files = 64;

void apply_limits(const SandboxPolicy& p) {
  lower_limit(RLIMIT_CORE, 0, 0);
  if (p.address_space_bytes > 0 && !p.runtime.unlimited_address_space) {
    lower_limit(RLIMIT_AS, p.address_space_bytes, p.address_space_bytes);
  }
  if (p.cpu_seconds > 0) lower_limit(RLIMIT_CPU, p.cpu_seconds, p.cpu_seconds + 5);
  lower_limit(RLIMIT_FSIZE, k_output_file_bytes, k_output_file_bytes);
  const rlim_t open_files = p.runtime.open_files > 0 ? static_cast<rlim_t>(p.runtime.open_files) : k_open_files;
  lower_limit(RLIMIT_NOFILE, open_files, open_files);
  // RLIMIT_NPROC counts every process of the user (threads included), so it can only be a backstop where the task
  // allows no threads at all; seccomp is what forbids fork. Root ignores it.
  if (p.threads <= 1 && !p.runtime.threads && !p.runtime.spawn) lower_limit(RLIMIT_NPROC, 0, 0);
}

// ---- capabilities ---------------------------------------------------------------------------------------------

// A worker started by root would otherwise keep CAP_SYS_PTRACE, CAP_DAC_OVERRIDE, CAP_KILL, CAP_SYS_RESOURCE...
// Dropping them is harmless for an unprivileged worker (the calls fail with EPERM or change nothing).
bool drop_capabilities() {
  for (int cap = 0; cap <= 63; ++cap) (void)::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  (void)::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  return ::syscall(SYS_capset, &header, data) == 0;
}

// ---- mseal ------------------------------------------------------------------------------------------------------

#ifndef SYS_mseal
#define SYS_mseal 462  // the same number on every architecture (generic syscall table), Linux 6.10+
#endif

struct SealCount {
  size_t sealed = 0;
  size_t refused = 0;
  int last_error = 0;
};

// Seals the code (non-writable PT_LOAD segments) and the RELRO region (the GOT after bind-now) of every object loaded
// so far: the worker executable, ld.so, libc, libm, libstdc++, libgcc_s and the vDSO. Sealed ranges cannot be
// mprotect'ed, munmap'ed or remapped again, so neither a GOT patch nor a code detour can make them writable, even
// from a phase where mprotect is allowed (constructors; threads' stacks).
int seal_object(dl_phdr_info* info, size_t, void* data) {
  auto* count = static_cast<SealCount*>(data);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    uintptr_t start = 0, end = 0;
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_W) == 0) {
      start = begin & ~(page - 1);
      end = (begin + ph.p_memsz + page - 1) & ~(page - 1);
    } else if (ph.p_type == PT_GNU_RELRO) {
      // ld.so protects RELRO from its page-aligned start to the page boundary *below* its end; so do we.
      start = begin & ~(page - 1);
      end = (begin + ph.p_memsz) & ~(page - 1);
    } else {
      continue;
    }
    if (end <= start) continue;
    if (::syscall(SYS_mseal, start, end - start, 0) == 0) {
      ++count->sealed;
    } else {
      ++count->refused;
      count->last_error = errno;
    }
  }
  return 0;
}

// ---- Landlock ---------------------------------------------------------------------------------------------------
// The build machine's uapi header may predate the network and scope fields, so the ABI-versioned pieces are spelled
// out here (Documentation/userspace-api/landlock.rst).

struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI 4
  uint64_t scoped;              // ABI 6
};
constexpr uint64_t k_fs_execute = 1ull << 0;
constexpr uint64_t k_fs_write_file = 1ull << 1;
constexpr uint64_t k_fs_read_file = 1ull << 2;
constexpr uint64_t k_fs_read_dir = 1ull << 3;
constexpr uint64_t k_fs_abi1 = (1ull << 13) - 1;  // EXECUTE .. MAKE_SYM
constexpr uint64_t k_fs_refer = 1ull << 13;       // ABI 2
constexpr uint64_t k_fs_truncate = 1ull << 14;    // ABI 3
constexpr uint64_t k_fs_ioctl_dev = 1ull << 15;   // ABI 5
constexpr uint64_t k_net_bind_tcp = 1ull << 0;
constexpr uint64_t k_net_connect_tcp = 1ull << 1;
constexpr uint64_t k_scope_abstract_unix_socket = 1ull << 0;
constexpr uint64_t k_scope_signal = 1ull << 1;

// The rights a rule may grant on something that is not a directory.
constexpr uint64_t k_fs_file_rights = k_fs_execute | k_fs_write_file | k_fs_read_file | k_fs_truncate | k_fs_ioctl_dev;

// Grants `access` (within what the ruleset handles) beneath `path`. A path that does not exist is skipped: a
// runtime's list names the places it may use on any machine.
std::string add_path_rule(int ruleset, const std::string& path, uint64_t access, uint64_t handled) {
  const int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? "" : errno_text(("open(" + path + ", O_PATH)").c_str(), errno);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) access &= k_fs_file_rights;
  landlock_path_beneath_attr rule{};
  rule.allowed_access = access & handled;
  rule.parent_fd = fd;
  const long added = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
  const int err = errno;
  ::close(fd);
  return added == 0 ? "" : errno_text(("landlock_add_rule(" + path + ")").c_str(), err);
}

// The end of both Landlock setups: the ruleset `rs` (closed here) applied to this process unless building it failed
// (`error`), and the ABI recorded among the sandbox's features.
std::string restrict_self(int rs, const std::string& error, long abi, std::vector<std::string>& features) {
  if (!error.empty()) {
    ::close(rs);
    return error;
  }
  const long restricted = ::syscall(SYS_landlock_restrict_self, rs, 0);
  const int restrict_err = errno;
  ::close(rs);
  if (restricted != 0) return errno_text("landlock_restrict_self", restrict_err);
  features.push_back("landlock:" + std::to_string(abi));
  return "";
}

// A ruleset handling every right this kernel's Landlock (ABI `abi`) knows: files, TCP, signals and abstract sockets
// outside the domain. Returns its descriptor, or -1 (errno set).
long create_full_ruleset(long abi, uint64_t& handled) {
  LandlockRulesetAttr attr{};
  attr.handled_access_fs =
      k_fs_abi1 | (abi >= 2 ? k_fs_refer : 0) | (abi >= 3 ? k_fs_truncate : 0) | (abi >= 5 ? k_fs_ioctl_dev : 0);
  size_t size = sizeof attr.handled_access_fs;
  if (abi >= 4) {
    attr.handled_access_net = k_net_bind_tcp | k_net_connect_tcp;
    size += sizeof attr.handled_access_net;
  }
  if (abi >= 6) {
    attr.scoped = k_scope_abstract_unix_socket | k_scope_signal;
    size += sizeof attr.scoped;
  }
  handled = attr.handled_access_fs;
  return ::syscall(SYS_landlock_create_ruleset, &attr, size, 0);
}

// Only the artifact may be opened (read, mapped executable), plus what the device runtime needs (read, execute,
// write beneath its own directories, device nodes); everything else on every filesystem, /proc included, is
// EACCES. From ABI 4 no TCP, from ABI 6 no signals to and no abstract sockets of processes outside the worker.
// Returns "" when applied or when the kernel has no Landlock (the seccomp filters still hold; see threat-model.md).
std::string apply_landlock(const std::string& artifact, const RuntimeSandboxNeeds& runtime,
                           std::vector<std::string>& features) {
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) {
    features.push_back("landlock:unavailable");
    return "";
  }
  uint64_t handled = 0;
  const long ruleset = create_full_ruleset(abi, handled);
  if (ruleset < 0) return errno_text("landlock_create_ruleset", errno);
  const int rs = static_cast<int>(ruleset);
  const int file = ::open(artifact.c_str(), O_PATH | O_CLOEXEC);
  if (file < 0) {
    const int err = errno;
    ::close(rs);
    return errno_text(("open(" + artifact + ", O_PATH)").c_str(), err);
  }
  landlock_path_beneath_attr rule{};
  rule.allowed_access = k_fs_read_file | k_fs_execute;
  rule.parent_fd = file;
  const long added = ::syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
  const int add_err = errno;
  ::close(file);
  if (added != 0) {
    ::close(rs);
    return errno_text("landlock_add_rule", add_err);
  }
  std::string e;
  for (const std::string& p : runtime.read_paths) {
    if (e.empty()) e = add_path_rule(rs, p, k_fs_read_file | k_fs_read_dir, handled);
  }
  for (const std::string& p : runtime.exec_paths) {
    if (e.empty()) e = add_path_rule(rs, p, k_fs_execute | k_fs_read_file | k_fs_read_dir, handled);
  }
  for (const std::string& p : runtime.write_paths) {
    // Everything but executing: what the runtime writes there it maps (dlopen), which Landlock does not govern,
    // and nothing written there may be started as a program.
    if (e.empty()) e = add_path_rule(rs, p, handled & ~k_fs_execute, handled);
  }
  for (const std::string& p : runtime.device_paths) {
    if (e.empty()) e = add_path_rule(rs, p, k_fs_read_file | k_fs_write_file | k_fs_ioctl_dev | k_fs_read_dir, handled);
  }
  return restrict_self(rs, e, abi, features);
}

// ---- seccomp ------------------------------------------------------------------------------------------------------

// Builds one filter. Syscalls unknown to this libseccomp or architecture are skipped (they cannot be called).
class FilterBuilder {
public:
  explicit FilterBuilder(uint32_t default_action) : m_ctx(::seccomp_init(default_action)) {
    if (m_ctx == nullptr) {
      m_error = "seccomp_init failed";
      return;
    }
    // The worker sets no_new_privs itself (Landlock needs it first); libseccomp must not call prctl for it.
    attr(SCMP_FLTATR_CTL_NNP, 0);
    // A system call through another ABI (int 0x80 on x86_64) cannot be matched by the native rules: kill.
    attr(SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  }

  void attr(scmp_filter_attr a, uint32_t value) {
    if (m_ctx != nullptr && ::seccomp_attr_set(m_ctx, a, value) != 0 && m_error.empty()) {
      m_error = "seccomp_attr_set(" + std::to_string(static_cast<int>(a)) + ") failed";
    }
  }

  void add(uint32_t action, const char* name, std::initializer_list<scmp_arg_cmp> conditions = {}) {
    if (m_ctx == nullptr) return;
    const int nr = ::seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return;
    const int rc =
        ::seccomp_rule_add_array(m_ctx, action, nr, static_cast<unsigned>(conditions.size()), conditions.begin());
    if (rc != 0 && m_error.empty()) m_error = "seccomp_rule_add(" + std::string(name) + "): " + std::strerror(-rc);
  }

  void add_all(uint32_t action, std::initializer_list<const char*> names) {
    for (const char* n : names) add(action, n);
  }

  scmp_filter_ctx release(std::string& error) {
    if (!m_error.empty()) {
      error = m_error;
      if (m_ctx != nullptr) ::seccomp_release(m_ctx);
      return nullptr;
    }
    return std::exchange(m_ctx, nullptr);
  }

  ~FilterBuilder() {
    if (m_ctx != nullptr) ::seccomp_release(m_ctx);
  }
  FilterBuilder(const FilterBuilder&) = delete;  // owns a libseccomp context
  FilterBuilder& operator=(const FilterBuilder&) = delete;

private:
  scmp_filter_ctx m_ctx;
  std::string m_error;
};

constexpr uint32_t k_deny = SCMP_ACT_TRAP;  // SIGSYS, reported by the worker's handler, then death by SIGSYS

// Flags that make an open write, create or truncate something. O_TMPFILE includes O_DIRECTORY, so only its own bit.
constexpr scmp_datum_t k_write_open_flags[] = {O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND, 020000000 /*__O_TMPFILE*/};

// Denied in both phases, unconditionally: processes and exec, other processes' memory, network, the filesystem's
// shape, the machine's state, kernel extension points, timers (a timer signal would run implementation code while
// the worker waits for the next request: work after return), SysV IPC (state shared across workers).
const std::initializer_list<const char*> k_always_denied = {
    "execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open",
    "pidfd_getfd", "pidfd_send_signal", "process_madvise", "process_mrelease", "socket", "socketpair", "connect",
    "bind", "listen", "accept", "accept4", "setrlimit", "setpriority", "sched_setscheduler", "sched_setparam",
    "sched_setattr", "ioprio_set", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "init_module",
    "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "quotactl_fd", "keyctl", "add_key", "request_key", "creat", "mknod", "mknodat", "link", "linkat", "symlink",
    "symlinkat", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "chmod",
    "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat", "truncate", "utime", "utimes", "utimensat",
    "futimesat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm", "personality", "name_to_handle_at",
    "open_by_handle_at", "fanotify_init", "fanotify_mark", "setitimer", "alarm", "timer_create", "timerfd_create",
    "syslog", "vhangup", "sethostname", "setdomainname", "fsopen", "fsmount", "fsconfig", "fspick", "move_mount",
    "open_tree", "mount_setattr", "lookup_dcookie", "migrate_pages", "move_pages", "tkill", "uselib", "shmget", "shmat",
    "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "mq_open", "mq_unlink",
    "memfd_secret",
    // A new session or process group would take a helper program out of the group the parent kills.
    "setsid", "setpgid"};

// What a runtime that starts helper programs needs (PoCL: posix_spawn of the linker, a vfork-style clone).
const std::initializer_list<const char*> k_spawn_calls = {"execve", "execveat", "vfork"};
// What a runtime with a private cache directory needs to manage its files there. Landlock confines them to that
// directory; without Landlock (an old kernel) these stay denied and the runtime cannot cache.
const std::initializer_list<const char*> k_cache_calls = {"creat",     "mkdir",     "mkdirat",   "unlink", "unlinkat",
                                                          "rename",    "renameat",  "renameat2", "utime",  "utimes",
                                                          "utimensat", "futimesat", "truncate",  "fchmod"};

bool threads_allowed(const SandboxPolicy& p) { return p.threads > 1 || p.runtime.threads; }
bool may_write_files(const SandboxPolicy& p, bool landlock) { return landlock && !p.runtime.write_paths.empty(); }

bool is_in(const char* name, std::initializer_list<const char*> list) {
  return std::any_of(list.begin(), list.end(), [&](const char* n) { return std::strcmp(n, name) == 0; });
}

// Calls that make the kernel raise a signal in the worker when a descriptor becomes ready (SIGIO and friends): a
// handler would then run implementation code whenever the parent sends a request, outside every timed window.
// Denied in both phases (the run filter's allow-list has no fcntl or ioctl at all; device backends keep the load
// filter in the run phase).
void add_signal_routing_rules(FilterBuilder& f, uint32_t action) {
  for (scmp_datum_t cmd : {F_SETOWN, F_SETSIG, F_SETOWN_EX}) f.add(action, "fcntl", {SCMP_A1(SCMP_CMP_EQ, cmd)});
  f.add(action, "fcntl", {SCMP_A1(SCMP_CMP_EQ, F_SETFL), SCMP_A2(SCMP_CMP_MASKED_EQ, O_ASYNC, O_ASYNC)});
  for (scmp_datum_t req : {FIOASYNC, FIOSETOWN, SIOCSPGRP}) f.add(action, "ioctl", {SCMP_A1(SCMP_CMP_EQ, req)});
}

// The fault handlers are the worker's too (worker_main.cpp's on_fault reports a fault's address, which is how an
// over-read into an input's fence becomes out_of_bounds_read): an implementation that set its own could catch the
// fault and jump back, hiding the read. In the run phase, setting an action for SIGSEGV, SIGBUS, SIGILL or SIGFPE
// fails with EPERM (asking for the current one, a null new action, does not): not a violation, since a device
// runtime does it in good faith (PoCL's LLVM registers cleanup handlers when it compiles a kernel), and the fault it
// would have caught reaches on_fault all the same. Not in the load phase: a device runtime's threads started before
// the sandbox run without the load filter (it is not synchronized to them) and may set their handlers during
// kwb_setup; the worker sets its own again as the run phase begins, after which no thread can change them. They are
// a filter of their own, loaded just before the run filter. Not on a device runtime that keeps the load filter for its
// run phase (RuntimeSandboxNeeds::strict_run_filter false: PoCL compiles inside kwb_run on threads no filter covers,
// and its handlers must stay replaceable by the worker's before each call): there the gap stays (docs/checking.md).
void add_fault_handler_rules(FilterBuilder& f) {
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) {
    f.add(SCMP_ACT_ERRNO(EPERM), "rt_sigaction",
          {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(sig)), SCMP_A1(SCMP_CMP_NE, 0)});
  }
}

void add_load_rules(FilterBuilder& f, const SandboxPolicy& p, pid_t self, bool landlock) {
  for (const char* name : k_always_denied) {
    if (p.runtime.spawn && is_in(name, k_spawn_calls)) continue;
    if (may_write_files(p, landlock) && is_in(name, k_cache_calls)) continue;
    f.add(k_deny, name);
  }
  // glibc's pthread_create tries clone3 first; its flags live in memory seccomp cannot read, so clone3 says ENOSYS
  // and glibc falls back to clone, whose flags are a register.
  f.add(SCMP_ACT_ERRNO(ENOSYS), "clone3");
  f.add(SCMP_ACT_ERRNO(ENOSYS), "openat2");  // same reason: its flags are in a struct
  // A new thread (CLONE_THREAD), or, where the runtime starts helpers, a vfork-style child (CLONE_VM | CLONE_VFORK,
  // no CLONE_THREAD: it shares the worker's memory and suspends it until it execs or exits); never a fork. Each
  // combination of the three flags that is not allowed gets a deny rule of its own (one comparison per rule).
  if (threads_allowed(p) || p.runtime.spawn) {
    constexpr scmp_datum_t mask = CLONE_THREAD | CLONE_VM | CLONE_VFORK;
    for (scmp_datum_t combo = 0; combo <= mask; ++combo) {
      if ((combo & ~mask) != 0) continue;
      const bool thread = (combo & CLONE_THREAD) != 0;
      const bool vfork_child = !thread && (combo & (CLONE_VM | CLONE_VFORK)) == (CLONE_VM | CLONE_VFORK);
      if ((thread && threads_allowed(p)) || (vfork_child && p.runtime.spawn)) continue;
      f.add(k_deny, "clone", {SCMP_A0(SCMP_CMP_MASKED_EQ, mask, combo)});
    }
  } else {
    f.add(k_deny, "clone");
  }
  // Opening for writing: denied, except where Landlock confines it to the runtime's own directory or device nodes.
  // Even then nothing is created, truncated or made a temporary file outside the cache directory's own calls.
  const bool writes_confined = may_write_files(p, landlock) || (landlock && !p.runtime.device_paths.empty());
  for (scmp_datum_t flag : k_write_open_flags) {
    const bool plain_write = flag == O_WRONLY || flag == O_RDWR || flag == O_APPEND;
    if (writes_confined && (plain_write || may_write_files(p, landlock))) continue;
    f.add(k_deny, "openat", {SCMP_A2(SCMP_CMP_MASKED_EQ, flag, flag)});
    f.add(k_deny, "open", {SCMP_A1(SCMP_CMP_MASKED_EQ, flag, flag)});
  }
  const auto me = static_cast<scmp_datum_t>(self);
  f.add(k_deny, "kill", {SCMP_A0(SCMP_CMP_NE, me)});
  f.add(k_deny, "tgkill", {SCMP_A0(SCMP_CMP_NE, me)});
  f.add(k_deny, "rt_sigqueueinfo", {SCMP_A0(SCMP_CMP_NE, me)});
  f.add(k_deny, "rt_tgsigqueueinfo", {SCMP_A0(SCMP_CMP_NE, me)});
  // The SIGSYS handler is the worker's: the implementation may neither replace nor ignore it.
  f.add(k_deny, "rt_sigaction", {SCMP_A0(SCMP_CMP_EQ, SIGSYS)});
  for (scmp_datum_t option : {PR_SET_DUMPABLE, PR_SET_PTRACER, PR_SET_MM, PR_SET_SECUREBITS, PR_CAP_AMBIENT}) {
    f.add(k_deny, "prctl", {SCMP_A0(SCMP_CMP_EQ, option)});
  }
  // Typing into a terminal kwb's user owns (without Landlock, a constructor could open the controlling tty).
  f.add(k_deny, "ioctl", {SCMP_A1(SCMP_CMP_EQ, TIOCSTI)});
  f.add(k_deny, "ioctl", {SCMP_A1(SCMP_CMP_EQ, TIOCLINUX)});
  add_signal_routing_rules(f, k_deny);
  f.add(k_deny, "prlimit64", {SCMP_A2(SCMP_CMP_NE, 0)});          // reading a limit is fine, setting one is not
  f.add(k_deny, "sched_setaffinity", {SCMP_A0(SCMP_CMP_NE, 0)});  // only the calling thread
}

void add_run_rules(FilterBuilder& f, const SandboxPolicy& p, pid_t self) {
  constexpr uint32_t allow = SCMP_ACT_ALLOW;
  // The request loop and any reasonable kernel: I/O on descriptors the worker already has, memory, futexes,
  // clocks, signals to itself, exit.
  f.add_all(allow, {"read",
                    "write",
                    "readv",
                    "writev",
                    "pread64",
                    "lseek",
                    "close",
                    "fstat",
                    "newfstatat",
                    "statx",
                    "recvmsg",
                    "sendmsg",
                    "sendto",
                    "recvfrom",
                    "poll",
                    "ppoll",
                    "munmap",
                    "mremap",
                    "madvise",
                    "brk",
                    "futex",
                    "set_robust_list",
                    "rseq",
                    "sched_yield",
                    "sched_getaffinity",
                    "getcpu",
                    "membarrier",
                    "nanosleep",
                    "clock_nanosleep",
                    "clock_gettime",
                    "clock_getres",
                    "gettimeofday",
                    "time",
                    "getpid",
                    "gettid",
                    "getppid",
                    "getuid",
                    "geteuid",
                    "getgid",
                    "getegid",
                    "getrandom",
                    "exit",
                    "exit_group",
                    "restart_syscall",
                    "rt_sigreturn",
                    "rt_sigprocmask",
                    "sigaltstack",
                    "getrlimit",
                    "sysinfo",
                    "uname"});
  // Memory, but never executable: no code can be created or changed after setup.
  f.add(allow, "mmap", {SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)});
  f.add(allow, "rt_sigaction", {SCMP_A0(SCMP_CMP_NE, SIGSYS)});  // but the faults': the filter stacked on this one
  const auto me = static_cast<scmp_datum_t>(self);
  f.add(allow, "kill", {SCMP_A0(SCMP_CMP_EQ, me)});
  f.add(allow, "tgkill", {SCMP_A0(SCMP_CMP_EQ, me)});
  f.add(allow, "prlimit64", {SCMP_A2(SCMP_CMP_EQ, 0)});
  f.add(SCMP_ACT_ERRNO(ENOSYS), "clone3");
  if (threads_allowed(p)) {
    f.add(allow, "clone", {SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD)});
    // Thread stacks get their guard pages with mprotect; never PROT_EXEC, and the worker's own code and RELRO are
    // sealed, so this cannot patch the harness.
    f.add(allow, "mprotect", {SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)});
    f.add(allow, "sched_setaffinity", {SCMP_A0(SCMP_CMP_EQ, 0)});
  }
}

}  // namespace

void harden_process() {
  (void)::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  lower_limit(RLIMIT_CORE, 0, 0);
}

std::string enter_profile_sandbox(int program_fd, std::vector<std::string>& features) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno_text("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return errno_text("prctl(PR_SET_DUMPABLE)", errno);
  features = {"no_new_privs", "not_dumpable"};
  if (drop_capabilities()) features.push_back("no_capabilities");
  // The program comes from the parent (worker/profile_filter.h): libseccomp misbehaves under valgrind, which does
  // not know seccomp(2); prctl(PR_SET_SECCOMP) it passes through.
  std::vector<sock_filter> program;
  const off_t size = ::lseek(program_fd, 0, SEEK_END);
  if (size > 0 && size % static_cast<off_t>(sizeof(sock_filter)) == 0 && size < (1 << 20)) {
    program.resize(static_cast<size_t>(size) / sizeof(sock_filter));
    if (::pread(program_fd, program.data(), static_cast<size_t>(size), 0) != size) program.clear();
  }
  if (program.empty()) return "the parent sent no usable profile filter";
  sock_fprog prog{static_cast<unsigned short>(program.size()), program.data()};
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
    return errno_text("prctl(PR_SET_SECCOMP, profile filter)", errno);
  }
  features.push_back("seccomp:profile");
  return "";
}

std::string confine_paths(const PathConfinement& c, std::vector<std::string>& features) {
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) {
    features.push_back("landlock:unavailable");
    return "";
  }
  uint64_t handled = 0;
  const long ruleset = create_full_ruleset(abi, handled);
  if (ruleset < 0) return errno_text("landlock_create_ruleset", errno);
  const int rs = static_cast<int>(ruleset);
  std::string e;
  for (const std::string& p : c.read_paths) {
    if (e.empty()) e = add_path_rule(rs, p, k_fs_execute | k_fs_read_file | k_fs_read_dir, handled);
  }
  for (const std::string& p : c.write_paths) {
    // Everything but executing: nothing written there may be started as a program.
    if (e.empty()) e = add_path_rule(rs, p, handled & ~k_fs_execute, handled);
  }
  return restrict_self(rs, e, abi, features);
}

struct Sandbox::Filters {
  scmp_filter_ctx load = nullptr;
  scmp_filter_ctx run = nullptr;
  scmp_filter_ctx faults = nullptr;  // stacked on the run filter: add_fault_handler_rules
  std::string error;
  Filters() = default;
  ~Filters() {
    if (load != nullptr) ::seccomp_release(load);
    if (run != nullptr) ::seccomp_release(run);
    if (faults != nullptr) ::seccomp_release(faults);
  }
  Filters(const Filters&) = delete;  // owns the two contexts
  Filters& operator=(const Filters&) = delete;
};

Sandbox::Sandbox(const SandboxPolicy& policy) : m_policy(policy), m_filters(std::make_unique<Filters>()) {
  // Both filters are built now, while allocating and resolving names is unrestricted.
  const pid_t self = ::getpid();
  {
    FilterBuilder load(SCMP_ACT_ALLOW);
    const bool landlock = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION) >= 1;
    add_load_rules(load, policy, self, landlock);
    m_filters->load = load.release(m_filters->error);
  }
  if (m_filters->error.empty()) {
    FilterBuilder run(k_deny);
    // Threads started by kwb_setup must get the run filter too.
    run.attr(SCMP_FLTATR_CTL_TSYNC, 1);
    add_run_rules(run, policy, self);
    m_filters->run = run.release(m_filters->error);
  }
  if (m_filters->error.empty()) {
    // A filter of its own, allowing everything else: inside one filter libseccomp lets the run filter's broader
    // allow for rt_sigaction win over these; stacked, the kernel takes the most restrictive answer of all filters.
    FilterBuilder faults(SCMP_ACT_ALLOW);
    faults.attr(SCMP_FLTATR_CTL_TSYNC, 1);
    add_fault_handler_rules(faults);
    m_filters->faults = faults.release(m_filters->error);
  }
}

Sandbox::~Sandbox() = default;

std::string Sandbox::enter_load_phase(const std::string& artifact) {
  if (!m_filters->error.empty()) return m_filters->error;
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno_text("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return errno_text("prctl(PR_SET_DUMPABLE)", errno);
  m_features = {"no_new_privs", "not_dumpable"};
  apply_limits(m_policy);
  m_features.push_back("rlimits");
  if (drop_capabilities()) m_features.push_back("no_capabilities");
  SealCount seals;
  ::dl_iterate_phdr(seal_object, &seals);
  m_features.push_back(seals.sealed > 0 ? "mseal:" + std::to_string(seals.sealed)
                                        : "mseal:unavailable(" + std::string(std::strerror(seals.last_error)) + ")");
  if (std::string e = apply_landlock(artifact, m_policy.runtime, m_features); !e.empty()) return e;
  if (const int rc = ::seccomp_load(m_filters->load); rc != 0) return errno_text("seccomp_load(load filter)", -rc);
  m_features.push_back("seccomp:load");
  return "";
}

std::string Sandbox::enter_run_phase() {
  if (!m_policy.runtime.strict_run_filter) {
    // The device runtime compiles, links and loads code inside kwb_run (backend/backend.h): the load phase's
    // deny-list and Landlock stay in force instead of the allow-list.
    m_features.push_back("seccomp:run=load(device runtime)");
    return "";
  }
  if (m_filters->run == nullptr) return m_filters->error.empty() ? "no run filter" : m_filters->error;
  // The fault-handler filter first: the run filter, an allow-list, does not allow seccomp(2) itself.
  if (m_filters->faults == nullptr) return "no fault-handler filter";
  if (const int rc = ::seccomp_load(m_filters->faults); rc != 0) {
    return errno_text("seccomp_load(fault-handler filter)", -rc);
  }
  m_features.push_back("seccomp:fault_handlers");
  if (const int rc = ::seccomp_load(m_filters->run); rc != 0) return errno_text("seccomp_load(run filter)", -rc);
  m_features.push_back("seccomp:run");
  return "";
}

}  // namespace kwb
