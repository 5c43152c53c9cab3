// Who a worker runs as. A worker never runs as root: when kwb runs as root, every process that loads candidate code
// (kwb-worker, kwb-profile-worker under valgrind) switches to the unprivileged "nobody" user before it reads any
// request, and the parent hands it everything it must read or write (the artifact as a descriptor, private
// directories owned by that user). docs/threat-model.md.
#pragma once

#include <grp.h>
#include <pwd.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

namespace kwb {

struct WorkerUser {
  uid_t uid;
  gid_t gid;
};

// The identity workers switch to when the current process is root; nullopt when it is not (workers then run as the
// invoking user, who has no privileges to lose). The parent looks it up and hands it to the worker in
// KWB_WORKER_USER ("uid:gid"), so that no worker runs the name service (worker_user_from_environment).
inline std::optional<WorkerUser> unprivileged_worker_user() {
  if (::geteuid() != 0) return std::nullopt;
  WorkerUser u{65534, 65534};
  if (const passwd* pw = ::getpwnam("nobody"); pw != nullptr && pw->pw_uid != 0) {
    u.uid = pw->pw_uid;
    u.gid = pw->pw_gid;
  }
  return u;
}

// In a worker started as root: the user the parent chose, or nobody's usual ids when it named none.
inline WorkerUser worker_user_from_environment() {
  WorkerUser u{65534, 65534};
  if (const char* v = std::getenv("KWB_WORKER_USER"); v != nullptr) {
    unsigned long uid = 0, gid = 0;
    if (std::sscanf(v, "%lu:%lu", &uid, &gid) == 2 && uid != 0 && gid != 0) {
      u.uid = static_cast<uid_t>(uid);
      u.gid = static_cast<gid_t>(gid);
    }
  }
  return u;
}

}  // namespace kwb
