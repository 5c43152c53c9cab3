#include "util/fs.h"

#include "util/error.h"
#include "util/fd.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kwb {

void write_file_atomic(const std::filesystem::path& path, std::string_view content) {
  // The temporary name is unpredictable and created exclusively without following a symlink: a name planted in
  // the folder beforehand (a symlink to a file elsewhere) makes the open fail instead of writing through it.
  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) {
    throw Error(ExitCode::io_error, fmt::format("getrandom failed ({})", std::strerror(errno)));
  }
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp.{:016x}", nonce);
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd.valid()) {
      throw Error(ExitCode::io_error, fmt::format("{}: cannot create ({})", tmp.string(), std::strerror(errno)));
    }
    size_t written = 0;
    while (written < content.size()) {
      ssize_t n = ::write(fd.get(), content.data() + written, content.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        throw Error(ExitCode::io_error, fmt::format("{}: write failed ({})", tmp.string(), std::strerror(errno)));
      }
      written += static_cast<size_t>(n);
    }
    if (::fsync(fd.get()) != 0) {
      throw Error(ExitCode::io_error, fmt::format("{}: fsync failed ({})", tmp.string(), std::strerror(errno)));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);  // rename replaces a symlink at `path`; it never writes through one
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    throw Error(ExitCode::io_error, fmt::format("{}: cannot rename into place ({})", path.string(), why));
  }
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError(fmt::format("{}: cannot be read (does it exist, and is it readable?)", path.string()));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kwb
