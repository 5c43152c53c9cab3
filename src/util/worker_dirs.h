// What a root kwb keeps for its workers outside its own cache, which they cannot reach: folders under
// /var/tmp/kwb-worker-cache (util/worker_user.h, k_worker_cache_root), every one of them root's and writable by root
// alone, so no worker can plant, replace or redirect anything there (docs/threat-model.md, "Who the worker is").
#pragma once

#include <filesystem>
#include <initializer_list>
#include <string>

namespace kwb {

// /var/tmp/kwb-worker-cache/<parts...> with every folder up to the last part created root-owned and writable only by
// root (checked with lstat, so a planted symlink or someone else's folder is refused, never followed). The last part
// is returned, not created.
std::filesystem::path root_owned_path(std::initializer_list<std::string> parts);

// A copy of `artifact` that every worker's user can read but not write, at readable_copy_path(its SHA-256): for the
// profile worker run by root (valgrind reads symbols by file name, and kwb-confine lets it read that one file).
std::filesystem::path readable_copy(const std::filesystem::path& artifact);

}  // namespace kwb
