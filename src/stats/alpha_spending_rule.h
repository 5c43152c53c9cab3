// Geometric look schedule with a convergent alpha-spending sequence.
#pragma once

#include "stats/stopping.h"

#include <cstddef>

namespace kwb::stats {

// Looks at n_1 = min_blocks, then n_{k+1} = n_k + ceil(n_k * growth_percent / 100): 10, 15, 23, 35, 53, 80, ...
// from kwb's default of 10 (alpha and min_blocks have no default here: pipeline/defaults.h holds kwb's). Geometric
// spacing keeps the number of looks logarithmic in the block count, and each look has substantially more data than
// the last, so the spent alpha buys real information.
//
// Look k spends alpha_k = alpha * 6 / (pi^2 k^2). Since sum 1/k^2 = pi^2 / 6, the alpha_k sum to alpha over
// infinitely many looks, so by the union bound the family-wise error stays <= alpha however many looks the budget
// allows and wherever it ends, with no need to know the number of looks in advance (unlike Pocock or
// O'Brien-Fleming boundaries). The price is some power at later looks.
class AlphaSpendingRule final : public StoppingRule {
public:
  // With fewer blocks the t quantile at a spent confidence (df <= 3, confidence >= 0.97) is so large that a look
  // cannot decide anything, and the signed-rank interval cannot reach that confidence at all.
  static constexpr size_t k_smallest_min_blocks = 5;
  static constexpr unsigned k_default_growth_percent = 50;

  // Throws std::invalid_argument unless 0 < alpha < 1, min_blocks >= k_smallest_min_blocks, growth_percent >= 1.
  explicit AlphaSpendingRule(double alpha, size_t min_blocks, unsigned growth_percent = k_default_growth_percent);

  bool is_look(size_t blocks) const override;
  size_t look_index(size_t blocks) const override;
  size_t next_look(size_t blocks) const override;
  double confidence_at_look(size_t k) const override;   // 1 - alpha_k
  double confidence_for_final(size_t looks_done) const override;  // confidence_at_look(looks_done + 1)

  double alpha_at_look(size_t k) const;  // alpha_k; throws for k == 0

private:
  size_t look_after(size_t look) const;

  double m_alpha;
  size_t m_min_blocks;
  unsigned m_growth_percent;
};

}  // namespace kwb::stats
