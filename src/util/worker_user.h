// Who a worker runs as. A worker never runs as root: when kwb runs as root, every process that loads candidate code
// (kwb-worker, and kwb-profile-worker with valgrind from kwb-confine on) switches before it reads any request to a
// user of its own, which no other live worker shares and no account uses, and the parent hands it everything it
// must read or write (the artifact as a descriptor, private directories owned by that user). Two arms of a
// comparison, the profile worker and the oracle's worker therefore never share a user: none can write, signal or
// trace another's files or processes. docs/threat-model.md, "Who the worker is".
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kwb {

struct WorkerUser {
  uid_t uid;
  gid_t gid;
};

// The workers' range: 2^31 - 2^24 and the 2^24 ids above it, below the ids whose sign tools get wrong (2^31), above
// every range distributions and systemd hand out (regular and system users, dynamic users, containers' ranges up to
// 0x6FFFFFFF), and with no /etc/passwd entry (setresuid needs none).
inline constexpr uid_t k_worker_id_base = (1u << 31) - (1u << 24);

// Whether workers change user at all: only a root kwb can. Otherwise they run as the invoking user, who has no
// privileges to lose, and the separation between workers is what Landlock and seccomp give (docs/threat-model.md).
inline bool workers_change_user() { return ::geteuid() == 0; }

// The user of the worker whose process id is `pid` (the worker itself, or kwb-confine, which becomes the profile
// worker through exec and keeps its id): unique among live processes, hence among live workers of every kwb on the
// machine (pid_max is at most 2^22). An id comes back only after its worker was reaped, and its parent removes
// everything that worker could write (its private directories) when it reaps it.
inline WorkerUser worker_user_of(pid_t pid) {
  const uid_t id = k_worker_id_base + static_cast<uid_t>(pid);
  return {id, static_cast<gid_t>(id)};
}

// Where a root kwb keeps what workers may read by name: below root-owned folders none of them can write.
inline const std::filesystem::path k_worker_cache_root = "/var/tmp/kwb-worker-cache";

// The read-only copy of an artifact whose SHA-256 is `digest`, for the profile worker (valgrind reads symbols by
// file name): util/worker_dirs.h, readable_copy.
inline std::filesystem::path readable_copy_path(const std::string& digest) {
  return k_worker_cache_root / "objects" / digest / "impl.so";
}

}  // namespace kwb
