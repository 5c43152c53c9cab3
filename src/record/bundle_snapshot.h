// A bundle read once. Whatever decides on a bundle (keep, a campaign's intake, an experiment's finals) must act on
// the bytes it verified: a folder named by path can be swapped between the check and the act (an inotify watch and
// one renameat2(RENAME_EXCHANGE) by whoever owns the folder around it). A snapshot opens the folder once, walks it
// through that descriptor without following any symlink (record/bundle_fs.h), and copies every regular file into a
// private folder (0700, a fresh mkdtemp under the system's temporary folder) that only this process's user can
// write; everything after reads the copy. The copy is removed when the snapshot goes.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace kwb {

// The most a bundle may hold in all, for the copy: a bundle is a few MiB of records and the two arms' artifacts.
inline constexpr size_t k_bundle_snapshot_max_bytes = size_t{4} << 30;

class BundleSnapshot {
public:
  // The copy of `bundle`, or nullopt with `why` naming the path that could not be copied and why (a symlink, a FIFO,
  // a folder past the bounds, over the size cap, unreadable): such a bundle does not verify either.
  static std::optional<BundleSnapshot> take(const std::filesystem::path& bundle, std::string& why);

  BundleSnapshot(BundleSnapshot&& other) noexcept;
  BundleSnapshot& operator=(BundleSnapshot&&) = delete;
  BundleSnapshot(const BundleSnapshot&) = delete;
  BundleSnapshot& operator=(const BundleSnapshot&) = delete;
  ~BundleSnapshot();

  // The private copy: read this, never the folder it came from.
  const std::filesystem::path& path() const { return m_copy; }
  // The folder the user named, for messages and records.
  const std::filesystem::path& origin() const { return m_origin; }

private:
  BundleSnapshot(std::filesystem::path origin, std::filesystem::path root, std::filesystem::path copy)
      : m_origin(std::move(origin)), m_root(std::move(root)), m_copy(std::move(copy)) {}

  std::filesystem::path m_origin;
  std::filesystem::path m_root;  // the private folder; the copy is its `bundle` child
  std::filesystem::path m_copy;
};

}  // namespace kwb
