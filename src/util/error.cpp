#include "util/error.h"

#include <fmt/format.h>
#include <cstring>

namespace kwb {

void throw_system_error(const char* call_text, const char* file, int line, int saved_errno) {
  throw InternalError(
      fmt::format("{} failed: {} (errno {}) at {}:{}", call_text, std::strerror(saved_errno), saved_errno, file, line));
}

}  // namespace kwb
