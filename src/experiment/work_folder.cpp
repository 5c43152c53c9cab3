#include "experiment/work_folder.h"

#include "experiment/generator_sandbox.h"
#include "util/error.h"
#include "util/subprocess.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace kwb {

namespace fs = std::filesystem;

namespace {

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

// Walks `root` and everything below it, to at most k_max_work_depth folders deep, with one descriptor per level (so
// a tree of any depth costs at most that many), never following a symbolic link: every name is looked at relative to
// its folder's descriptor, and folders are opened O_NOFOLLOW, so nothing outside `root` can be reached. It records
// what is past the folder's bounds: a file with a second name (a hard link), a folder deeper than the bound (not
// descended), more bytes than the quota. With an owner (`uid`), it also makes uid:gid the owner of every entry it
// walks; taking back (`handing_over` false), every entry also loses its write permission for group and others and
// its set-id bits (the kernel drops set-id bits on chown too), so that what the generator left writable by all is not
// left so under kwb's user. Nothing races a walk: the generator's processes are not running yet, or are gone.
class TreeWalk {
public:
  TreeWalk(const fs::path& root, std::optional<std::pair<uid_t, gid_t>> owner, bool handing_over)
      : m_root(root), m_owner(owner), m_handing_over(handing_over) {}

  FolderWalk run(std::uint64_t quota_bytes) {
    const int top = ::open(m_root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (top < 0) fail(m_root.string(), errno);
    DirPtr first = open_dir(top, m_root);
    if (m_owner) {
      struct stat top_st {};
      if (::fstat(top, &top_st) != 0) fail(m_root.string(), errno);
      take_folder(top, top_st.st_mode, m_root);
    }
    m_stack.push_back({std::move(first), m_root});
    while (!m_stack.empty()) {
      DIR* d = m_stack.back().dir.get();
      errno = 0;
      const dirent* e = ::readdir(d);
      if (e == nullptr) {
        if (errno != 0) fail(m_stack.back().path.string(), errno);
        m_stack.pop_back();
        continue;
      }
      const std::string name = e->d_name;
      if (name != "." && name != "..") visit(::dirfd(d), name);
    }
    if (m_out.bytes > quota_bytes) {
      m_out.problems.push_back(
          fmt::format("{} bytes in its files, over the folder's quota of {} bytes", m_out.bytes, quota_bytes));
    }
    return std::move(m_out);
  }

private:
  static constexpr mode_t k_stripped = S_IWGRP | S_IWOTH | S_ISUID | S_ISGID;
  struct Frame {
    DirPtr dir;
    fs::path path;
  };

  [[noreturn]] void fail(const std::string& what, int e) const {
    throw Error(
        ExitCode::io_error,
        fmt::format("cannot walk {} (the generator's writable folder){}: {}: {}", m_root.string(),
                    m_owner ? fmt::format(" to make uid {} its owner", m_owner->first) : "", what, std::strerror(e)));
  }

  DirPtr open_dir(int fd, const fs::path& path) const {
    DirPtr dir(::fdopendir(fd));
    if (!dir) {
      const int e = errno;
      ::close(fd);
      fail(path.string(), e);
    }
    return dir;
  }

  // A folder's owner, and (taking back) its mode without group and other write or set-id bits.
  void take_folder(int fd, mode_t mode, const fs::path& path) const {
    if (::fchown(fd, m_owner->first, m_owner->second) != 0) fail(path.string(), errno);
    if (!m_handing_over && ::fchmod(fd, mode & 07777 & ~k_stripped) != 0) fail(path.string(), errno);
  }

  void visit(int dfd, const std::string& name) {
    const fs::path path = m_stack.back().path / name;
    struct stat st {};
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) fail(path.string(), errno);
    if (S_ISDIR(st.st_mode)) {
      descend(dfd, name, st, path);
      return;
    }
    if (st.st_nlink > 1) {
      // Handed over, its owner would own the file under its other names too; left in the folder, it would make
      // every later hand-over refuse the folder.
      m_out.problems.push_back(fmt::format("{} has {} names (a hard link)", path.string(), st.st_nlink));
      return;  // never chowned
    }
    if (S_ISREG(st.st_mode)) m_out.bytes += static_cast<std::uint64_t>(st.st_size);
    if (!m_owner) return;
    if (::fchownat(dfd, name.c_str(), m_owner->first, m_owner->second, AT_SYMLINK_NOFOLLOW) != 0) {
      fail(path.string(), errno);
    }
    // Not a symbolic link (looked at above, and nothing can have replaced it), so fchmodat changes this very entry.
    if (!m_handing_over && !S_ISLNK(st.st_mode) && (st.st_mode & k_stripped) != 0 &&
        ::fchmodat(dfd, name.c_str(), st.st_mode & 07777 & ~k_stripped, 0) != 0) {
      fail(path.string(), errno);
    }
  }

