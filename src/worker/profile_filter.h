// The seccomp program of kwb-profile-worker, built by the parent with libseccomp and handed to the worker as a
// memfd of BPF instructions: valgrind runs in the profile worker's process and does not know seccomp(2), and
// libseccomp fails under it (worker/sandbox.h, enter_profile_sandbox).
#pragma once

#include "util/fd.h"

#include <sys/types.h>

namespace kwb {

// A deny-list answering EPERM, for the process `worker` (signals to any other pid are denied): no processes (fork,
// non-thread clone, exec), sessions or process groups, no ptrace or process_vm_*, no sockets, no signal routing
// (F_SETOWN, F_SETSIG, O_ASYNC, FIOASYNC, FIOSETOWN, SIOCSPGRP), no namespaces, mounts, modules, keys, credential
// changes or SysV IPC. Throws InternalError when libseccomp cannot build it.
UniqueFd profile_filter_program(pid_t worker);

}  // namespace kwb
