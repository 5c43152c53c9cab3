#include "oracle/tolerance.h"

#include "util/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <stdexcept>

namespace kwb {

namespace {

// The spacing of `C`'s values at |e| (one unit in the last place there): 2^(max(floor(log2 |e|), emin) - M) for a
// binary float with M stored significand bits, whose subnormals are spaced as its smallest normals. An integer
// dtype's spacing is 1; it is only asked for in ulp mode, which integer outputs never have.
template <typename C>
double ulp_at(double e) {
  if constexpr (C::kind == DTypeKind::floating) {
    int exp = 0;
    std::frexp(e, &exp);  // |e| = f 2^exp, f in [0.5, 1): floor(log2 |e|) = exp - 1
    const int floor_log2 = e == 0.0 ? C::min_exponent : exp - 1;
    return std::ldexp(1.0, std::max(floor_log2, C::min_exponent) - C::significand_bits);
  } else {
    return 1.0;
  }
}

template <typename C>
double allowed_at(double e, const Tolerance& tol) {
  switch (tol.mode) {
    case ToleranceMode::abs_rel: return tol.atol + tol.rtol * std::fabs(e);
    case ToleranceMode::ulp: return tol.ulp * ulp_at<C>(e);
    case ToleranceMode::exact: return 0.0;
  }
  return 0.0;
}

}  // namespace

double allowed_error(double expected, const Tolerance& tol, DType dtype) {
  return visit_dtype(dtype, [&]<typename C>(C) { return allowed_at<C>(expected, tol); });
}

bool within_tolerance(double got, double expected, const Tolerance& tol, DType dtype) {
  // Written so that a NaN on either side is never "within": every comparison with NaN is false.
  return std::fabs(got - expected) <= allowed_error(expected, tol, dtype);
}

namespace {

// |got - expected| as a share of what the tolerance allows there (infinite where it allows nothing and there is an
// error).
inline double tolerance_used(double abs_err, double allowed) {
  if (allowed > 0.0) return abs_err / allowed;
  return abs_err > 0.0 ? std::numeric_limits<double>::infinity() : 0.0;
}

// One element that is not plainly within tolerance: the exact rules, written once.
inline void classify_slow(OutputComparison& r, size_t i, double g, double e, double allowed) {
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
  r.max_tolerance_used = std::max(r.max_tolerance_used, tolerance_used(abs_err, allowed));
  if (!(abs_err <= allowed)) {
    if (!r.first_value_mismatch) r.first_value_mismatch = ElementReport{i, g, e};
    ++r.value_mismatches;
  }
}

// The loop every timed call's validation runs (a prefill output is 256K elements, a dram one 32M), in chunks: a
// branch-free pass that the compiler vectorizes decides whether the whole chunk is plainly fine (no poison, finite,
// within tolerance); only a chunk that is not goes element by element through classify_slow. The error maxima
// (check's report) cost a division per element, so only a caller that asks for them pays it. C is the dtype's
// codec; `allowed(e)` is what the tolerance allows at e.
//
// An element holding the poison pattern was never written, with one exception: a dtype without NaN has no pattern
// a result cannot hold, so there an element that equals the poison and the oracle's value is a correct result
// (worker_session.cpp, make_poison, says how rarely an unwritten one can hide so).
template <typename C, typename Allowed>
void compare_elements(OutputComparison& r, const unsigned char* got, std::span<const double> expected,
                      typename C::Bits poison, bool error_stats, Allowed allowed) {
  using Bits = typename C::Bits;
  constexpr double k_inf = std::numeric_limits<double>::infinity();
  constexpr size_t k_chunk = 2048;
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
      const double g = C::to_double(bits), e = expected[i];
      const double abs_err = std::fabs(g - e);
      // False for NaN anywhere; the finiteness tests keep Inf out (inf <= atol + rtol * inf would hold).
      bad |= !((bits != poison) & (abs_err <= allowed(e)) & (std::fabs(g) < k_inf) & (std::fabs(e) < k_inf));
    }
    if (bad == 0) {
      if (!error_stats) continue;
      for (size_t i = begin; i < end; ++i) {
        const double e = expected[i], abs_err = std::fabs(C::to_double(load(i)) - e);
        r.max_abs_error = std::max(r.max_abs_error, abs_err);
        if (e != 0.0) r.max_rel_error = std::max(r.max_rel_error, abs_err / std::fabs(e));
        r.max_tolerance_used = std::max(r.max_tolerance_used, tolerance_used(abs_err, allowed(e)));
      }
      continue;
    }
    for (size_t i = begin; i < end; ++i) {
      const Bits bits = load(i);
      const double g = C::to_double(bits), e = expected[i];
      if (bits == poison && !(g == e)) {
        ++r.poison_left;
        continue;
      }
      classify_slow(r, i, g, e, allowed(e));
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
  // An integer or boolean output is compared exactly, whatever the tolerance says (load_task gives it none other).
  const Tolerance exact{ToleranceMode::exact};
  const Tolerance& t = is_exact_dtype(dtype) ? exact : tol;
  // The poison pattern at the element's width (little-endian, the low bytes of the 64-bit pattern). One
  // instantiation per mode, so abs_rel's loop (every timed call's) stays free of the mode switch.
  visit_dtype(dtype, [&]<typename C>(C) {
    using Bits = typename C::Bits;
    const Bits p = static_cast<Bits>(poison);
    switch (t.mode) {
      case ToleranceMode::abs_rel: {
        const double atol = t.atol, rtol = t.rtol;
        compare_elements<C>(r, got.data(), expected, p, error_stats,
                            [=](double e) { return atol + rtol * std::fabs(e); });
        break;
      }
      case ToleranceMode::ulp: {
        const double ulp = t.ulp;
        compare_elements<C>(r, got.data(), expected, p, error_stats, [=](double e) { return ulp * ulp_at<C>(e); });
        break;
      }
      case ToleranceMode::exact:
        compare_elements<C>(r, got.data(), expected, p, error_stats, [](double) { return 0.0; });
        break;
    }
  });
  return r;
}

}  // namespace kwb
