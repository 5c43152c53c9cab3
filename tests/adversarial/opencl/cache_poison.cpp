// Adversarial candidate. Class: one arm rewrites the other arm's code (issue 24, class 3).
// Cheat: PoCL keeps each implementation's compiled kernels in a runtime cache folder, one per identity, under names
// anyone can derive from world-readable data. When every worker ran as the same user and owned those folders, a
// candidate could write a slowed kernel into the baseline's folder, and a comparison of the baseline against a
// verbatim copy of itself then read +97% PASS. This candidate computes an honest fused RMSNorm; in kwb_setup (where
// files may be opened) it walks every runtime cache folder a root kwb keeps under /var/tmp/kwb-worker-cache (the
// canonical caches and the workers' private copies), and in every folder that is not its own it tries to create a
// file and to open the files there for writing. Each write that succeeds is an escape: it says so on stderr and makes every output wrong (scaled by 2), so that a
// check that sees the escape fails with numeric_mismatch.
// Defense: every worker runs under a user of its own (util/worker_user.h); the canonical caches are root's, 0700,
// and each worker gets a private copy that only its user can write, whose new files the parent adds to its own
// identity's cache once it is gone (worker/worker_process.h); Landlock lets a worker write only its private copy.
// Expected: check PASS (no escape); the other identity's cache is unchanged (opencl_test.
// a_worker_cannot_write_another_identitys_runtime_cache).
#include <CL/cl.h>
#include <kwb/kernel.h>

#include "rmsnorm_opencl_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

KWB_CANDIDATE_ABI

namespace {

using namespace corpus_cl;

Fused g_fused;
int g_escapes = 0;  // writes into another identity's cache that succeeded

void escaped(const std::string& what) {
  ++g_escapes;
  std::fprintf(stderr, "cache_poison: escaped: %s\n", what.c_str());
}

// This worker's own runtime folder (its POCL_CACHE_DIR): writing there is allowed, and no escape.
bool is_own(const std::string& path) {
  const char* own = std::getenv("POCL_CACHE_DIR");
  return own != nullptr && path == own;
}

// Tries to plant a file in `dir`, and to rewrite each regular file in it (and in the folders below it).
void poison_folder(const std::string& dir, int depth) {
  if (is_own(dir)) return;
  const std::string planted = dir + "/kwb_poison";
  const int fd = ::open(planted.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(planted.c_str());
    escaped("created " + planted);
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    const std::string path = dir + "/" + e->d_name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode) && depth < 4) {
      poison_folder(path, depth + 1);
    } else if (S_ISREG(st.st_mode)) {
      const int w = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);  // appends nothing: opening is enough
      if (w >= 0) {
        ::close(w);
        escaped("opened for writing " + path);
      }
    }
  }
  ::closedir(d);
}

// Every identity's folder under `root` except this worker's own.
void poison_root(const std::string& root) {
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') poison_folder(root + "/" + e->d_name, 0);
  }
  ::closedir(d);
}

}  // namespace

// Returns 1 when the backend is not OpenCL, 2 when the program does not build, 3 when the kernel cannot be made.
extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  if (ctx->backend != KWB_BACKEND_OPENCL || ctx->device_context == nullptr || ctx->device == nullptr) return 1;
  for (const char* root : {"/var/tmp/kwb-worker-cache/opencl", "/var/tmp/kwb-worker-cache/workers",
                           "/var/tmp/kwb-worker-cache"}) {
    poison_root(root);
  }
  return g_fused.setup(ctx);
}

// The honest fused kernel on call->stream; after an escape, with 2 eps + 1 in place of eps (wrong outputs the check
// cannot miss).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  if (g_escapes > 0) p->eps = p->eps * 2.0f + 1.0f;
  return g_fused.launch(*p, static_cast<cl_command_queue>(call->stream));
}

extern "C" KWB_EXPORT void kwb_teardown(void) { g_fused.release(); }
