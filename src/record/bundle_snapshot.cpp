#include "record/bundle_snapshot.h"

#include "record/bundle_fs.h"
#include "util/fd.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

namespace kwb {

namespace {

// Writes `bytes` to a new file `path` (it must not exist), owner-only.
bool write_new(const std::filesystem::path& path, const std::string& bytes, std::string& why) {
  const UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    why = fmt::format("cannot create {}: {}", path.string(), std::strerror(errno));
    return false;
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      why = fmt::format("cannot write {}: {}", path.string(), std::strerror(errno));
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void remove_quietly(const std::filesystem::path& root) {
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
}

}  // namespace

std::optional<BundleSnapshot> BundleSnapshot::take(const std::filesystem::path& bundle, std::string& why) {
  const BundleFs fs(bundle);
  if (!fs.ok()) {
    why = fs.error();
    return std::nullopt;
  }
  bool truncated = false;
  const std::vector<BundleFs::Entry> entries = fs.walk(truncated);
  if (truncated) {
    why = fmt::format(
        "{}: more than {} entries or deeper than {} folders; a bundle is a few dozen files in two "
        "levels",
        bundle.string(), k_bundle_max_entries, k_bundle_max_depth);
    return std::nullopt;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      ((tmp != nullptr && *tmp != '\0') ? std::filesystem::path(tmp) : std::filesystem::temp_directory_path()) /
      "kwb-bundle.XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    why = fmt::format("cannot create a private folder for a copy of {}: {}", bundle.string(), std::strerror(errno));
    return std::nullopt;
  }
  const std::filesystem::path root = pattern;
  const std::filesystem::path copy = root / "bundle";
  BundleSnapshot snap(std::filesystem::absolute(bundle).lexically_normal(), root, copy);
  if (::mkdir(copy.c_str(), 0700) != 0) {
    why = fmt::format("cannot create {}: {}", copy.string(), std::strerror(errno));
    return std::nullopt;
  }
  size_t total = 0;
  for (const BundleFs::Entry& e : entries) {
    const std::filesystem::path to = copy / e.rel;
    if (e.kind == BundleFs::Kind::directory) {
      if (::mkdir(to.c_str(), 0700) != 0) {
        why = fmt::format("cannot create {}: {}", to.string(), std::strerror(errno));
        return std::nullopt;
      }
      continue;
    }
    if (e.kind != BundleFs::Kind::file) {
      why = fmt::format("{}/{}: {}; a bundle holds only regular files and folders", bundle.string(), e.rel,
                        e.kind == BundleFs::Kind::symlink ? "a symlink" : "not a regular file");
      return std::nullopt;
    }
    std::string read_why;
    const std::optional<std::string> bytes = fs.read(e.rel, read_why, k_bundle_max_file_bytes);
    if (!bytes) {
      why = fmt::format("{}/{}: {}", bundle.string(), e.rel, read_why);
      return std::nullopt;
    }
    total += bytes->size();
    if (total > k_bundle_snapshot_max_bytes) {
      why = fmt::format("{}: over {} GiB in all; a bundle is a few MiB of records and two artifacts", bundle.string(),
                        k_bundle_snapshot_max_bytes >> 30);
      return std::nullopt;
    }
    if (!write_new(to, *bytes, why)) return std::nullopt;
  }
  return snap;
}

BundleSnapshot::BundleSnapshot(BundleSnapshot&& other) noexcept
    : m_origin(std::move(other.m_origin)), m_root(std::move(other.m_root)), m_copy(std::move(other.m_copy)) {
  other.m_root.clear();
}

BundleSnapshot::~BundleSnapshot() {
  if (!m_root.empty()) remove_quietly(m_root);
}

}  // namespace kwb
