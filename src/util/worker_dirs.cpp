#include "util/worker_dirs.h"

#include "util/error.h"
#include "util/sha256.h"
#include "util/worker_user.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kwb {

std::filesystem::path root_owned_path(std::initializer_list<std::string> parts) {
  std::filesystem::path at = k_worker_cache_root;
  for (const std::string& part : parts) {
    (void)::mkdir(at.c_str(), 0711);
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) != 0) {
      throw InternalError(
          fmt::format("{} is not a directory owned by root and writable only by it; remove it", at.string()));
    }
    at /= part;
  }
  return at;
}

std::filesystem::path readable_copy(const std::filesystem::path& artifact) {
  namespace fs = std::filesystem;
  const std::string digest = sha256_file(artifact);
  const fs::path at = root_owned_path({"objects", digest});
  (void)::mkdir(at.c_str(), 0755);
  fs::path copy = readable_copy_path(digest);
  if (!fs::exists(copy) || sha256_file(copy) != digest) {
    const fs::path tmp = at / fmt::format("impl.so.tmp.{}", ::getpid());
    fs::copy_file(artifact, tmp, fs::copy_options::overwrite_existing);
    fs::permissions(tmp,
                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
    fs::rename(tmp, copy);
  }
  return copy;
}

std::filesystem::path executable_copy(const std::filesystem::path& program) {
  namespace fs = std::filesystem;
  const std::string digest = sha256_file(program);
  const fs::path at = root_owned_path({"programs", digest});
  (void)::mkdir(at.c_str(), 0755);
  fs::path copy = at / program.filename();
  if (!fs::exists(copy) || sha256_file(copy) != digest) {
    const fs::path tmp = at / fmt::format("{}.tmp.{}", program.filename().string(), ::getpid());
    fs::copy_file(program, tmp, fs::copy_options::overwrite_existing);
    fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec);
    fs::rename(tmp, copy);
  }
  return copy;
}

}  // namespace kwb
