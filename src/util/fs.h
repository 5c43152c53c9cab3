#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace kwb {

// Writes `content` to `path` atomically: a temporary file in the same folder (random name, O_EXCL|O_NOFOLLOW), fsync,
// then rename. A reader (or a run killed with -9) sees the old file or the new one, never half of one (ccache
// AtomicFile), and a planted symlink is never written through.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// Reads a whole file; throws DataError naming the path when it cannot.
std::string read_file(const std::filesystem::path& path);

}  // namespace kwb
