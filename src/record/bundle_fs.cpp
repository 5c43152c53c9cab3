#include "record/bundle_fs.h"

#include "util/sha256.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

namespace kwb {

namespace {

constexpr int k_dir_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
constexpr int k_file_flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;

std::vector<std::string> components(std::string_view rel) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string_view::npos) end = rel.size();
    out.emplace_back(rel.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string errno_text(int e) {
  return e == ELOOP ? "a symlink (a bundle holds regular files only)" : std::strerror(e);
}

BundleFs::Kind kind_of(mode_t m) {
  if (S_ISREG(m)) return BundleFs::Kind::file;
  if (S_ISDIR(m)) return BundleFs::Kind::directory;
  if (S_ISLNK(m)) return BundleFs::Kind::symlink;
  return BundleFs::Kind::other;
}

}  // namespace

BundleFs::BundleFs(const std::filesystem::path& dir) : m_path(dir) {
  m_dir = UniqueFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!m_dir.valid())
    m_error = fmt::format("{}: cannot open the bundle folder ({})", dir.string(), std::strerror(errno));
}

std::optional<std::string> BundleFs::bad_path(std::string_view rel) {
  if (rel.empty()) return "an empty path";
  if (rel.size() > 1024) return "a path over 1024 characters";
  if (rel.front() == '/') return "an absolute path (bundle paths are relative to the bundle)";
  for (unsigned char c : rel) {
    if (c < 0x20 || c == 0x7f) return "a path with a control character";
  }
  for (const std::string& c : components(rel)) {
    if (c.empty() || c == "." || c == "..") return "a path that is not normalized (empty, '.' or '..' component)";
  }
  return std::nullopt;
}

UniqueFd BundleFs::open_parent(std::string_view rel, std::string& last, std::string& why) const {
  if (!ok()) {
    why = m_error;
    return {};
  }
  if (auto bad = bad_path(rel)) {
    why = *bad;
    return {};
  }
  std::vector<std::string> parts = components(rel);
  last = parts.back();
  parts.pop_back();
  UniqueFd cur(::fcntl(m_dir.get(), F_DUPFD_CLOEXEC, 0));
  for (const std::string& p : parts) {
    UniqueFd next(::openat(cur.get(), p.c_str(), k_dir_flags));
    if (!next.valid()) {
      why = fmt::format("folder '{}' on the way: {}", p, errno == ENOTDIR ? "not a folder" : errno_text(errno));
      return {};
    }
    cur = std::move(next);
  }
  return cur;
}

BundleFs::Kind BundleFs::kind(std::string_view rel) const {
  std::string last, why;
  UniqueFd parent = open_parent(rel, last, why);
  if (!parent.valid()) return Kind::missing;
  struct stat st {};
  if (::fstatat(parent.get(), last.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Kind::missing;
  return kind_of(st.st_mode);
}

UniqueFd BundleFs::open_file(std::string_view rel, std::string& why, size_t cap, size_t& size) const {
  std::string last;
  UniqueFd parent = open_parent(rel, last, why);
  if (!parent.valid()) return {};
  UniqueFd fd(::openat(parent.get(), last.c_str(), k_file_flags));
  if (!fd.valid()) {
    why = errno == ENOENT ? "missing" : errno_text(errno);
    return {};
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    why = std::strerror(errno);
    return {};
  }
  if (!S_ISREG(st.st_mode)) {
    why = S_ISDIR(st.st_mode) ? "a folder, not a file" : "not a regular file (a bundle holds regular files only)";
    return {};
  }
  if (static_cast<uint64_t>(st.st_size) > cap) {
    why = fmt::format("{} bytes, over the {} byte limit for a bundle file", st.st_size, cap);
    return {};
  }
  // A regular file reads without blocking either way; clear the flag so short reads mean end of file.
  ::fcntl(fd.get(), F_SETFL, 0);
  size = static_cast<size_t>(st.st_size);
  return fd;
}

namespace {

// Feeds the file to `sink` in chunks; false with `why` set on a read error or when it grows past `cap`.
template <typename Sink>
bool read_chunks(int fd, size_t cap, std::string& why, Sink&& sink) {
  char buf[1 << 16];
  size_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::strerror(errno);
      return false;
    }
    if (n == 0) return true;
    total += static_cast<size_t>(n);
    if (total > cap) {
      why = fmt::format("grew past the {} byte limit while being read", cap);
      return false;
    }
    sink(buf, static_cast<size_t>(n));
  }
}

}  // namespace

std::optional<std::string> BundleFs::read(std::string_view rel, std::string& why, size_t cap) const {
  size_t size = 0;
  UniqueFd fd = open_file(rel, why, cap, size);
  if (!fd.valid()) return std::nullopt;
  std::string out;
  out.reserve(size);
  if (!read_chunks(fd.get(), cap, why, [&](const char* p, size_t n) { out.append(p, n); })) return std::nullopt;
  return out;
}

std::optional<std::string> BundleFs::sha256(std::string_view rel, std::string& why, size_t cap) const {
  size_t size = 0;
  UniqueFd fd = open_file(rel, why, cap, size);
  if (!fd.valid()) return std::nullopt;
  Sha256 h;
  if (!read_chunks(fd.get(), cap, why, [&](const char* p, size_t n) { h.update(std::string_view(p, n)); })) {
    return std::nullopt;
  }
  return h.hex_digest();
}

std::vector<BundleFs::Entry> BundleFs::walk(bool& truncated) const {
  truncated = false;
  std::vector<Entry> out;
  if (!ok()) return out;
  std::function<void(int, const std::string&, int)> visit = [&](int dirfd, const std::string& prefix, int depth) {
    UniqueFd own(::fcntl(dirfd, F_DUPFD_CLOEXEC, 0));
    DIR* d = ::fdopendir(own.get());
    if (d == nullptr) return;
    own.release();
    std::vector<std::pair<std::string, Kind>> names;
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      struct stat st {};
      if (::fstatat(::dirfd(d), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      names.emplace_back(n, kind_of(st.st_mode));
      if (out.size() + names.size() > k_bundle_max_entries) {
        truncated = true;
        break;
      }
    }
    std::sort(names.begin(), names.end());
    for (const auto& [n, k] : names) {
      if (out.size() >= k_bundle_max_entries) {
        truncated = true;
        break;
      }
      const std::string rel = prefix.empty() ? n : prefix + "/" + n;
      out.push_back({rel, k});
      if (k != Kind::directory) continue;
      if (depth + 1 >= k_bundle_max_depth) {
        truncated = true;
        continue;
      }
      UniqueFd sub(::openat(::dirfd(d), n.c_str(), k_dir_flags));
      if (sub.valid()) visit(sub.get(), rel, depth + 1);
    }
    ::closedir(d);
  };
  visit(m_dir.get(), "", 0);
  return out;
}

}  // namespace kwb
