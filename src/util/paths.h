#pragma once

#include <filesystem>

namespace kwb {

// The folder holding the running kwb executable (from /proc/self/exe).
std::filesystem::path executable_dir();

// kwb-worker: $KWB_WORKER, else next to the kwb executable.
std::filesystem::path worker_executable();

// kwb-generator-shim, what every experiment generator starts as in its sandbox: $KWB_GENERATOR_SHIM, else next to
// the kwb executable.
std::filesystem::path generator_shim_executable();

// The candidate ABI headers (the folder holding kwb/kernel.h): $KWB_INCLUDE_DIR, else <exe>/include (the build
// copies it there), else the source tree's include/ recorded at build time.
std::filesystem::path abi_include_dir();

// Artifact cache: $KWB_CACHE_DIR, else $XDG_CACHE_HOME/kwb, else ~/.cache/kwb.
std::filesystem::path cache_dir();

// True when `path` (absolute, lexically normal) equals `root` or lies below it.
bool path_is_within(const std::filesystem::path& path, const std::filesystem::path& root);

}  // namespace kwb
