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
  return fmt::format(
      "arm {} spends {:.1f} us more per call outside the timed window than arm A (the uploads before "
      "go and the read-back after done), {:.0f}% of the {:.1f} us it gains inside it, in {} of {} "
      "blocks: work moved outside the window (work_outside_window)",
      other_label, c.excess_ns / 1e3, share, c.gain_ns / 1e3, c.excess_blocks, c.blocks);
}

}  // namespace kwb::stats

namespace kwb::stats {

UntimedCheck untimed_check(const std::vector<std::array<UntimedVisit, 2>>& blocks) {
  UntimedCheck out;
  std::vector<double> ra, ro;
  size_t up = 0, down = 0;
  for (const auto& b : blocks) {
    if (b[0].timed_ns.empty() || b[1].timed_ns.empty() || b[0].untimed_ns.empty() || b[1].untimed_ns.empty()) continue;
    const double a = median(b[0].untimed_ns) / median(b[0].timed_ns);
    const double o = median(b[1].untimed_ns) / median(b[1].timed_ns);
    if (!(std::isfinite(a) && std::isfinite(o) && a > 0.0 && o > 0.0)) continue;
    ra.push_back(a);
    ro.push_back(o);
    up += o > k_untimed_factor * a;
    down += a > k_untimed_factor * o;
  }
  out.blocks = ra.size();
  if (ra.empty()) return out;
  out.ratio_a = median(ra);
  out.ratio_other = median(ro);
  out.excess_blocks = std::max(up, down);
  out.other = up >= down;
  out.untimed_work = out.blocks >= k_outside_min_blocks &&
                     static_cast<double>(out.excess_blocks) >= k_outside_share * static_cast<double>(out.blocks);
  return out;
}

std::string describe_untimed(const UntimedCheck& c, const std::string& other_label) {
  return fmt::format(
      "arm {}'s untimed calls (warm-ups and re-warms) took {:.1f}x its timed ones, arm {}'s {:.1f}x, "
      "in {} of {} blocks: time spent where kwb does not measure (untimed_work)",
      c.other ? other_label : "A", c.other ? c.ratio_other : c.ratio_a, c.other ? "A" : other_label,
      c.other ? c.ratio_a : c.ratio_other, c.excess_blocks, c.blocks);
}

}  // namespace kwb::stats
