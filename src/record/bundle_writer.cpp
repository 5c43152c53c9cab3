#include "record/bundle_writer.h"

#include "record/bundle_signature.h"
#include "util/json_text.h"

#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace kwb {

namespace fs = std::filesystem;

BundleWriter::BundleWriter(fs::path dir) : m_dir(std::move(dir)) {
  if (fs::exists(m_dir) && !(fs::is_directory(m_dir) && fs::is_empty(m_dir))) {
    throw UsageError(
        fmt::format("{}: already exists; a bundle is never overwritten (choose a new --output-dir)", m_dir.string()));
  }
  std::error_code ec;
  fs::create_directories(m_dir, ec);
  if (ec) throw Error(ExitCode::io_error, fmt::format("{}: cannot create ({})", m_dir.string(), ec.message()));
}

void BundleWriter::write_text(const std::string& relative, const std::string& text) {
  const fs::path p = m_dir / relative;
  fs::create_directories(p.parent_path());
  write_file_atomic(p, text);
}

void BundleWriter::write_json(const std::string& relative, const nlohmann::json& j) {
  write_text(relative, json_text(j, 2) + "\n");
}

std::string BundleWriter::add_artifact(const fs::path& source, const std::string& name) {
  std::string rel = "artifacts/" + name;
  const fs::path dst = m_dir / rel;
  if (fs::exists(dst)) return rel;  // content-addressed: the same name is the same bytes
  write_text(rel, read_file(source));
  return rel;
}

std::string manifest_text(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::string rel = fs::relative(e.path(), dir).generic_string();
    if (rel == k_manifest_file || rel == k_signature_file || rel.find(".tmp.") != std::string::npos) continue;
    files.push_back(rel);
  }
  std::sort(files.begin(), files.end());
  std::string out;
  for (const std::string& f : files) out += fmt::format("{}  {}\n", sha256_file(dir / f), f);
  return out;
}

std::string BundleWriter::write_manifest() {
  const std::string text = manifest_text(m_dir);
  write_text(k_manifest_file, text);
  return sha256_hex(std::string_view(text));
}

}  // namespace kwb
