// verify's re-derivation of one comparison workload from the raw samples (record/verify.cpp): pure functions of
// samples.csv's rows and the plan's gate, each appending what disagrees to `problems` as "<where>: ...".
#pragma once

#include "record/samples.h"
#include "stats/effect.h"
#include "stats/gate.h"
#include "stats/sequential.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

inline bool close_enough(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

// One workload's blocks, re-derived: per block, log(median B / median A) over its timed, validated samples.
struct BlockRatios {
  std::vector<double> log_ratios;
  bool complete = true;         // every counted block had both arms' samples, and no row lies outside them
  size_t timed = 0;             // timed (non-warm-up) samples of the workload
  bool invalid_sample = false;  // some sample's output failed validation
};

// `other` is the second arm's label (A' or B); `blocks` the number the comparison says it counted.
BlockRatios block_log_ratios(const std::vector<SampleRow>& rows, const std::string& comparison,
                             const std::string& workload, const std::string& other, uint64_t blocks,
                             const std::string& where, std::vector<std::string>& problems);

// The sequential procedure replayed on the re-derived ratios with the plan's gate and the workload's seed: it must
// not decide before the last block (compare stops timing when it decides). nullopt estimate: no interval yet.
struct Replay {
  stats::Verdict verdict = stats::Verdict::inconclusive;
  std::optional<stats::EffectEstimate> estimate;
};
Replay replay_procedure(const std::vector<double>& log_ratios, const stats::SequentialGate& gate, uint64_t seed,
                        const std::string& where, std::vector<std::string>& problems);

}  // namespace kwb
