#include "stats/outside_window.h"

#include "stats/descriptive.h"

#include <fmt/format.h>

#include <cmath>

namespace kwb::stats {

OutsideCheck outside_window_check(const std::vector<std::array<OutsideVisit, 2>>& blocks) {
  OutsideCheck out;
  std::vector<double> excess, gain;
  size_t material = 0;
  for (const auto& b : blocks) {
    if (b[0].outside_ns.empty() || b[1].outside_ns.empty() || b[0].ns.empty() || b[1].ns.empty()) continue;
    const double e = median(b[1].outside_ns) - median(b[0].outside_ns);
    const double g = median(b[0].ns) - median(b[1].ns);
    excess.push_back(e);
    gain.push_back(g);
    material += g > 0.0 && e > k_outside_min_excess_ns && e >= k_outside_gain_share * g;
  }
  out.blocks = excess.size();
  if (excess.empty()) return out;
  out.excess_ns = median(excess);
  out.gain_ns = median(gain);
  out.excess_blocks = material;
  out.moved = out.blocks >= k_outside_min_blocks &&
              static_cast<double>(material) >= k_outside_share * static_cast<double>(out.blocks);
  return out;
}

std::string describe_outside(const OutsideCheck& c, const std::string& other_label) {
  const double share = c.gain_ns > 0.0 ? 100.0 * c.excess_ns / c.gain_ns : 0.0;
  return fmt::format("arm {} spends {:.1f} us more per call outside the timed window than arm A (the uploads before "
                     "go and the read-back after done), {:.0f}% of the {:.1f} us it gains inside it, in {} of {} "
                     "blocks: work moved outside the window (work_outside_window)",
                     other_label, c.excess_ns / 1e3, share, c.gain_ns / 1e3, c.excess_blocks, c.blocks);
}

}  // namespace kwb::stats
