// Writes an evidence bundle: one folder per run, never overwritten. Every file is written atomically, and the
// stage log (stages.json) is rewritten after each stage, so a run killed at any point (even with -9) leaves every
// completed stage readable. MANIFEST.sha256 (sha256sum -c compatible) is written last.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace kwb {

inline constexpr const char* k_manifest_file = "MANIFEST.sha256";

class BundleWriter {
public:
  // Throws UsageError when `dir` exists and is not empty (a bundle is never overwritten).
  explicit BundleWriter(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return m_dir; }
  void write_text(const std::string& relative, const std::string& text);
  void write_json(const std::string& relative, const nlohmann::json& j);
  // Copies a file in as artifacts/<name>; returns the relative path.
  std::string add_artifact(const std::filesystem::path& source, const std::string& name);
  // Hashes every file (but the manifest itself and signature.json beside it) into MANIFEST.sha256, sorted by path;
  // returns the SHA-256 of the manifest's text, which the ledger records and the signature signs.
  std::string write_manifest();

private:
  std::filesystem::path m_dir;
};

// "<sha256>  <path>" lines for every regular file under `dir` except the manifest and its signature, sorted.
std::string manifest_text(const std::filesystem::path& dir);

}  // namespace kwb
