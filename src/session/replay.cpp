#include "session/replay.h"

#include <algorithm>

namespace kwb {

std::optional<Replay> detect_replay(std::span<const double> previous_expected, std::span<const double> expected,
                                    std::span<const unsigned char> got, DType dtype, const Tolerance& tol) {
  const size_t overlap = std::min({previous_expected.size(), got.size() / dtype_size(dtype), expected.size()});
  Replay r;
  std::optional<double> first_replayed;
  bool varied = false;  // the reproduced values are not all one constant
  for (size_t k = 0; k < overlap; ++k) {
    if (within_tolerance(previous_expected[k], expected[k], tol, dtype)) continue;
    ++r.differing;
    const double value = load_element(dtype, got.data(), k);
    if (!within_tolerance(value, previous_expected[k], tol, dtype)) continue;
    ++r.replayed;
    if (!first_replayed) first_replayed = value;
    varied = varied || !within_tolerance(value, *first_replayed, tol, dtype);
  }
  if (varied && r.replayed * 2 > r.differing) return r;
  return std::nullopt;
}

}  // namespace kwb
