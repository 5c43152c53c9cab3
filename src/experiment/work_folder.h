// The writable folder a generator works in (experiment/generator_sandbox.h): walked within its bounds without
// following a link, handed to the generator's user and taken back, reset when past them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kwb {

// What a walk of the writable folder found past its bounds (GeneratorSpec::work_quota_bytes, k_max_work_depth).
struct FolderWalk {
  std::vector<std::string> problems;
  std::uint64_t bytes = 0;
};

// Walks `root` and everything below it, to at most k_max_work_depth folders deep, with one descriptor per level (so
// a tree of any depth costs at most that many), never following a symbolic link, and records what is past the
// folder's bounds: a file with a second name (a hard link), a folder deeper than the bound (not descended), more
// bytes than `quota_bytes`. With an owner, it also makes uid:gid the owner of every entry; taking back
// (`handing_over` false), every entry also loses its group and other write permission and its set-id bits. Throws
// Error(io_error) naming the entry when one cannot be looked at or changed.
FolderWalk walk_work_folder(const std::filesystem::path& root, std::optional<std::pair<uid_t, gid_t>> owner,
                            bool handing_over, std::uint64_t quota_bytes);

// Empties `root` (kwb's user owns it again, with the mode it had).
void reset_work_folder(const std::filesystem::path& root);

// When kwb is root a generator runs as another user: bwrap (run as that user) must reach every bind, and that user
// must read the read-only ones. `read` asks for o+r on `p` itself (and o+x when a folder); the folders above need
// o+x. Throws DataError naming the folder and the chmod that fixes it.
void require_reachable_by_others(const std::filesystem::path& p, bool read, const std::string& role);

}  // namespace kwb
