#include "oracle/tolerance.h"

#include "util/dtype.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

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
    case ToleranceMode::abs_rel:
      return tol.atol + tol.rtol * std::fabs(e);
    case ToleranceMode::ulp:
      return tol.ulp * ulp_at<C>(e);
    case ToleranceMode::exact:
      return 0.0;
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

// The plain-fine test of abs_rel on a float or double output, four elements at a time with AVX2 where the CPU has it
// (runtime dispatch; the build targets baseline x86-64, whose SSE2 the compiler cannot vectorize this mixed-width
// loop for). True when some element of [0, n) is not plainly fine: NaN, Inf on either side, or outside atol + rtol
// |e|. The same predicate as compare_elements' scalar pass; it leaves the poison test to the NaN test, which is
// why the caller uses it only with a NaN poison.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KWB_AVX2_COMPARE 1
// Four elements of T as a vector (GCC's vector types cannot depend on a template parameter directly).
template <typename T>
struct Four;
template <>
struct Four<float> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct Four<double> {
  typedef double type __attribute__((vector_size(32)));
};

template <typename T>
__attribute__((target("avx2"))) bool any_outside_abs_rel_avx2(const unsigned char* got, const double* expected,
                                                              size_t n, double atol, double rtol) {
  using V4d = double __attribute__((vector_size(32)));
  using V4l = int64_t __attribute__((vector_size(32)));
  using V4t = typename Four<T>::type;
  const V4l abs_mask = V4l{} + std::numeric_limits<int64_t>::max();
  const V4d big = V4d{} + std::numeric_limits<double>::max();
  const V4d va = V4d{} + atol, vr = V4d{} + rtol;
  V4l bad{};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    V4t gt;
    V4d e;
    std::memcpy(&gt, got + sizeof(T) * i, sizeof gt);
    std::memcpy(&e, expected + i, sizeof e);
    const V4d g = __builtin_convertvector(gt, V4d);
    const V4d abs_err = (V4d)((V4l)(g - e) & abs_mask);
    const V4d abs_e = (V4d)((V4l)e & abs_mask);
    const V4d abs_g = (V4d)((V4l)g & abs_mask);
    // Each comparison is false with NaN, so a NaN anywhere leaves its lane's mask 0.
    const V4l fine = (abs_err <= va + vr * abs_e) & (abs_g <= big) & (abs_e <= big);
    bad |= ~fine;
  }
  bool any = (bad[0] | bad[1] | bad[2] | bad[3]) != 0;
  for (; i < n && !any; ++i) {
    T v;
    std::memcpy(&v, got + sizeof(T) * i, sizeof v);
    const double g = static_cast<double>(v), e = expected[i];
    any = !(std::fabs(g - e) <= atol + rtol * std::fabs(e) && std::fabs(g) <= std::numeric_limits<double>::max() &&
            std::fabs(e) <= std::numeric_limits<double>::max());
  }
  return any;
}

std::atomic<bool> g_vector_compare{true};

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has && g_vector_compare.load(std::memory_order_relaxed);
}
#endif

// The loop every timed call's validation runs (a prefill output is 256K elements, a dram one 32M), in chunks: a
// branch-free pass decides whether the whole chunk is plainly fine (no poison, finite, within tolerance; four
// elements at a time with AVX2 for abs_rel on f32 and f64, the common case: `fast`, see above); only a chunk that is
// not goes element by element through classify_slow. The error maxima
// (check's report) cost a division per element, so only a caller that asks for them pays it. C is the dtype's
// codec; `allowed(e)` is what the tolerance allows at e.
//
// An element holding the poison pattern was never written, with one exception: a dtype without NaN has no pattern
// a result cannot hold, so there an element that equals the poison and the oracle's value is a correct result
// (worker_session.cpp, make_poison, says how rarely an unwritten one can hide so).
// `fast(got, expected, n)`, where given, answers the chunk's plain-fine test in place of the scalar pass.
using FastTest = bool (*)(const unsigned char* got, const double* expected, size_t n, double atol, double rtol);

template <typename C, typename Allowed>
void compare_elements(OutputComparison& r, const unsigned char* got, std::span<const double> expected,
                      typename C::Bits poison, bool error_stats, Allowed allowed, FastTest fast = nullptr,
                      double atol = 0.0, double rtol = 0.0) {
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
    if (fast != nullptr) {
      bad = fast(got + sizeof(Bits) * begin, expected.data() + begin, end - begin, atol, rtol);
    } else {
      for (size_t i = begin; i < end; ++i) {
        const Bits bits = load(i);
        const double g = C::to_double(bits), e = expected[i];
        const double abs_err = std::fabs(g - e);
        // False for NaN anywhere; the finiteness tests keep Inf out (inf <= atol + rtol * inf would hold).
        bad |= !((bits != poison) & (abs_err <= allowed(e)) & (std::fabs(g) < k_inf) & (std::fabs(e) < k_inf));
      }
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

void allow_vector_compare(bool allowed) {
#ifdef KWB_AVX2_COMPARE
  g_vector_compare.store(allowed, std::memory_order_relaxed);
#else
  (void)allowed;
#endif
}

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
        FastTest fast = nullptr;
#ifdef KWB_AVX2_COMPARE
        // The vector test leaves the poison to its NaN test: only with a NaN poison (make_poison's, always).
        if constexpr (std::is_same_v<C, dtype_codec::Native<float>> || std::is_same_v<C, dtype_codec::Native<double>>) {
          using T = std::conditional_t<std::is_same_v<C, dtype_codec::Native<float>>, float, double>;
          if (cpu_has_avx2() && std::isnan(static_cast<double>(std::bit_cast<T>(p)))) {
            fast = &any_outside_abs_rel_avx2<T>;
          }
        }
#endif
        compare_elements<C>(
            r, got.data(), expected, p, error_stats, [=](double e) { return atol + rtol * std::fabs(e); }, fast, atol,
            rtol);
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
