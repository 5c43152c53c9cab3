// kwb-generator-shim: the first program inside an experiment generator's bubblewrap sandbox (docs/threat-model.md,
// "Generators"). bwrap has made the sandbox's mounts and namespaces and dropped every capability; the shim then
//
//   0. when kwb gave the attempt a model proxy (KWB_MODEL_SOCKET), starts the loopback bridge to it
//      (shim/loopback_bridge.h): a listener on 127.0.0.1 in the sandbox's own network namespace, for agents that
//      speak only TCP;
//   1. sets PR_SET_NO_NEW_PRIVS and loads a seccomp filter that hands every call naming a path, every socket that
//      is not AF_UNIX and every call naming a peer's address (connect, sendto) to a supervisor (SECCOMP_RET_USER_NOTIF;
//      experiment/generator_syscalls.h lists them), refuses io_uring (ENOSYS: its operations would open files without a
//      system call the filter sees; programs fall back to plain calls) and refuses a second listener (a filter of the
//      generator's own would take the notifications before kwb's);
//   2. sends the filter's notification descriptor to kwb over the socket it inherited as fd 3 (SCM_RIGHTS) and
//      closes both: the generator can neither answer its own calls nor talk to kwb;
//   3. executes the generator (its path as kwb resolved it, then its argv).
//
//   kwb-generator-shim PROGRAM ARGV0 ARGS...
//
// It is installed inside the sandbox, after bwrap's setup, so that the paths kwb sees are the generator's (bwrap's own
// calls are not supervised). Any failure before step 3 is reported on stderr and ends it with status 125: the
// generator never runs unsupervised.
#include "experiment/generator_syscalls.h"
#include "experiment/shim/loopback_bridge.h"
#include "util/fd_passing.h"

#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif

namespace {

[[noreturn]] void fail(const std::string& what) {
  const std::string msg = "kwb-generator-shim: " + what + "\n";
  (void)!::write(2, msg.data(), msg.size());
  ::_exit(kwb::k_generator_shim_failed);
}

// libseccomp returns -errno.
[[noreturn]] void fail_rc(const std::string& what, int rc) { fail(what + ": " + std::strerror(-rc)); }

int load_filter() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(std::string("PR_SET_NO_NEW_PRIVS: ") + std::strerror(errno));
  scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) fail("seccomp_init failed");
  int rc = 0;
  for (const kwb::GeneratorPathSyscall& s : kwb::k_generator_path_syscalls) {
    const int nr = ::seccomp_syscall_resolve_name(s.name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture (kwb skips it too)
    if ((rc = ::seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, nr, 0)) < 0) {
      fail_rc(std::string("cannot supervise ") + s.name +
                  " (seccomp user notification needs Linux 5.5 and "
                  "libseccomp 2.5)",
              rc);
    }
  }
  if ((rc = ::seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX))) < 0) {
    fail_rc("cannot supervise socket", rc);
  }
  // Where a socket sends: connect always, sendto when it names an address (argument 4); a connected socket's send and
  // write name none (generator_syscalls.h says why sendmsg is not among them).
  for (const kwb::GeneratorAddressSyscall& s : kwb::k_generator_address_syscalls) {
    const int nr = ::seccomp_syscall_resolve_name(s.name);
    if (nr == __NR_SCMP_ERROR) continue;
    rc = s.address_arg == 4 ? ::seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, nr, 1, SCMP_A4(SCMP_CMP_NE, 0))
                            : ::seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, nr, 0);
    if (rc < 0) fail_rc(std::string("cannot supervise ") + s.name, rc);
  }
  for (const int nr : {SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter), SCMP_SYS(io_uring_register)}) {
    if ((rc = ::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0)) < 0) fail_rc("cannot refuse io_uring", rc);
  }
  if ((rc = ::seccomp_rule_add(
           ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(seccomp), 1,
           SCMP_A1(SCMP_CMP_MASKED_EQ, SECCOMP_FILTER_FLAG_NEW_LISTENER, SECCOMP_FILTER_FLAG_NEW_LISTENER))) < 0) {
    fail_rc("cannot refuse a second listener", rc);
  }
  if ((rc = ::seccomp_load(ctx)) < 0) {
    fail_rc("cannot load the supervising seccomp filter (seccomp user notification needs Linux 5.5)", rc);
  }
  const int fd = ::seccomp_notify_fd(ctx);
  if (fd < 0) fail_rc("the seccomp filter has no notification descriptor", fd);
  ::seccomp_release(ctx);  // the filter stays loaded; the descriptor is ours to close
  return fd;
}

void send_fd(int socket_fd, int fd) {
  const char byte = 'n';
  const int fds[] = {fd};
  if (kwb::send_with_fds(socket_fd, &byte, 1, fds) != 1) {
    fail(std::string("cannot hand the notification descriptor to kwb: ") + std::strerror(errno));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) fail("usage: kwb-generator-shim PROGRAM ARGV0 ARGS...");
  if (const char* proxy = std::getenv("KWB_MODEL_SOCKET"); proxy != nullptr && *proxy != '\0') {
    if (!kwb::shim::start_loopback_bridge(proxy)) {
      fail("cannot start the loopback bridge to the model proxy on 127.0.0.1:" +
           std::to_string(kwb::k_model_bridge_port) + ": " + std::strerror(errno));
    }
  }
  const int notify_fd = load_filter();
  send_fd(kwb::k_generator_shim_socket_fd, notify_fd);
  ::close(notify_fd);
  ::close(kwb::k_generator_shim_socket_fd);
  ::execv(argv[1], argv + 2);
  // The generator's own failure (a missing or non-executable program), reported as a shell would, not the sandbox's.
  const int e = errno;
  const std::string msg = std::string("kwb-generator-shim: cannot execute ") + argv[1] + ": " + std::strerror(e) + "\n";
  (void)!::write(2, msg.data(), msg.size());
  return e == ENOENT ? 127 : 126;
}
