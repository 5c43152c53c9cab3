// Work outside the timed window, on device backends (docs/timing.md, "Work outside the window"). Before go the
// worker uploads the call's inputs and the outputs' poison through the device runtime, and after done it reads the
// outputs back; none of that is the candidate's kernel, and none of it is timed. Code that moves its work into that
// stretch (by redirecting a runtime's entry point, say, so that an upload computes the answer) would read fast.
// Each timed call records that stretch's wall time (Sample::outside_wall_ns). Both arms upload and read back the
// same tensors, so in each block the other arm's median outside the window less A's is the work one arm moved there;
// judged against the gain it claims inside the window, in the same block.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace kwb::stats {

// An excess that is at least this share of the claimed gain, in at least k_outside_share of at least
// k_outside_min_blocks blocks, and above k_outside_min_excess_ns per call, makes the comparison INVALID.
// A tenth: moving work out is never honest, and a runtime's host path can be cheaper than its kernels (PoCL's fused
// RMSNorm, moved into the poison's upload as a plain host loop, cost 54% of the gain it claimed, in 7 of 10 blocks
// past a bar of a half), so the bar is what noise cannot reach, not what the work should cost.
inline constexpr double k_outside_gain_share = 0.1;
inline constexpr double k_outside_share = 0.75;
inline constexpr size_t k_outside_min_blocks = 4;
inline constexpr double k_outside_min_excess_ns = 5000.0;

// One arm's timed, validated calls in one visit: their samples and the wall time outside their windows.
struct OutsideVisit {
  std::vector<double> ns, outside_ns;
};

struct OutsideCheck {
  size_t blocks = 0;         // blocks where both visits recorded the stretch (device rows)
  size_t excess_blocks = 0;  // of those, the ones where the other arm's excess is a material share of its gain
  double excess_ns = 0.0;    // medians over those blocks: the other arm's outside time less A's, per call
  double gain_ns = 0.0;      // and A's time in the window less the other arm's
  bool moved = false;        // work was moved outside the window
};

OutsideCheck outside_window_check(const std::vector<std::array<OutsideVisit, 2>>& blocks);

// "arm B spends 280.0 us more per call outside the timed window than arm A, 92% of the 305.1 us it gains inside it,
// in 10 of 10 blocks" (for a reason line).
std::string describe_outside(const OutsideCheck& c, const std::string& other_label);

}  // namespace kwb::stats

namespace kwb::stats {

// Untimed calls as free time (docs/timing.md, "Calls that look alike"). Per block and arm, the median of the arm's
// untimed calls (warm-ups and re-warms) over the median of its timed calls; an arm whose ratio passes the other's by
// a factor of k_untimed_factor in at least k_outside_share of at least k_outside_min_blocks blocks spends its time
// where kwb does not measure: the workload is INVALID (untimed_work). An honest re-warm costs about what a timed
// call costs, in both arms alike.
inline constexpr double k_untimed_factor = 4.0;

struct UntimedVisit {
  std::vector<double> timed_ns, untimed_ns;
};

struct UntimedCheck {
  size_t blocks = 0;
  size_t excess_blocks = 0;
  double ratio_a = 0.0, ratio_other = 0.0;  // medians over the blocks of untimed / timed medians
  bool untimed_work = false;
  bool other = true;  // which arm: the other arm (true) or A
};

UntimedCheck untimed_check(const std::vector<std::array<UntimedVisit, 2>>& blocks);
std::string describe_untimed(const UntimedCheck& c, const std::string& other_label);

}  // namespace kwb::stats
