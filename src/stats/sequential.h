// The one decision procedure of a comparison: compare runs it block by block while timing, and verify replays it on
// the log ratios it re-derives from samples.csv. Looks at the alpha-spending rule's block counts
// (alpha_spending_rule.h); at each look an interval at that look's confidence (effect.h) judged by the gate
// (gate.h); stop at the first look that decides (or, for the point gate, at the first look); a comparison the
// budget ends without a decision gets one final analysis that spends the alpha the looks left (at least half of it).
// docs/timing.md explains it.
#pragma once

#include "stats/alpha_spending_rule.h"
#include "stats/effect.h"
#include "stats/gate.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kwb::stats {

struct SequentialGate {
  bool aa = false;  // A/A: |difference| within max_aa_difference_pct; else the improvement gate
  GateKind kind = GateKind::ci;
  double min_improvement_pct = 0.0;
  double max_aa_difference_pct = 1.0;
  // A/B only: the margin within which the whole interval means no practical difference (SAME, a decision like PASS
  // and FAIL: the procedure stops). 0: no SAME (a comparison made before it existed).
  double same_margin_pct = 0.0;
  double alpha = 0.05;
  std::size_t min_blocks = 10;  // the first look (never below AlphaSpendingRule::k_smallest_min_blocks)
  // A/B only: the bias between arms that this workload's A/A could not rule out (stats::aa_interval_bias_log), which
  // a PASS must clear the bar net of (improvement_verdict). 0: none (the A/A settled, or there was none).
  double aa_bias_log = 0.0;
  // A/B only: the arms' layout pool size K (layout.h). Above 1 the interval includes the layout floor
  // (layout_floor.h), each block's builds replayed from the seed the procedure is given, which must be the workload's
  // (visit_layout). 1: none (one layout, a device backend, or a comparison made before the floor existed).
  int layouts = 1;
};

struct SequentialLook {
  std::size_t blocks = 0;
  double confidence = 0.0;
  EffectEstimate estimate;
  Verdict verdict = Verdict::inconclusive;
  bool final_analysis = false;  // the budget ended without a decision: the reserved alpha
};

Verdict judge(const SequentialGate& gate, const EffectEstimate& e);

class SequentialProcedure {
public:
  SequentialProcedure(const SequentialGate& gate, std::uint64_t seed);

  // Adds the next block's log ratio, log(other / reference). True once the procedure has decided: stop timing.
  bool add(double log_ratio);
  bool decided() const { return m_decided; }
  // The outcome after the last block added: the deciding look, or (ended by the budget) the final analysis.
  // nullopt under two blocks: no interval can be formed.
  std::optional<SequentialLook> finish();

  const std::vector<SequentialLook>& looks() const { return m_looks; }
  const std::vector<double>& log_ratios() const { return m_log_ratios; }

private:
  SequentialLook look(double confidence, bool final_analysis) const;

  SequentialGate m_gate;
  AlphaSpendingRule m_rule;
  std::uint64_t m_seed;
  std::vector<double> m_log_ratios;
  std::vector<SequentialLook> m_looks;
  bool m_decided = false;
};

}  // namespace kwb::stats
