#include "stats/sequential.h"

#include "stats/layout.h"

#include <algorithm>

namespace kwb::stats {

Verdict judge(const SequentialGate& gate, const EffectEstimate& e) {
  if (gate.aa) return aa_verdict(e, gate.max_aa_difference_pct);
  return ab_verdict(e, gate.min_improvement_pct, gate.kind, gate.aa_bias_log, gate.same_margin_pct);
}

SequentialProcedure::SequentialProcedure(const SequentialGate& gate, std::uint64_t seed)
    : m_gate(gate),
      m_rule(gate.alpha, std::max(gate.min_blocks, AlphaSpendingRule::k_smallest_min_blocks)),
      m_seed(seed) {}

SequentialLook SequentialProcedure::look(double confidence, bool final_analysis) const {
  SequentialLook l;
  l.blocks = m_log_ratios.size();
  l.confidence = confidence;
  // The layout floor (A/B over a pool of layouts): each block's builds are the schedule's, a pure function of the
  // workload's seed (visit_layout), so a replay finds the same.
  LayoutFloor floor;
  if (!m_gate.aa && m_gate.layouts > 1) {
    std::vector<int> builds[2];
    for (std::size_t arm = 0; arm < 2; ++arm) {
      for (std::size_t block = 0; block < m_log_ratios.size(); ++block) {
        builds[arm].push_back(visit_layout(m_seed, arm, static_cast<int>(block), m_gate.layouts, 0, false).variant);
      }
    }
    floor = layout_floor(m_log_ratios, builds[0], builds[1]);
  }
  // The bootstrap cross-check is seeded by the workload's seed and the block count, so a replay draws the same.
  l.estimate = estimate_effect(m_log_ratios, confidence, m_seed ^ l.blocks, k_default_bootstrap_resamples, floor);
  l.verdict = judge(m_gate, l.estimate);
  l.final_analysis = final_analysis;
  return l;
}

bool SequentialProcedure::add(double log_ratio) {
  if (m_decided) return true;
  m_log_ratios.push_back(log_ratio);
  const std::size_t n = m_log_ratios.size();
  if (!m_rule.is_look(n)) return false;
  m_looks.push_back(look(m_rule.confidence_at_look(m_rule.look_index(n)), false));
  // The point gate is the simple legacy rule: one decision at the first look, no sequential testing.
  m_decided = m_looks.back().verdict != Verdict::inconclusive || m_gate.kind == GateKind::point;
  return m_decided;
}

std::optional<SequentialLook> SequentialProcedure::finish() {
  const std::size_t n = m_log_ratios.size();
  if (n < 2) return std::nullopt;
  if (m_decided || (!m_looks.empty() && m_looks.back().final_analysis)) return m_looks.back();
  // The final analysis spends the alpha the interim looks left; when the budget ended on a look, it is a second
  // analysis of the same blocks at that lower confidence (the union bound covers both).
  m_looks.push_back(look(m_rule.confidence_for_final(m_rule.look_index(n)), true));
  return m_looks.back();
}

}  // namespace kwb::stats
