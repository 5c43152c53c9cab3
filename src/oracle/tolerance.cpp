#include "oracle/tolerance.h"

#include "task/data.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace kwb {

bool within_tolerance(double got, double expected, const Tolerance& tol) {
  // Written so that a NaN on either side is never "within": every comparison with NaN is false.
  return std::fabs(got - expected) <= tol.atol + tol.rtol * std::fabs(expected);
}

OutputComparison compare_output(std::span<const unsigned char> got, DType dtype, std::span<const double> expected,
                                const Tolerance& tol, uint64_t poison) {
  const size_t width = dtype_size(dtype);
  if (got.size() != expected.size() * width) {
    throw std::invalid_argument("compare_output: output size does not match the oracle's");
  }
  OutputComparison r;
  r.elements = expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    // The element's bits (little-endian, zero-extended) against the poison pattern of the same width.
    uint64_t bits = 0;
    std::memcpy(&bits, got.data() + width * i, width);
    const bool is_poison = bits == (width == 8 ? poison : poison & ((uint64_t{1} << (8 * width)) - 1));
    const double g = load_element(dtype, got.data(), i);
    const double e = expected[i];
    if (is_poison) {
      ++r.poison_left;
      continue;
    }
    const bool e_finite = std::isfinite(e);
    const bool g_finite = std::isfinite(g);
    if (!e_finite || !g_finite) {
      bool agree = (std::isnan(e) && std::isnan(g)) || (std::isinf(e) && std::isinf(g) && (e > 0) == (g > 0));
      if (!agree) {
        if (!r.first_nonfinite_mismatch) r.first_nonfinite_mismatch = ElementReport{i, g, e};
        ++r.nonfinite_mismatches;
      }
      continue;
    }
    const double abs_err = std::fabs(g - e);
    if (abs_err > r.max_abs_error) r.max_abs_error = abs_err;
    if (e != 0.0 && abs_err / std::fabs(e) > r.max_rel_error) r.max_rel_error = abs_err / std::fabs(e);
    if (!within_tolerance(g, e, tol)) {
      if (!r.first_value_mismatch) r.first_value_mismatch = ElementReport{i, g, e};
      ++r.value_mismatches;
    }
  }
  return r;
}

}  // namespace kwb
