// Input checks shared by the stats module. They stay on in release builds: a statistic computed from
// bad input comes back as NaN or garbage and would flow silently into a verdict.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

namespace kwb::stats::detail {

// Shortest round-trip text for a double; std::to_chars ignores the locale, unlike printf and iostreams.
inline std::string format_number(double x) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x);
  return std::string(buffer, result.ptr);
}

// Throws unless `x` holds at least `min_size` finite values. `what` names the calling function.
inline void require_values(std::span<const double> x, size_t min_size, const char* what) {
  if (x.size() < min_size) {
    throw std::invalid_argument(std::string(what) + ": need at least " + std::to_string(min_size) +
                                (min_size == 1 ? " value" : " values") + ", got " + std::to_string(x.size()));
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      throw std::invalid_argument(std::string(what) + ": value " + std::to_string(i) + " is " + format_number(x[i]) +
                                  "; every value must be finite");
    }
  }
}

inline void require_confidence(double confidence, const char* what) {
  if (!(confidence > 0.0 && confidence < 1.0)) {
    throw std::invalid_argument(std::string(what) + ": confidence must lie strictly between 0 and 1 (e.g. 0.95), got " +
                                format_number(confidence));
  }
}

}  // namespace kwb::stats::detail
