// When to analyse accumulating blocks, and at what confidence: a geometric look schedule with a convergent
// alpha-spending sequence. Looking at the data after every block and stopping at the first significant interval
// inflates the false-positive rate far above alpha (Armitage, McPherson & Rowe 1969), so the rule fixes the looks in
// advance and spends a share of alpha at each one.
//
// The runner's loop (stats/sequential.h): after each block, if is_look(blocks), take a verdict at
// confidence_at_look(look_index(blocks)) and stop on a decision. When the budget or block cap ends the session
// without a decision, take the final verdict at confidence_for_final(look_index(blocks)): the final analysis spends
// all the alpha the looks before it left, at least alpha * k_final_share, so the family-wise error stays within
// alpha.
#pragma once

#include <cstddef>

namespace kwb::stats {

// Looks at n_1 = min_blocks, then n_{k+1} = n_k + ceil(n_k * growth_percent / 100): 10, 15, 23, 35, 53, 80, ...
// from kwb's default of 10 (alpha and min_blocks have no default here: pipeline/defaults.h holds kwb's). Geometric
// spacing keeps the number of looks logarithmic in the block count, and each look has substantially more data than
// the last, so the spent alpha buys real information.
//
// Interim look k spends alpha_k = alpha * (1 - k_final_share) * 6 / (pi^2 k^2). Since sum 1/k^2 = pi^2 / 6, the
// alpha_k sum to alpha * (1 - k_final_share) over infinitely many looks; the final analysis, which happens at most
// once, spends the rest: alpha minus what the looks before it spent. By the union bound the family-wise error stays
// <= alpha however many looks the budget allows and wherever it ends, with no need to know the number of looks in
// advance (unlike Pocock or O'Brien-Fleming boundaries). Without the reserve the final analysis after 13 looks (a
// minute of prefill) would spend 0.24% of a 5% alpha, at 99.8% confidence; with it, about 2.6%.
class AlphaSpendingRule {
public:
  // With fewer blocks the t quantile at a spent confidence (df <= 3, confidence >= 0.97) is so large that a look
  // cannot decide anything, and the signed-rank interval cannot reach that confidence at all.
  static constexpr size_t k_smallest_min_blocks = 5;
  static constexpr unsigned k_default_growth_percent = 50;
  // The share of alpha kept for the final analysis: a comparison that runs its whole budget is decided there, at
  // about 97.4% confidence instead of the 99.98% a 14th interim look would get.
  static constexpr double k_final_share = 0.5;

  // Throws std::invalid_argument unless 0 < alpha < 1, min_blocks >= k_smallest_min_blocks, growth_percent >= 1.
  explicit AlphaSpendingRule(double alpha, size_t min_blocks, unsigned growth_percent = k_default_growth_percent);

  // True when an analysis is scheduled after exactly `blocks` blocks.
  bool is_look(size_t blocks) const;
  // Number of looks scheduled at or before `blocks`: the 1-based index of the look at `blocks` when is_look(blocks),
  // 0 before the first look.
  size_t look_index(size_t blocks) const;
  // The first look after `blocks` blocks (strictly greater).
  size_t next_look(size_t blocks) const;
  // Confidence of the interval at look k >= 1: 1 - alpha_k.
  double confidence_at_look(size_t k) const;
  // Confidence of the verdict taken when the session ends after `looks_done` interim looks without a decision:
  // 1 - (alpha - alpha_1 - ... - alpha_looks_done).
  double confidence_for_final(size_t looks_done) const;

  double alpha_at_look(size_t k) const;  // alpha_k; throws for k == 0

private:
  size_t look_after(size_t look) const;

  double m_alpha;
  size_t m_min_blocks;
  unsigned m_growth_percent;
};

}  // namespace kwb::stats
