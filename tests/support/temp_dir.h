// A test's own temporary folder: made empty under a name no other test or process has (mkdtemp in
// std::filesystem::temp_directory_path(), TMPDIR or /tmp), and removed with everything in it when the object goes.
// Its mode is 0755, a folder's as create_directories makes it, so the users kwb's sandboxes run as (when the tests
// run as root) can reach what kwb writes under it.
//
//   const TempDir dir("kwb-ledger-test");
//   write_file_atomic(dir / "f.json", "{}");
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

namespace kwb::test {

class TempDir {
public:
  explicit TempDir(const std::string& stem = "kwb-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (stem + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    m_path = pattern;
    std::filesystem::permissions(m_path, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                             std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                             std::filesystem::perms::others_exec);
  }
  ~TempDir() {
    std::error_code ignored;  // a test that failed half-way leaves whatever it left; none of it must outlive it
    std::filesystem::remove_all(m_path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return m_path; }
  std::string string() const { return m_path.string(); }
  operator const std::filesystem::path&() const { return m_path; }  // NOLINT: a TempDir is used as its path
  std::filesystem::path operator/(const std::filesystem::path& name) const { return m_path / name; }

private:
  std::filesystem::path m_path;
};

}  // namespace kwb::test
