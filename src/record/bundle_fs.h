// Reads an evidence bundle as untrusted input. A bundle is a folder someone else may have written: its manifest can
// name any path, its files can be symlinks, FIFOs or devices, and its sizes can be anything. Every read goes
// through here, and here:
//   - a path named by the bundle is relative, normalized (no "", ".", ".." components, no control characters) and
//     resolved one component at a time below the bundle's folder without following any symlink (O_NOFOLLOW);
//   - opening never blocks (O_NONBLOCK), and only a regular file is read (fstat after open);
//   - reads stop at a size cap.
// Every refusal is a message naming the path, for verify's problem list; nothing here throws for a hostile bundle.
#pragma once

#include "util/fd.h"

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

// The largest JSON or CSV file a bundle may hold (samples.csv of a long run is the largest: ~60 bytes a sample).
inline constexpr size_t k_bundle_max_text_bytes = size_t{512} << 20;
// The largest file verify hashes (artifacts, profiles' raw outputs).
inline constexpr size_t k_bundle_max_file_bytes = size_t{2} << 30;
// At most this many entries and this deep: a bundle is a few dozen files in two levels.
inline constexpr size_t k_bundle_max_entries = 100000;
inline constexpr int k_bundle_max_depth = 16;

class BundleFs {
public:
  // Opens the folder the user named (following a symlink there is the user's choice). `error()` says why when it
  // cannot be opened.
  explicit BundleFs(const std::filesystem::path& dir);

  bool ok() const { return m_dir.valid(); }
  const std::string& error() const { return m_error; }
  const std::filesystem::path& path() const { return m_path; }

  // Why `rel` is not a path a bundle may name; nullopt when it is.
  static std::optional<std::string> bad_path(std::string_view rel);

  enum class Kind { missing, file, directory, symlink, other };
  // What is at `rel` (lstat semantics: a symlink is reported as a symlink); `missing` also for a bad path.
  Kind kind(std::string_view rel) const;

  // The file's bytes, or nullopt with `why` set (missing, not a regular file, a symlink on the way, over the cap).
  std::optional<std::string> read(std::string_view rel, std::string& why, size_t cap = k_bundle_max_text_bytes) const;
  // The file's SHA-256 (hex), streamed, with the same refusals.
  std::optional<std::string> sha256(std::string_view rel, std::string& why, size_t cap = k_bundle_max_file_bytes) const;

  struct Entry {
    std::string rel;  // generic form, relative to the bundle
    Kind kind = Kind::other;
  };
  // Every entry below the folder, depth first, sorted per folder; never follows a symlink. `truncated` is set when
  // the walk stopped at k_bundle_max_entries or k_bundle_max_depth.
  std::vector<Entry> walk(bool& truncated) const;

private:
  // Opens `rel` for reading as a regular file; -1 with `why` set otherwise.
  UniqueFd open_file(std::string_view rel, std::string& why, size_t cap, size_t& size) const;
  // Opens the folder holding `rel`'s last component, without following symlinks; -1 with `why` set otherwise.
  UniqueFd open_parent(std::string_view rel, std::string& last, std::string& why) const;

  std::filesystem::path m_path;
  UniqueFd m_dir;
  std::string m_error;
};

}  // namespace kwb
