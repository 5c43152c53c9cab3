// Adversarial candidate. Class: the profile worker is not confined like the timing worker (issue 24, class 4).
// Cheat: honest wherever /proc/self/maps cannot be opened (the timing worker, under Landlock), so it passes every
// check. Where it can (the profile worker under valgrind, which cannot apply Landlock itself), its constructor tries
// what the profile worker used to be able to do, as its user:
//   - write a file in /tmp and in the workers' cache folder (/var/tmp/kwb-worker-cache and what lies below it);
//   - read the command line of its parent, kwb (/proc/<ppid>/cmdline: every path of the run);
//   - open the machine's timing lock for writing (/run/lock/kwb-timing.lock, or the temporary folder's);
//   - read a running bundle's plan.json (every identity key), here the world-readable one the test places at
//     /var/tmp/kwb-profile-confine/bundle/plan.json.
// Each that succeeds is an escape: it is named on stderr, and every output is then scaled by 2 plus the escapes'
// bits (1 /tmp, 2 the cache, 4 the command line, 8 the lock, 16 plan.json), so the profile worker's validation fails
// and the ratio of got to expected in its detail says which succeeded.
// Defense: kwb-confine (src/worker/confine_main.cpp) applies Landlock, rlimits and no_new_privs before it executes
// valgrind, and the worker's own user when kwb is root: it may read the system, the worker and its artifact, and its
// own /proc entry only, and write only its private output folder.
// Expected: kwb profile exit 0 with no failures (profile_test.the_profile_worker_is_confined_by_landlock).
#include "rmsnorm_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

KWB_CANDIDATE_ABI

namespace {

constexpr int k_tmp = 1, k_cache = 2, k_cmdline = 4, k_lock = 8, k_plan = 16;
int g_escapes = 0;  // the bits of the escapes that succeeded

void escaped(int bit, const std::string& what) {
  g_escapes |= bit;
  std::fprintf(stderr, "profile_confine: escaped: %s\n", what.c_str());
}

void try_create(int bit, const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ::close(fd);
  ::unlink(path.c_str());
  escaped(bit, "created " + path);
}

void try_read(int bit, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char byte = 0;
  const ssize_t n = ::read(fd, &byte, 1);
  ::close(fd);
  if (n > 0) escaped(bit, "read " + path);
}

void try_write_open(int bit, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  ::close(fd);
  escaped(bit, "opened for writing " + path);
}

// A file created in `dir` and in every folder up to two levels below it (the caches of each backend's identities).
void try_create_below(int bit, const std::string& dir, int depth) {
  try_create(bit, dir + "/kwb-profile-confine-" + std::to_string(::getpid()));
  if (depth >= 2) return;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.' && e->d_type == DT_DIR) try_create_below(bit, dir + "/" + e->d_name, depth + 1);
  }
  ::closedir(d);
}

__attribute__((constructor)) void escape() {
  const int maps = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (maps < 0) return;  // the timing worker: behave
  ::close(maps);
  try_create(k_tmp, "/tmp/kwb-profile-confine-" + std::to_string(::getpid()));
  try_create_below(k_cache, "/var/tmp/kwb-worker-cache", 0);
  try_read(k_cmdline, "/proc/" + std::to_string(::getppid()) + "/cmdline");
  try_write_open(k_lock, "/run/lock/kwb-timing.lock");
  try_write_open(k_lock, "/tmp/kwb-timing.lock");
  try_read(k_plan, "/var/tmp/kwb-profile-confine/bundle/plan.json");
}

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const auto p = corpus::unpack(*call);
  if (!p) return 1;
  corpus::rmsnorm(*p, p->y);
  if (g_escapes != 0) {
    const int64_t n = p->rows * p->cols;
    const float scale = 2.0f + static_cast<float>(g_escapes);
    for (int64_t i = 0; i < n; ++i) p->y[i] *= scale;
  }
  return 0;
}
