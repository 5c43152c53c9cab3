// The device runtimes' kernel caches (worker_process.h: worker_runtime_cache_key, worker_runtime_cache_dir): one
// canonical cache per identity, and, when workers run as users of their own, each worker's private copy of it and
// its return once the worker is gone.
#include "util/error.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "util/worker_dirs.h"
#include "util/worker_user.h"
#include "worker/worker_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

namespace {

// A device runtime's temporary leftovers in a worker's runtime cache directory, removed by the parent once the worker
// is gone. PoCL (3.x) creates an empty, suffix-less tempfile_XXXXXX there whenever it starts (a file it registers
// with LLVM's remove-on-signal list and never removes on a normal exit): one more per worker, forever. Those go at
// once; they mean nothing to a live worker of another kwb that may share the folder. PoCL's compile temporaries
// (tempfile_XXXXXX.so.o, .so, ...), renamed into place when a compile finishes, are left only by a worker killed
// mid-compile: they go once they are an hour old, when no compile can still be writing them. Regular files directly
// in the folder only, reached through a descriptor of the folder and never through a link.
void tidy_runtime_cache(const std::string& dir) noexcept {
  if (dir.empty()) return;
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return;
  const int listing = ::dup(dfd);
  DIR* d = listing >= 0 ? ::fdopendir(listing) : nullptr;
  if (d == nullptr) {
    if (listing >= 0) ::close(listing);
    ::close(dfd);
    return;
  }
  constexpr std::string_view k_prefix = "tempfile_";
  constexpr size_t k_suffixless = k_prefix.size() + 6;  // mkstemp's XXXXXX
  const time_t stale_before = ::time(nullptr) - 3600;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    if (!name.starts_with(k_prefix)) continue;
    struct stat st {};
    if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    const bool start_marker = name.size() == k_suffixless && st.st_size == 0;
    if (start_marker || st.st_mtime < stale_before) (void)::unlinkat(dfd, e->d_name, 0);
  }
  ::closedir(d);
  ::close(dfd);
}

}  // namespace

std::string worker_runtime_cache_key(BackendKind backend, const std::string& identity_key) {
  Sha256 h;
  std::vector<std::string> parts = {"kwb.runtime-cache.1", std::string(to_string(backend)), identity_key,
                                    executable_sha256(worker_executable())};
  for (std::string& e : worker_environment_identity()) parts.push_back(std::move(e));
  for (const std::string& part : parts) {
    h.update(part);
    h.update(std::string_view("\0", 1));
  }
  return h.hex_digest();
}

std::filesystem::path worker_runtime_cache_dir(BackendKind backend, const std::string& key) {
  namespace fs = std::filesystem;
  if (!workers_change_user()) {
    fs::path dir = cache_dir() / "device-kernels" / to_string(backend) / key;
    fs::create_directories(dir);
    return dir;
  }
  // Root: the identity's canonical cache lives under /var/tmp, below root-owned folders no one else can write
  // (checked, never followed if a symlink), and is itself root's, 0700: no worker ever writes it, or reads it
  // (each gets a private copy, make_private_runtime_dir). A folder left by an older kwb that let workers own it is a
  // cache that anyone could have written: it goes.
  fs::path at = root_owned_path({std::string(to_string(backend)), key});
  struct stat st {};
  if (::lstat(at.c_str(), &st) == 0 && (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 077) != 0)) {
    fs::remove_all(at);
  }
  (void)::mkdir(at.c_str(), 0700);
  if (::lstat(at.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 077) != 0) {
    throw InternalError(fmt::format("{} is not a directory owned by root and private to it; remove it", at.string()));
  }
  return at;
}

