// Reads an evidence bundle back: the JSON files and the raw samples. Used by verify and report, which must work
// from the bundle alone (no task folder, no cache, no machine).
#pragma once

#include "record/bundle_fs.h"
#include "record/plan.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

struct SampleRow {
  std::string comparison;  // aa or ab
  std::string workload;
  int block = 0;
  std::string arm;
  int order_position = 0;
  int64_t pid = 0;
  int sample_index = 0;
  bool warmup = false;
  int input_set = 0;
  int64_t ns = 0;
  bool output_valid = false;
  int64_t device_ns = -1;  // device backends only
  bool has_layout = false;   // the layout columns (bundles written before layout randomization lack them)
  int layout = 0;
  uint32_t stack_offset = 0;
  std::vector<uint32_t> tensor_offsets;
  bool has_cpu_watch = false;  // the CPU watch columns (bundles written before they were recorded lack them)
  int64_t pre_cpu_ns = -1;     // -1: the call was not watched per window (device backends)
  int64_t post_cpu_ns = -1;
  bool has_charge = false;  // ns is window_ns plus the CPU charged outside it (util/cpu_watch.h)
  int64_t window_ns = 0;
  int64_t gap_cpu_ns = -1;
  bool has_outside = false;  // the device transfers columns (outside_cpu_ns, outside_wall_ns)
  int64_t outside_cpu_ns = -1;     // -1: a cpu row (or a call not watched)
  int64_t outside_wall_ns = -1;
  int line = 0;  // in samples.csv, for messages
};

struct BundleData {
  std::filesystem::path dir;
  std::shared_ptr<const BundleFs> fs;        // every further read of the bundle goes through this
  std::vector<BundleFs::Entry> entries;     // what the folder holds, symlinks and all (never followed)
  bool entries_truncated = false;
  // plan.json, read strictly (record/plan.h); empty when it is missing or does not parse, and then plan_problem
  // says why.
  std::optional<Plan> plan;
  std::string plan_problem;
  nlohmann::json environment, stages, decision, controls, final_;  // {} when absent
  std::map<std::string, nlohmann::json> checks;    // by file stem: baseline, candidate, control_x, ...
  std::map<std::string, nlohmann::json> profiles;  // by file stem
  std::optional<nlohmann::json> aa, ab;
  std::vector<SampleRow> samples;
  std::vector<std::string> problems;  // files missing or unreadable
};

// Never throws for a damaged or hostile bundle: what cannot be read is listed in `problems` (see bundle_fs.h for
// what is refused).
BundleData read_bundle(const std::filesystem::path& dir);


}  // namespace kwb
