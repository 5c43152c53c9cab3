#include "util/paths.h"

#include "util/error.h"

#include <cstdlib>

#ifndef KWB_SOURCE_INCLUDE_DIR
#error "KWB_SOURCE_INCLUDE_DIR must be defined by the build"
#endif

namespace kwb {

namespace fs = std::filesystem;

fs::path executable_dir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

fs::path worker_executable() {
  if (const char* env = std::getenv("KWB_WORKER"); env != nullptr && *env != '\0') return env;
  return executable_dir() / "kwb-worker";
}

fs::path generator_shim_executable() {
  if (const char* env = std::getenv("KWB_GENERATOR_SHIM"); env != nullptr && *env != '\0') return env;
  return executable_dir() / "kwb-generator-shim";
}

fs::path abi_include_dir() {
  if (const char* env = std::getenv("KWB_INCLUDE_DIR"); env != nullptr && *env != '\0') return env;
  fs::path next_to_exe = executable_dir() / "include";
  if (fs::exists(next_to_exe / "kwb" / "kernel.h")) return next_to_exe;
  return KWB_SOURCE_INCLUDE_DIR;
}

// Always absolute: a relative KWB_CACHE_DIR reached the sandboxed compiler (which runs in another working folder) as
// a relative path for its dependency file, and every build failed with "opening dependency file ...".
fs::path cache_dir() {
  if (const char* env = std::getenv("KWB_CACHE_DIR"); env != nullptr && *env != '\0') return fs::absolute(env);
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return fs::absolute(fs::path(xdg) / "kwb");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return fs::path(home) / ".cache" / "kwb";
  }
  return fs::temp_directory_path() / "kwb-cache";
}

bool path_is_within(const std::filesystem::path& path, const std::filesystem::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

}  // namespace kwb
