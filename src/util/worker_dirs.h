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

// The same for a program a worker's user must execute (kwb-profile-worker, which valgrind opens by name as that
// user): a copy under its own name, mode 0555, at /var/tmp/kwb-worker-cache/programs/<SHA-256>/<name>. kwb's own
// folder may be one no other user can enter (a clone under /root, a mktemp folder), so the original cannot serve.
std::filesystem::path executable_copy(const std::filesystem::path& program);

}  // namespace kwb
