// An offline comparison of two saved timing results (kwb compare-saved OLD NEW), as pyperf compare_to, google
// benchmark's compare.py and criterion's --baseline offer: one arm of each saved result (a compare --output-dir
// folder or a validate bundle), per workload. It is indicative only: the two runs were not interleaved, so whatever
// changed between them (load, frequency, thermal state, another machine) is in the difference and not in the
// interval, which covers sampling noise only. docs/timing.md, "Offline comparison of saved results".
#pragma once

#include "record/samples.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

inline constexpr const char* k_compare_saved_schema = "kwb.compare_saved";
inline constexpr int k_compare_saved_schema_version = 1;

// One saved result, read strictly: its samples and what its comparison JSON says about the arm compared.
struct SavedResult {
  std::filesystem::path dir;
  std::string kind;      // "compare" (compare.json + samples.csv) or "bundle" (comparisons/ab.json + samples.csv)
  std::string arm;       // the arm whose samples are compared: A, B or A'
  std::string arm_path;  // its source, as the run recorded it
  std::string arm_artifact_sha256;
  std::string backend;
  nlohmann::json timing;        // warmups, samples, cold: settings that change what a sample measures
  std::string machine;          // a bundle's CPU model; "" for a compare folder, which records none
  std::vector<SampleRow> rows;  // this arm's rows only
};

// Reads DIR (a compare --output-dir folder or a validate bundle). `arm`: empty for the result's candidate arm (the
// second: B, or A' of an A/A). A folder that is neither, a file that does not parse, an arm the result does not
// have: DataError naming the file and the fix.
SavedResult read_saved_result(const std::filesystem::path& dir, const std::string& arm);

struct SavedWorkload {
  std::string name;
  size_t old_visits = 0, new_visits = 0;  // visits (blocks) with timed, validated samples of the arm
  double old_ns = 0.0, new_ns = 0.0;      // median over visits of each visit's median time per call
  // (1 - new/old) * 100 from the difference of the medians of log visit medians, and its bootstrap percentile
  // interval (visits resampled within each result); empty when either side has fewer than k_min_saved_visits.
  std::optional<double> improvement_pct, ci_low_pct, ci_high_pct;
};

inline constexpr size_t k_min_saved_visits = 3;

struct SavedComparison {
  SavedResult old_result, new_result;
  std::vector<SavedWorkload> workloads;  // in both, in the old result's order
  std::vector<std::string> only_in_old, only_in_new;
  std::vector<std::string> warnings;  // why the two are even less comparable than any two runs
  double confidence = 0.95;
  uint64_t seed = 1;
};

SavedComparison compare_saved(SavedResult old_result, SavedResult new_result, uint64_t seed);

nlohmann::json to_json(const SavedComparison& c);

}  // namespace kwb