namespace {

// Bounds on what moves between a canonical runtime cache and a worker's private copy: PoCL's kernels of one
// identity are a few MiB; anything beyond is left out (a cache miss, a compile at the next first launch).
constexpr uint64_t k_runtime_copy_bytes = 256ull << 20;
constexpr uint64_t k_runtime_file_bytes = 64ull << 20;
constexpr int k_runtime_copy_depth = 16;

// One regular file from `from_dfd` into `to_dfd`, through a temporary renamed into place (a concurrent reader never
// sees half a file). Neither end is ever reached through a link.
bool copy_cache_file(int from_dfd, int to_dfd, const char* name, mode_t mode, const std::optional<WorkerUser>& owner) {
  const int in = ::openat(from_dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return false;
  UniqueFd in_owner(in);
  const std::string tmp = fmt::format(".kwb-copy.{}.{}", ::getpid(), name);
  const int out = ::openat(to_dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0755);
  if (out < 0) return false;
  UniqueFd out_owner(out);
  char buffer[1 << 16];
  bool ok = true;
  for (;;) {
    const ssize_t n = ::read(in, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0 || ::write(out, buffer, static_cast<size_t>(n)) != n) {
      ok = false;
      break;
    }
  }
  if (ok && owner) ok = ::fchown(out, owner->uid, owner->gid) == 0;
  if (ok) ok = ::renameat(to_dfd, tmp.c_str(), to_dfd, name) == 0;
  if (!ok) (void)::unlinkat(to_dfd, tmp.c_str(), 0);
  return ok;
}

// Copies the folders and regular files of `from_dfd` into `to_dfd`, never following a link, within `budget` bytes;
// what `to_dfd` already has is kept, and so are a runtime's temporaries (tempfile_*, tidy_runtime_cache) left out.
// `owner`, when given, owns every folder and file made. Best effort: what cannot be copied is a later cache miss.
void copy_cache_tree(int from_dfd, int to_dfd, const std::optional<WorkerUser>& owner, uint64_t& budget, int depth) {
  if (depth > k_runtime_copy_depth) return;
  const int listing = ::dup(from_dfd);
  DIR* d = listing >= 0 ? ::fdopendir(listing) : nullptr;
  if (d == nullptr) {
    if (listing >= 0) ::close(listing);
    return;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    if (name == "." || name == ".." || name.starts_with("tempfile_") || name.starts_with(".kwb-copy.")) continue;
    struct stat st {};
    if (::fstatat(from_dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    struct stat there {};
    const bool exists = ::fstatat(to_dfd, e->d_name, &there, AT_SYMLINK_NOFOLLOW) == 0;
    if (S_ISDIR(st.st_mode)) {
      if (!exists && ::mkdirat(to_dfd, e->d_name, 0700) != 0) continue;
      const int sub_from = ::openat(from_dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      const int sub_to = ::openat(to_dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      UniqueFd a(sub_from), b(sub_to);
      if (sub_from < 0 || sub_to < 0) continue;
      if (!exists && owner) (void)::fchown(sub_to, owner->uid, owner->gid);
      copy_cache_tree(sub_from, sub_to, owner, budget, depth + 1);
    } else if (S_ISREG(st.st_mode) && !exists) {
      const uint64_t size = static_cast<uint64_t>(st.st_size);
      if (size > k_runtime_file_bytes || size > budget) continue;
      if (copy_cache_file(from_dfd, to_dfd, e->d_name, st.st_mode, owner)) budget -= size;
    }
  }
  ::closedir(d);
}

UniqueFd open_directory(const std::string& path) {
  return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

// Private directories a kwb killed outright (SIGKILL) left behind: no worker lives a day (RLIMIT_CPU is an hour, and
// every visit ends its worker), so a directory untouched that long belongs to none and goes.
void remove_abandoned_private_dirs(const std::filesystem::path& workers) noexcept {
  std::error_code ec;
  const auto day_ago = std::filesystem::file_time_type::clock::now() - std::chrono::hours(24);
  for (const auto& e : std::filesystem::directory_iterator(workers, ec)) {
    std::error_code ec2;
    if (e.path().filename().string().starts_with("w.") && e.is_directory(ec2) && !e.is_symlink(ec2) &&
        e.last_write_time(ec2) < day_ago && !ec2) {
      std::filesystem::remove_all(e.path(), ec2);
    }
  }
}

// A fresh directory only the worker `pid` may use (0700, its user's), seeded with the identity's canonical cache.
std::string make_private_runtime_dir(const std::string& canonical, pid_t pid) {
  std::string dir = root_owned_path({"workers", "w.XXXXXX"}).string();
  remove_abandoned_private_dirs(std::filesystem::path(dir).parent_path());
  if (::mkdtemp(dir.data()) == nullptr) throw_system_error(("mkdtemp(" + dir + ")").c_str(), __FILE__, __LINE__, errno);
  const UniqueFd to = open_directory(dir);
  if (!to.valid()) throw_system_error(("open(" + dir + ")").c_str(), __FILE__, __LINE__, errno);
  const WorkerUser user = worker_user_of(pid);
  if (const UniqueFd from = open_directory(canonical); from.valid()) {
    uint64_t budget = k_runtime_copy_bytes;
    copy_cache_tree(from.get(), to.get(), user, budget, 0);
  }
  if (::fchown(to.get(), user.uid, user.gid) != 0) {
    throw_system_error(("chown(" + dir + ")").c_str(), __FILE__, __LINE__, errno);
  }
  return dir;
}

// Once the worker is gone: the private directory becomes root's and unreachable (a later worker that gets the same
// user cannot touch it), what the runtime compiled there is added to the canonical cache of the identity the worker
// was loaded with (regular files only, bounded, none replaced), and the directory is removed.
void return_private_runtime_dir(const std::string& dir, const std::string& canonical) noexcept {
  if (dir.empty()) return;
  const UniqueFd from = open_directory(dir);
  if (from.valid() && ::fchown(from.get(), 0, 0) == 0 && ::fchmod(from.get(), 0700) == 0) {
    if (const UniqueFd to = open_directory(canonical); to.valid()) {
      uint64_t budget = k_runtime_copy_bytes;
      copy_cache_tree(from.get(), to.get(), std::nullopt, budget, 0);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace

std::string WorkerProcess::use_runtime_cache(const std::string& canonical) {
  end_runtime_cache();
  if (canonical.empty() || !workers_change_user()) {
    m_runtime_cache_dir = canonical;
    return canonical;
  }
  m_runtime_cache_dir = make_private_runtime_dir(canonical, m_pid);
  m_canonical_cache_dir = canonical;
  return m_runtime_cache_dir;
}

void WorkerProcess::end_runtime_cache() noexcept {
  if (m_canonical_cache_dir.empty()) {
    tidy_runtime_cache(m_runtime_cache_dir);
    return;
  }
  return_private_runtime_dir(m_runtime_cache_dir, m_canonical_cache_dir);
  m_runtime_cache_dir.clear();
  m_canonical_cache_dir.clear();
}

}  // namespace kwb
