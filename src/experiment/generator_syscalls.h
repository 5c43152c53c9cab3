// The system calls the generator sandbox's supervisor sees (docs/threat-model.md, "Generators"): every call that
// names a path, and socket. Shared by the two ends that must agree on them: kwb-generator-shim, which installs the
// seccomp filter that hands each of them to kwb (SECCOMP_RET_USER_NOTIF), and the supervisor in kwb
// (generator_sandbox.cpp), which reads each call's paths from these argument positions. Names, not numbers: libseccomp
// resolves them for the architecture at hand, and a name the architecture lacks (open, stat on arm64) is skipped by
// both ends alike.
#pragma once

namespace kwb {

// One path argument: the index of the directory descriptor it is relative to (-1: the working directory, as
// AT_FDCWD) and the index of the path's address.
struct GeneratorPathArg {
  int dirfd_arg = -1;
  int path_arg = -1;
};

struct GeneratorPathSyscall {
  const char* name;
  GeneratorPathArg paths[2];  // the second {-1, -1} unless the call names two paths (rename, link)
  // Whether the call only looks at what the path names (stat, access, readlink, chdir) rather than reading what is
  // in it, running it or changing it. Looking at the folders above what the generator sees (/, the parents of its
  // binds, which are empty inside) is what realpath and getcwd do, and is no attempt to reach outside; opening them
  // (a listing) is.
  bool looks_only;
};

// clang-format off
inline constexpr GeneratorPathSyscall k_generator_path_syscalls[] = {
    {"open",        {{-1, 0}, {-1, -1}}, false},
    {"openat",      {{0, 1},  {-1, -1}}, false},
    {"openat2",     {{0, 1},  {-1, -1}}, false},
    {"creat",       {{-1, 0}, {-1, -1}}, false},
    {"execve",      {{-1, 0}, {-1, -1}}, false},
    {"execveat",    {{0, 1},  {-1, -1}}, false},
    {"stat",        {{-1, 0}, {-1, -1}}, true},
    {"lstat",       {{-1, 0}, {-1, -1}}, true},
    {"newfstatat",  {{0, 1},  {-1, -1}}, true},
    {"statx",       {{0, 1},  {-1, -1}}, true},
    {"access",      {{-1, 0}, {-1, -1}}, true},
    {"faccessat",   {{0, 1},  {-1, -1}}, true},
    {"faccessat2",  {{0, 1},  {-1, -1}}, true},
    {"readlink",    {{-1, 0}, {-1, -1}}, true},
    {"readlinkat",  {{0, 1},  {-1, -1}}, true},
    {"chdir",       {{-1, 0}, {-1, -1}}, true},
    {"mkdir",       {{-1, 0}, {-1, -1}}, false},
    {"mkdirat",     {{0, 1},  {-1, -1}}, false},
    {"mknod",       {{-1, 0}, {-1, -1}}, false},
    {"mknodat",     {{0, 1},  {-1, -1}}, false},
    {"rmdir",       {{-1, 0}, {-1, -1}}, false},
    {"unlink",      {{-1, 0}, {-1, -1}}, false},
    {"unlinkat",    {{0, 1},  {-1, -1}}, false},
    {"rename",      {{-1, 0}, {-1, 1}}, false},
    {"renameat",    {{0, 1},  {2, 3}}, false},
    {"renameat2",   {{0, 1},  {2, 3}}, false},
    {"link",        {{-1, 0}, {-1, 1}}, false},
    {"linkat",      {{0, 1},  {2, 3}}, false},
    {"symlink",     {{-1, 1}, {-1, -1}}, false},  // the target (argument 0) is only text stored in the link
    {"symlinkat",   {{1, 2},  {-1, -1}}, false},
    {"truncate",    {{-1, 0}, {-1, -1}}, false},
    {"chmod",       {{-1, 0}, {-1, -1}}, false},
    {"fchmodat",    {{0, 1},  {-1, -1}}, false},
    {"chown",       {{-1, 0}, {-1, -1}}, false},
    {"lchown",      {{-1, 0}, {-1, -1}}, false},
    {"fchownat",    {{0, 1},  {-1, -1}}, false},
    {"utimensat",   {{0, 1},  {-1, -1}}, false},  // a null path names the descriptor itself
};
// clang-format on

// socket(2): the address family is argument 0. AF_UNIX never reaches the supervisor (the filter lets it through:
// local sockets inside the sandbox's own namespaces); every other family does.
inline constexpr const char* k_generator_socket_syscall = "socket";

// The calls that name a peer's address, and where: connect(fd, addr, len) and sendto(..., addr, len). The shim
// hands connect over always, sendto only with an address. sendmsg is not among them: the shim itself hands kwb its
// listener with sendmsg after loading the filter, which would wait on a supervisor that has no listener yet (and the
// address of a sendmsg or sendmmsg lies inside its message). A datagram they send elsewhere goes nowhere (the
// sandbox's network namespace has only its loopback); it is only not recorded.
struct GeneratorAddressSyscall {
  const char* name;
  int address_arg;
  int length_arg;
};
inline constexpr GeneratorAddressSyscall k_generator_address_syscalls[] = {
    {"connect", 1, 2},
    {"sendto", 4, 5},
};

// The port of the loopback bridge kwb-generator-shim starts for an attempt with a model proxy
// (experiment/shim/loopback_bridge.h): `http://127.0.0.1:8100/<endpoint>/...` inside every arm's sandbox.
inline constexpr int k_model_bridge_port = 8100;

// The descriptor kwb-generator-shim finds the supervisor's socket on (passed through bwrap), and the exit status
// with which it reports that it could not set the supervision up (nothing was executed then).
inline constexpr int k_generator_shim_socket_fd = 3;
inline constexpr int k_generator_shim_failed = 125;

}  // namespace kwb