  void descend(int dfd, const std::string& name, const struct stat& st, const fs::path& path) {
    if (static_cast<int>(m_stack.size()) >= k_max_work_depth) {
      if (!m_too_deep) {
        m_out.problems.push_back(
            fmt::format("folders nested deeper than {} levels ({})", k_max_work_depth, path.string()));
      }
      m_too_deep = true;
      return;  // not descended: the walk's descriptors stay bounded
    }
    const int sub = ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) fail(path.string(), errno);
    DirPtr subdir = open_dir(sub, path);
    if (m_owner) take_folder(sub, st.st_mode, path);
    m_stack.push_back({std::move(subdir), path});
  }

  const fs::path& m_root;
  const std::optional<std::pair<uid_t, gid_t>> m_owner;
  const bool m_handing_over;
  FolderWalk m_out;
  std::vector<Frame> m_stack;
  bool m_too_deep = false;
};

}  // namespace

FolderWalk walk_work_folder(const fs::path& root, std::optional<std::pair<uid_t, gid_t>> owner, bool handing_over,
                            std::uint64_t quota_bytes) {
  return TreeWalk(root, owner, handing_over).run(quota_bytes);
}

// Empties `root` (kwb's user owns it again, with the mode it had): rm -rf (coreutils, which removes a tree of any
// depth with a bounded number of descriptors and never follows a symbolic link), then the folder made again.
void reset_work_folder(const fs::path& root) {
  struct stat st {};
  if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error(ExitCode::io_error, fmt::format("cannot reset {} (the generator's writable folder): {}", root.string(),
                                                std::strerror(errno)));
  }
  const CommandResult r =
      run_command({"/bin/rm", "-rf", "--one-file-system", "--", root.string()}, std::chrono::minutes(10));
  std::error_code ec;
  if (r.exit_code != 0 || fs::exists(root, ec) || ::mkdir(root.c_str(), st.st_mode & 07777) != 0 ||
      ::chmod(root.c_str(), st.st_mode & 07777) != 0) {
    throw Error(ExitCode::io_error, fmt::format("cannot reset {} (the generator's writable folder): rm exited {}: {}",
                                                root.string(), r.exit_code, r.output));
  }
}

// A root kwb's generator is another user: bwrap (run as that user) must reach every bind, and that user must read the
// read-only ones. `read` asks for o+r on `p` itself (and o+x when a folder); the folders above need o+x.
void require_reachable_by_others(const fs::path& p, bool read, const std::string& role) {
  fs::path so_far = "/";
  std::vector<fs::path> chain;
  for (const fs::path& part : p.relative_path()) {
    so_far /= part;
    chain.push_back(so_far);
  }
  for (std::size_t i = 0; i + 1 < chain.size(); ++i) {
    struct stat st {};
    if (::stat(chain[i].c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & S_IXOTH) == 0) {
      throw DataError(
          fmt::format("{} ({}): the folder {} above it is not searchable by others (mode {:o}); kwb runs "
                      "generators as a user of their own and cannot bind it: chmod o+x {}",
                      p.string(), role, chain[i].string(), st.st_mode & 07777, chain[i].string()));
    }
  }
  if (!read) return;
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return;  // reported where the spec is checked
  const mode_t need = S_ISDIR(st.st_mode) ? (S_IROTH | S_IXOTH) : S_IROTH;
  if ((st.st_mode & need) != need) {
    throw DataError(
        fmt::format("{} ({}) is not readable by others (mode {:o}); kwb runs generators as a user of "
                    "their own: make it and what is in it readable by all (chmod -R o+rX {})",
                    p.string(), role, st.st_mode & 07777, p.string()));
  }
}

}  // namespace kwb
