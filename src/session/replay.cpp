#include "session/replay.h"

#include <algorithm>

namespace kwb {

std::optional<Replay> detect_replay(std::span<const double> previous_expected, std::span<const double> expected,
                                    std::span<const unsigned char> got, DType dtype, const Tolerance& tol) {
  const size_t overlap = std::min({previous_expected.size(), got.size() / dtype_size(dtype), expected.size()});
  Replay r;
  std::optional<double> first_replayed;
  bool varied = false;           // the reproduced values are not all one constant
  size_t wrong_where_alike = 0;  // elements where both results agree and the output matches neither
  for (size_t k = 0; k < overlap; ++k) {
    const double value = load_element(dtype, got.data(), k);
    if (within_tolerance(previous_expected[k], expected[k], tol, dtype)) {
      if (!within_tolerance(value, expected[k], tol, dtype)) ++wrong_where_alike;
      continue;
    }
    ++r.differing;
    if (!within_tolerance(value, previous_expected[k], tol, dtype)) continue;
    ++r.replayed;
    if (!first_replayed) first_replayed = value;
    varied = varied || !within_tolerance(value, *first_replayed, tol, dtype);
  }
  // A replay is right wherever the previous result was: an output also wrong where both results agree computed
  // something wrong (a wrong row, a wrong element) that happens to look old where they differ.
  if (varied && r.replayed * 2 > r.differing && wrong_where_alike == 0) return r;
  return std::nullopt;
}

}  // namespace kwb
