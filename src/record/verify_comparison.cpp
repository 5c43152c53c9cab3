#include "record/verify_comparison.h"

#include "stats/descriptive.h"

#include <fmt/format.h>

#include <map>

namespace kwb {

BlockRatios block_log_ratios(const std::vector<SampleRow>& rows, const std::string& comparison,
                             const std::string& workload, const std::string& other, uint64_t blocks,
                             const std::string& where, std::vector<std::string>& problems) {
  BlockRatios out;
  // Per block and arm: the timed, validated samples.
  std::map<std::pair<int, std::string>, std::vector<double>> cells;
  for (const SampleRow& s : rows) {
    if (s.comparison != comparison || s.workload != workload || s.block < 0) continue;
    if (!s.output_valid) out.invalid_sample = true;
    if (s.warmup) continue;
    ++out.timed;
    if (s.output_valid) cells[{s.block, s.arm}].push_back(static_cast<double>(s.ns));
  }
  for (uint64_t blk = 0; blk < blocks; ++blk) {
    auto a = cells.find({static_cast<int>(blk), "A"});
    auto b = cells.find({static_cast<int>(blk), other});
    if (a == cells.end() || b == cells.end()) {
      problems.push_back(fmt::format("{}: block {} has no timed samples for {} in samples.csv", where, blk,
                                     a == cells.end() ? "A" : other));
      out.complete = false;
      break;
    }
    const double ma = stats::median(a->second), mb = stats::median(b->second);
    if (!(ma > 0 && mb > 0)) {
      problems.push_back(fmt::format("{}: block {} has a zero median time", where, blk));
      out.complete = false;
      break;
    }
    out.log_ratios.push_back(std::log(mb / ma));
  }
  for (const auto& [key, v] : cells) {
    if (key.first < 0 || static_cast<uint64_t>(key.first) >= blocks || (key.second != "A" && key.second != other)) {
      problems.push_back(fmt::format("{}: samples.csv has block {} arm {} which the comparison does not count", where,
                                     key.first, key.second));
      out.complete = false;
      break;
    }
  }
  return out;
}

Replay replay_procedure(const std::vector<double>& log_ratios, const stats::SequentialGate& gate, uint64_t seed,
                        const std::string& where, std::vector<std::string>& problems) {
  stats::SequentialProcedure procedure(gate, seed);
  for (size_t i = 0; i < log_ratios.size(); ++i) {
    if (procedure.add(log_ratios[i]) && i + 1 < log_ratios.size()) {
      problems.push_back(fmt::format("{}: the procedure decides after block {}, yet {} blocks were timed", where, i + 1,
                                     log_ratios.size()));
      break;
    }
  }
  Replay r;
  if (const std::optional<stats::SequentialLook> outcome = procedure.finish()) {
    r.estimate = outcome->estimate;
    r.verdict = outcome->verdict;
  }
  return r;
}

}  // namespace kwb
