// `kwb verify BUNDLE`: trusts nothing in the bundle but the raw samples and the recorded checks. It checks the
// manifest and every hash, re-derives every block statistic, interval and verdict from samples.csv, re-applies the
// decision rule to what it re-derived, and reports each disagreement with its file.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kwb {

struct VerifyReport {
  std::vector<std::string> problems;  // "file: what disagrees"
  std::vector<std::string> verified;  // what was re-derived and agreed
  std::vector<std::string> warnings;  // worth a reader's attention, never a reason to fail (provenance_warning)
  bool ok() const { return problems.empty(); }
};

VerifyReport verify_bundle(const std::filesystem::path& dir);

}  // namespace kwb
