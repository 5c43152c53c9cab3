// Reads an evidence bundle back: the JSON files and the raw samples. Used by verify and report, which must work
// from the bundle alone (no task folder, no cache, no machine).
#pragma once

#include "record/bundle_fs.h"
#include "record/decision_record.h"
#include "record/plan.h"
#include "record/samples.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

struct BundleData {
  std::filesystem::path dir;
  std::shared_ptr<const BundleFs> fs;    // every further read of the bundle goes through this
  std::vector<BundleFs::Entry> entries;  // what the folder holds, symlinks and all (never followed)
  bool entries_truncated = false;
  // plan.json, read strictly (record/plan.h); empty when it is missing or does not parse, and then plan_problem
  // says why.
  std::optional<Plan> plan;
  std::string plan_problem;
  // decision.json, read strictly (record/decision_record.h); empty when missing (a run that did not finish) or when
  // it does not parse, and then decision_problem says why.
  std::optional<DecisionRecord> decision;
  std::string decision_problem;
  nlohmann::json environment, stages, controls, final_;  // {} when absent
  std::map<std::string, nlohmann::json> checks;          // by file stem: baseline, candidate, control_x, ...
  std::map<std::string, nlohmann::json> profiles;        // by file stem
  std::optional<nlohmann::json> aa, ab;
  std::vector<SampleRow> samples;
  std::vector<std::string> problems;  // files missing or unreadable
};

// Never throws for a damaged or hostile bundle: what cannot be read is listed in `problems` (see bundle_fs.h for
// what is refused).
BundleData read_bundle(const std::filesystem::path& dir);

}  // namespace kwb
