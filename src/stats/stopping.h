// When to analyse accumulating blocks, and at what confidence. Looking at the data after every block and stopping
// at the first significant interval inflates the false-positive rate far above alpha (Armitage, McPherson & Rowe
// 1969), so a rule fixes the looks in advance and spends a share of alpha at each one.
//
// The runner's loop: after each block, if is_look(blocks), take a verdict at confidence_at_look(look_index(blocks))
// and stop on a decision. When the budget or block cap ends the session and the last block was not itself a look,
// take the final verdict at confidence_for_final(look_index(blocks)): the final analysis is one more look and
// spends like one, so the family-wise error stays within alpha.
#pragma once

#include <cstddef>

namespace kwb::stats {

class StoppingRule {
public:
  virtual ~StoppingRule() = default;

  // True when an analysis is scheduled after exactly `blocks` blocks.
  virtual bool is_look(size_t blocks) const = 0;
  // Number of looks scheduled at or before `blocks`: the 1-based index of the look at `blocks` when is_look(blocks),
  // 0 before the first look.
  virtual size_t look_index(size_t blocks) const = 0;
  // The first look after `blocks` blocks (strictly greater).
  virtual size_t next_look(size_t blocks) const = 0;
  // Confidence of the interval at look k >= 1.
  virtual double confidence_at_look(size_t k) const = 0;
  // Confidence of the verdict taken when the session ends after `looks_done` looks without a decision.
  virtual double confidence_for_final(size_t looks_done) const = 0;
};

}  // namespace kwb::stats
