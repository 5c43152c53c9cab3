#include "oracle/tolerance.h"

#include "util/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <stdexcept>

namespace kwb {

bool within_tolerance(double got, double expected, const Tolerance& tol) {
  // Written so that a NaN on either side is never "within": every comparison with NaN is false.
  return std::fabs(got - expected) <= tol.atol + tol.rtol * std::fabs(expected);
}

namespace {

// |got - expected| as a share of what the tolerance allows there (infinite where it allows nothing and there is an
// error).
inline double tolerance_used(double abs_err, double e, double atol, double rtol) {
  const double allowed = atol + rtol * std::fabs(e);
  if (allowed > 0.0) return abs_err / allowed;
  return abs_err > 0.0 ? std::numeric_limits<double>::infinity() : 0.0;
}

// One element that is not plainly within tolerance (or is poison): the exact rules, written once.
inline void classify_slow(OutputComparison& r, size_t i, double g, double e, const Tolerance& tol) {
  const bool e_finite = std::isfinite(e);
  const bool g_finite = std::isfinite(g);
  if (!e_finite || !g_finite) {
    const bool agree = (std::isnan(e) && std::isnan(g)) || (std::isinf(e) && std::isinf(g) && (e > 0) == (g > 0));
    if (!agree) {
      if (!r.first_nonfinite_mismatch) r.first_nonfinite_mismatch = ElementReport{i, g, e};
      ++r.nonfinite_mismatches;
    }
    return;
  }
  const double abs_err = std::fabs(g - e);
  if (abs_err > r.max_abs_error) r.max_abs_error = abs_err;
  if (e != 0.0 && abs_err / std::fabs(e) > r.max_rel_error) r.max_rel_error = abs_err / std::fabs(e);
  r.max_tolerance_used = std::max(r.max_tolerance_used, tolerance_used(abs_err, e, tol.atol, tol.rtol));
  if (!within_tolerance(g, e, tol)) {
    if (!r.first_value_mismatch) r.first_value_mismatch = ElementReport{i, g, e};
    ++r.value_mismatches;
  }
}

// The loop every timed call's validation runs (a prefill output is 256K elements, a dram one 32M), in chunks: a
// branch-free pass that the compiler vectorizes decides whether the whole chunk is plainly fine (no poison, finite,
// within tolerance); only a chunk that is not goes element by element through classify_slow. The error maxima
// (check's report) cost a division per element, so only a caller that asks for them pays it. Bits is the dtype's
// storage word; to_double converts it exactly.
template <typename Bits, typename ToDouble>
void compare_elements(OutputComparison& r, const unsigned char* got, std::span<const double> expected,
                      const Tolerance& tol, Bits poison, bool error_stats, ToDouble to_double) {
  constexpr double k_inf = std::numeric_limits<double>::infinity();
  constexpr size_t k_chunk = 2048;
  const double atol = tol.atol, rtol = tol.rtol;
  auto load = [&](size_t i) {
    Bits bits;
    std::memcpy(&bits, got + sizeof(Bits) * i, sizeof(Bits));
    return bits;
  };
  for (size_t begin = 0; begin < expected.size(); begin += k_chunk) {
    const size_t end = std::min(expected.size(), begin + k_chunk);
    int bad = 0;
    for (size_t i = begin; i < end; ++i) {
      const Bits bits = load(i);
      const double g = to_double(bits), e = expected[i];
      const double abs_err = std::fabs(g - e), abs_e = std::fabs(e);
      // False for NaN anywhere; the finiteness tests keep Inf out (inf <= atol + rtol * inf would hold).
      bad |= !((bits != poison) & (abs_err <= atol + rtol * abs_e) & (std::fabs(g) < k_inf) & (abs_e < k_inf));
    }
    if (bad == 0) {
      if (!error_stats) continue;
      for (size_t i = begin; i < end; ++i) {
        const double e = expected[i], abs_err = std::fabs(to_double(load(i)) - e);
        r.max_abs_error = std::max(r.max_abs_error, abs_err);
        if (e != 0.0) r.max_rel_error = std::max(r.max_rel_error, abs_err / std::fabs(e));
        r.max_tolerance_used = std::max(r.max_tolerance_used, tolerance_used(abs_err, e, atol, rtol));
      }
      continue;
    }
    for (size_t i = begin; i < end; ++i) {
      const Bits bits = load(i);
      if (bits == poison) {
        ++r.poison_left;
        continue;
      }
      classify_slow(r, i, to_double(bits), expected[i], tol);
    }
  }
}

}  // namespace

OutputComparison compare_output(std::span<const unsigned char> got, DType dtype, std::span<const double> expected,
                                const Tolerance& tol, uint64_t poison, ErrorStats stats) {
  const bool error_stats = stats == ErrorStats::compute;
  const size_t width = dtype_size(dtype);
  if (got.size() != expected.size() * width) {
    throw std::invalid_argument("compare_output: output size does not match the oracle's");
  }
  OutputComparison r;
  r.elements = expected.size();
  // The poison pattern at the element's width (little-endian, the low bytes of the 64-bit pattern).
  visit_dtype(dtype, [&]<typename C>(C) {
    using Bits = typename C::Bits;
    compare_elements<Bits>(r, got.data(), expected, tol, static_cast<Bits>(poison), error_stats,
                           [](Bits b) { return C::to_double(b); });
  });
  return r;
}

}  // namespace kwb
