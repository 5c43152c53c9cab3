// Runs the real kwb binary for end-to-end tests.
#pragma once

#include "support/build_paths.h"
#include "util/subprocess.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kwb::test {

inline const std::filesystem::path k_source_dir = KWB_SOURCE_DIR;
// The shipped RMSNorm task, and the copy most tests run (tests/CMakeLists.txt): the same minus its DRAM-sized case.
inline const std::filesystem::path k_rmsnorm = k_source_dir / "tasks" / "rmsnorm";
inline const std::filesystem::path k_rmsnorm_lite = KWB_RMSNORM_LITE;
inline const std::filesystem::path k_gemm_lite = KWB_GEMM_LITE;  // tests/CMakeLists.txt says what it lacks
inline const std::filesystem::path k_softmax = k_source_dir / "tasks" / "softmax";
inline const std::filesystem::path k_softmax_bf16 = k_source_dir / "tasks" / "softmax_bf16";
inline const std::filesystem::path k_adversarial = k_source_dir / "tests" / "adversarial";

// One host row of samples.csv, as the charge needs it: `group` tells comparisons and workloads apart.
struct ChargeRow {
  std::string group;
  int block = 0;
  std::string arm;
  bool warmup = false;
  bool valid = true;
  int64_t pre = -1, post = -1, window = 0;
};

// The sample each row must be, derived here on its own (docs/timing.md, "What a sample charges"): its window plus its
// CPU before go and after done beyond its block's floor, the lower-middle medians of those over arm A's timed, valid,
// watched rows of the block before (block 0: of the pilot, block -1); the pilot itself is charged whole.
inline std::vector<int64_t> expected_samples(const std::vector<ChargeRow>& rows) {
  std::map<std::pair<std::string, int>, std::pair<std::vector<int64_t>, std::vector<int64_t>>> reference;
  for (const ChargeRow& r : rows) {
    if (r.arm != "A" || r.warmup || !r.valid || r.pre < 0 || r.post < 0) continue;
    auto& [pre, post] = reference[{r.group, r.block}];
    pre.push_back(r.pre);
    post.push_back(r.post);
  }
  auto lower_median = [](std::vector<int64_t> v) -> int64_t {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[(v.size() - 1) / 2];
  };
  std::vector<int64_t> out;
  for (const ChargeRow& r : rows) {
    int64_t floor_pre = 0, floor_post = 0;
    if (auto it = reference.find({r.group, r.block - 1}); r.block >= 0 && it != reference.end()) {
      floor_pre = lower_median(it->second.first);
      floor_post = lower_median(it->second.second);
    }
    out.push_back(r.window + std::max<int64_t>(0, r.pre - floor_pre) + std::max<int64_t>(0, r.post - floor_post));
  }
  return out;
}

struct KwbRun {
  int exit_code = -1;
  std::string output;   // stdout
  std::string errors;   // stderr (progress, error messages)
  nlohmann::json json;  // stdout parsed, when it is one JSON document
};

// A finished command as a KwbRun (a signal as 128 + its number, as a shell reports it).
inline KwbRun kwb_run_of(const CommandResult& r) {
  KwbRun out;
  out.exit_code = r.signal != 0 ? 128 + r.signal : r.exit_code;
  out.output = r.output;
  out.errors = r.errors;
  out.json = nlohmann::json::parse(r.output, nullptr, false);
  return out;
}

inline KwbRun run_kwb(std::vector<std::string> args, std::chrono::seconds timeout = std::chrono::seconds(300)) {
  args.insert(args.begin(), KWB_BINARY);
  return kwb_run_of(run_command(args, timeout, StderrMode::separate));
}

// The reasons of a list of failures, or of the "failures" list of a report that has one (check, profile).
inline std::set<std::string> reasons(const nlohmann::json& j) {
  const nlohmann::json& failures = j.is_object() ? j.at("failures") : j;
  std::set<std::string> out;
  for (const auto& f : failures) out.insert(f.at("reason").get<std::string>());
  return out;
}

}  // namespace kwb::test
