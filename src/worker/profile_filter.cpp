#include "worker/profile_filter.h"

#include "util/error.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <string>

namespace kwb {

namespace {

class Rules {
public:
  Rules() : m_ctx(::seccomp_init(SCMP_ACT_ALLOW)) {
    if (m_ctx == nullptr) throw InternalError("seccomp_init failed for the profile filter");
    // The worker sets no_new_privs itself.
    (void)::seccomp_attr_set(m_ctx, SCMP_FLTATR_CTL_NNP, 0);
    (void)::seccomp_attr_set(m_ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  }
  ~Rules() { ::seccomp_release(m_ctx); }
  Rules(const Rules&) = delete;  // owns a libseccomp context
  Rules& operator=(const Rules&) = delete;

  void deny(const char* name, std::initializer_list<scmp_arg_cmp> conditions = {}, int err = EPERM) {
    const int nr = ::seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return;
    const int rc = ::seccomp_rule_add_array(m_ctx, SCMP_ACT_ERRNO(static_cast<uint32_t>(err)), nr,
                                            static_cast<unsigned>(conditions.size()), conditions.begin());
    if (rc != 0)
      throw InternalError("profile filter: seccomp_rule_add(" + std::string(name) + "): " + std::strerror(-rc));
  }
  scmp_filter_ctx get() const { return m_ctx; }

private:
  scmp_filter_ctx m_ctx;
};

}  // namespace

// Denied outright: new programs and processes, another process's memory, the network, sessions and limits,
// namespaces and mounts, kernel objects, credentials, System V IPC and the host's clock and name.
// clang-format off
constexpr const char* k_denied_calls[] = {
    "execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open",
    "pidfd_getfd", "pidfd_send_signal", "process_madvise", "socket", "socketpair", "connect", "bind", "listen",
    "accept", "accept4", "setsid", "setpgid", "setrlimit", "unshare", "setns", "mount", "umount2", "pivot_root",
    "chroot", "bpf", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "init_module",
    "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "keyctl", "add_key", "request_key",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
    "shmget", "shmat", "msgget", "semget", "mq_open", "sethostname", "setdomainname", "settimeofday",
    "clock_settime", "syslog", "fanotify_init", "name_to_handle_at", "open_by_handle_at", "swapon", "swapoff",
    "acct"
};
// clang-format on

UniqueFd profile_filter_program(pid_t worker) {
  Rules r;
  for (const char* name : k_denied_calls) {
    r.deny(name);
  }
  // Threads (valgrind's guest threads) only, never a process.
  r.deny("clone", {SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)});
  r.deny("clone3", {}, ENOSYS);
  const auto me = static_cast<scmp_datum_t>(worker);
  for (const char* name : {"kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"}) {
    r.deny(name, {SCMP_A0(SCMP_CMP_NE, me)});
  }
  for (scmp_datum_t option : {PR_SET_DUMPABLE, PR_SET_PTRACER, PR_SET_MM, PR_SET_SECUREBITS, PR_CAP_AMBIENT}) {
    r.deny("prctl", {SCMP_A0(SCMP_CMP_EQ, option)});
  }
  for (scmp_datum_t req : {TIOCSTI, TIOCLINUX, FIOASYNC, FIOSETOWN, SIOCSPGRP}) {
    r.deny("ioctl", {SCMP_A1(SCMP_CMP_EQ, req)});
  }
  for (scmp_datum_t cmd : {F_SETOWN, F_SETSIG, F_SETOWN_EX}) r.deny("fcntl", {SCMP_A1(SCMP_CMP_EQ, cmd)});
  r.deny("fcntl", {SCMP_A1(SCMP_CMP_EQ, F_SETFL), SCMP_A2(SCMP_CMP_MASKED_EQ, O_ASYNC, O_ASYNC)});

  UniqueFd fd(::memfd_create("kwb-profile-filter", MFD_CLOEXEC));
  if (!fd.valid()) throw_system_error("memfd_create(profile filter)", __FILE__, __LINE__, errno);
  if (const int rc = ::seccomp_export_bpf(r.get(), fd.get()); rc != 0) {
    throw InternalError(std::string("profile filter: seccomp_export_bpf: ") + std::strerror(-rc));
  }
  return fd;
}

}  // namespace kwb
