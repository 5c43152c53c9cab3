// Descriptors over a Unix socket (SCM_RIGHTS), for the three places that pass them: the worker's channel
// (worker/channel.h: buffers travel as descriptors), kwb-generator-shim handing kwb its seccomp listener, and the
// supervisor receiving it (experiment/generator_supervisor.h). No exceptions: callers decide what a failure means.
#pragma once

#include "util/fd.h"

#include <sys/types.h>

#include <cstddef>
#include <span>
#include <vector>

namespace kwb {

// The most descriptors one receive takes; more in one message are closed by the kernel (MSG_CTRUNC).
inline constexpr std::size_t k_max_passed_fds = 64;

// Sends `size` bytes and `fds` in one sendmsg, retried on EINTR, never raising SIGPIPE. Returns what sendmsg returns
// (the bytes sent, or -1 with errno set).
ssize_t send_with_fds(int socket_fd, const void* data, std::size_t size, std::span<const int> fds);

// Receives at most `size` bytes and the descriptors that came with them (close-on-exec, appended to `fds`), retried
// on EINTR; `flags` adds to recvmsg's (MSG_DONTWAIT); `msg_flags`, when given, gets the message's (MSG_TRUNC,
// MSG_CTRUNC). Returns what recvmsg returns (0 at the end, -1 with errno).
ssize_t receive_with_fds(int socket_fd, void* data, std::size_t size, std::vector<UniqueFd>& fds, int flags = 0,
                         int* msg_flags = nullptr);

}  // namespace kwb
