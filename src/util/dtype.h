// The element types of a task's tensors: one row each in KWB_DTYPES. Everything that depends on the dtype reads
// that row: its name (in task.toml and in the run message), its width, its DLPack type, the NaN patterns its
// poison is drawn from, and its exact conversions to and from double. Header-only: the worker, which links no
// kwb_core, builds its DLTensors from the same table.
#pragma once

#include <dlpack/dlpack.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace kwb {

// What a dtype's values are: floating point (compared within a tolerance, NaN and Inf by kind), integer or boolean
// (compared exactly; no NaN, so their poison is a design of its own: worker_session.cpp, make_poison).
enum class DTypeKind : uint8_t { floating, integer, boolean };

namespace dtype_codec {

// What every codec has: the storage word `Bits`, whether the type has NaN, its quiet NaN (a set quiet bit) and the
// payload bits below that quiet bit, `to_double(Bits)` (exact) and `from_double(double)` (rounded to nearest, ties
// to even, once, straight from the double; overflowing to infinity; NaN becomes the quiet NaN of its sign).

// A binary floating-point format: 1 sign bit, `E` exponent bits, `M` stored significand bits, in the word `B`.
template <typename B, int E, int M>
struct BinaryFloat {
  using Bits = B;
  static constexpr DTypeKind kind = DTypeKind::floating;
  static constexpr int significand_bits = M;               // stored, below the implicit leading 1
  static constexpr int min_exponent = 2 - (1 << (E - 1));  // of the smallest normal, 2^min_exponent: 1 - bias
  static constexpr bool has_nan = true;
  // The largest integer below which every integer is exact (2^(M+1)): integer-valued data (randint, arange,
  // permutation) must stay within it.
  static constexpr double exact_integers = static_cast<double>(uint64_t{1} << (M + 1));
  static constexpr double lowest = -exact_integers;
  static constexpr double highest = exact_integers;
  static constexpr Bits sign_bit = static_cast<Bits>(Bits{1} << (E + M));
  static constexpr Bits inf = static_cast<Bits>(((Bits{1} << E) - 1) << M);
  static constexpr Bits quiet_nan = static_cast<Bits>(inf | (Bits{1} << (M - 1)));
  static constexpr Bits nan_payload = static_cast<Bits>((Bits{1} << (M - 1)) - 1);
};

// A 16-bit format the hardware may lack (f16, bf16): converted in software.
template <int E, int M>
struct Half : BinaryFloat<uint16_t, E, M> {
  using Base = BinaryFloat<uint16_t, E, M>;
  static constexpr int bias = (1 << (E - 1)) - 1;

  static uint16_t from_double(double v) {
    const uint16_t sign = std::signbit(v) ? Base::sign_bit : 0;
    if (std::isnan(v)) return sign | Base::quiet_nan;
    const double a = std::fabs(v);
    if (std::isinf(a)) return sign | Base::inf;
    // Subnormals and zero: a multiple of the smallest subnormal 2^(1 - bias - M), rounded to nearest even (the
    // default rounding mode); 2^M of them is the smallest normal, whose bits are that same integer.
    const double min_normal = std::ldexp(1.0, 1 - bias);
    if (a < min_normal) return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, bias - 1 + M)));
    int exp = 0;
    const double frac = std::frexp(a, &exp);                                  // a = frac * 2^exp, frac in [0.5, 1)
    int e = exp - 1;                                                          // a = s * 2^e, s in [1, 2)
    double m = std::nearbyint(std::ldexp(frac, M + 1)) - std::ldexp(1.0, M);  // stored significand, rounded once
    if (m >= std::ldexp(1.0, M)) {                                            // rounded up to the next power of two
      m = 0;
      ++e;
    }
    if (e + bias >= (1 << E) - 1) return sign | Base::inf;
    return sign | static_cast<uint16_t>((static_cast<unsigned>(e + bias) << M) | static_cast<unsigned>(m));
  }

  static double to_double(uint16_t b) {
    const double sign = (b & Base::sign_bit) != 0 ? -1.0 : 1.0;
    const unsigned e = (b >> M) & ((1u << E) - 1);
    const unsigned m = b & ((1u << M) - 1);
    if (e == (1u << E) - 1)
      return m == 0 ? sign * std::numeric_limits<double>::infinity()
                    : std::copysign(std::numeric_limits<double>::quiet_NaN(), sign);
    if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - M);
    return sign * std::ldexp(static_cast<double>(m + (1u << M)), static_cast<int>(e) - bias - M);
  }
};

template <typename T>
using UnsignedOfSize = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

// A format the CPU has (float, double): converted by the compiler (float rounds to nearest even).
template <typename T>
struct Native : BinaryFloat<UnsignedOfSize<T>, static_cast<int>(8 * sizeof(T)) - std::numeric_limits<T>::digits,
                            std::numeric_limits<T>::digits - 1> {
  using Bits = UnsignedOfSize<T>;
  static Bits from_double(double v) { return std::bit_cast<Bits>(static_cast<T>(v)); }
  static double to_double(Bits b) { return static_cast<double>(std::bit_cast<T>(b)); }
};

// A two's-complement integer of the CPU's, stored in its unsigned word. Its values reach the oracle as doubles, so
// the values kwb generates and the oracle may return are integers a double holds exactly: [lowest, highest] is the
// type's range clipped to +-(2^53 - 1) (which only clips i64). from_double rounds to nearest and saturates.
template <typename T>
struct Integer {
  using Bits = std::make_unsigned_t<T>;
  static constexpr DTypeKind kind = DTypeKind::integer;
  static constexpr bool has_nan = false;
  static constexpr Bits quiet_nan = 0;
  static constexpr Bits nan_payload = 0;
  static constexpr double k_double_exact = 9007199254740991.0;  // 2^53 - 1
  static constexpr double lowest = std::max(static_cast<double>(std::numeric_limits<T>::lowest()), -k_double_exact);
  static constexpr double highest = std::min(static_cast<double>(std::numeric_limits<T>::max()), k_double_exact);
  static constexpr double exact_integers = highest;

  static Bits from_double(double v) {
    if (std::isnan(v)) return 0;
    const double r = std::nearbyint(std::clamp(v, lowest, highest));
    return static_cast<Bits>(static_cast<T>(r));
  }
  // Exact for every value of T up to 2^53 in magnitude; beyond, the nearest double, at least 2^53 in magnitude and so
  // outside [lowest, highest] (compare_output relies on that: the oracle's integers are within it).
  static double to_double(Bits b) { return static_cast<double>(static_cast<T>(b)); }
};

// A boolean, one byte: 0 is false, 1 is true (as C++'s bool and DLPack's kDLBool). Any other byte is no boolean;
// it reads as its own value, which equals neither 0 nor 1, so an output holding one fails the exact comparison.
struct Bool {
  using Bits = uint8_t;
  static constexpr DTypeKind kind = DTypeKind::boolean;
  static constexpr bool has_nan = false;
  static constexpr Bits quiet_nan = 0;
  static constexpr Bits nan_payload = 0;
  static constexpr double lowest = 0.0;
  static constexpr double highest = 1.0;
  static constexpr double exact_integers = 1.0;
  static Bits from_double(double v) { return v != 0.0 && !std::isnan(v) ? 1 : 0; }
  static double to_double(Bits b) { return static_cast<double>(b); }
};

using F16 = Half<5, 10>;  // IEEE 754 binary16
using BF16 = Half<8, 7>;  // bfloat16: float32's exponent, 8 significant bits
using F32 = Native<float>;
using F64 = Native<double>;
using I8 = Integer<int8_t>;
using U8 = Integer<uint8_t>;
using I32 = Integer<int32_t>;
using I64 = Integer<int64_t>;

}  // namespace dtype_codec

// DLPack's type code for booleans (kDLBool, DLPack 0.8 and later, one byte per element); Debian 12's dlpack.h (0.6)
// predates it, so the value is spelled here.
inline constexpr uint8_t k_dlpack_bool = 6;

// The table. One row per dtype: its enumerator, its name (in task.toml and the run message), its codec (which fixes
// its width, its kind and NaN patterns), and its DLPack type code (bits: the codec's width; one lane).
// clang-format off
#define KWB_DTYPES(X)                       \
  X(f16, "f16", dtype_codec::F16, kDLFloat)        \
  X(bf16, "bf16", dtype_codec::BF16, kDLBfloat)     \
  X(f32, "f32", dtype_codec::F32, kDLFloat)        \
  X(f64, "f64", dtype_codec::F64, kDLFloat)        \
  X(i8, "i8", dtype_codec::I8, kDLInt)            \
  X(u8, "u8", dtype_codec::U8, kDLUInt)           \
  X(i32, "i32", dtype_codec::I32, kDLInt)          \
  X(i64, "i64", dtype_codec::I64, kDLInt)          \
  X(boolean, "bool", dtype_codec::Bool, k_dlpack_bool)
// clang-format on

#define KWB_DTYPE_ENUMERATOR(id, name, codec, dl_code) id,
enum class DType : uint8_t { KWB_DTYPES(KWB_DTYPE_ENUMERATOR) };
#undef KWB_DTYPE_ENUMERATOR

// A row as data, for code that needs no conversion.
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;        // bytes per element
  DLDataType dlpack;  // what the candidate's DLTensor says
  DTypeKind kind;
  double lowest;   // integer dtypes: the least value kwb generates or accepts from the oracle
  double highest;  // integer dtypes: the greatest; floating dtypes: +-2^(M+1), integer-valued data's bound
  bool has_nan;
  uint64_t quiet_nan;    // the quiet NaN's bits (the low `size` bytes); 0 without NaN
  uint64_t nan_payload;  // the payload bits below the quiet bit; 0 without NaN
};

#define KWB_DTYPE_INFO(id, name, codec, dl_code)                                                         \
  DTypeInfo{DType::id,                                                                                   \
            name,                                                                                        \
            sizeof(codec::Bits),                                                                         \
            DLDataType{static_cast<uint8_t>(dl_code), static_cast<uint8_t>(8 * sizeof(codec::Bits)), 1}, \
            codec::kind,                                                                                 \
            codec::lowest,                                                                               \
            codec::highest,                                                                              \
            codec::has_nan,                                                                              \
            codec::has_nan ? static_cast<uint64_t>(codec::quiet_nan) : 0,                                \
            codec::has_nan ? static_cast<uint64_t>(codec::nan_payload) : 0},
inline constexpr DTypeInfo k_dtypes[] = {KWB_DTYPES(KWB_DTYPE_INFO)};
#undef KWB_DTYPE_INFO

constexpr const DTypeInfo& dtype_info(DType d) { return k_dtypes[static_cast<size_t>(d)]; }
inline const char* to_string(DType d) { return dtype_info(d).name; }
inline size_t dtype_size(DType d) { return dtype_info(d).size; }
inline DLDataType to_dlpack(DType d) { return dtype_info(d).dlpack; }
// Whether outputs of `d` are compared exactly (integers, booleans) rather than within a tolerance.
inline bool is_exact_dtype(DType d) { return dtype_info(d).kind != DTypeKind::floating; }

inline std::optional<DType> parse_dtype(std::string_view s) {
  for (const DTypeInfo& t : k_dtypes) {
    if (s == t.name) return t.dtype;
  }
  return std::nullopt;
}

// The accepted names, for error messages: "f16, bf16, f32, f64".
inline std::string dtype_choices() {
  std::string out;
  for (const DTypeInfo& t : k_dtypes) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

// Calls f(codec{}) with the codec of `d`, for code whose inner loop must be compiled per dtype (a switch, not an
// indirect call per element).
template <typename F>
decltype(auto) visit_dtype(DType d, F&& f) {
  switch (d) {
// id is an enumerator's name and codec a type, not expressions to parenthesize.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define KWB_DTYPE_CASE(id, name, codec, dl_code) \
  case DType::id:                                \
    return f(codec{});
    // NOLINTEND(bugprone-macro-parentheses)
    KWB_DTYPES(KWB_DTYPE_CASE)
#undef KWB_DTYPE_CASE
  }
  return f(dtype_codec::F64{});  // unreachable: every enumerator has a case
}

// Element `i` of a tensor of `dtype` stored at `data`, as a double (exact: every dtype is a subset of double), and
// the reverse, rounded to the nearest value of `dtype` (ties to even, once, straight from the double), overflowing
// to infinity.
inline double load_element(DType dtype, const unsigned char* data, size_t i) {
  return visit_dtype(dtype, [&]<typename C>(C) {
    typename C::Bits b;
    std::memcpy(&b, data + sizeof b * i, sizeof b);
    return C::to_double(b);
  });
}
// Elements [0, n) of a tensor of `dtype` at `data`, as doubles into `out`: load_element of each, in bulk (one
// dispatch per tensor, and for the 16-bit formats a table of all 65,536 values, built on first use). The oracle's
// inputs go through it: a 250 MiB f16 table is 131 M conversions a call.
template <typename C>
const std::array<double, 65536>& half_values() {
  static const std::array<double, 65536> table = [] {
    std::array<double, 65536> t{};
    for (uint32_t b = 0; b < t.size(); ++b) t[b] = C::to_double(static_cast<uint16_t>(b));
    return t;
  }();
  return table;
}
inline void load_elements(DType dtype, const unsigned char* data, size_t n, double* out) {
  visit_dtype(dtype, [&]<typename C>(C) {
    using Bits = typename C::Bits;
    if constexpr (std::is_same_v<C, dtype_codec::F16> || std::is_same_v<C, dtype_codec::BF16>) {
      const std::array<double, 65536>& t = half_values<C>();
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, data + sizeof b * i, sizeof b);
        out[i] = t[b];
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        Bits b;
        std::memcpy(&b, data + sizeof b * i, sizeof b);
        out[i] = C::to_double(b);
      }
    }
  });
}
inline void store_element(DType dtype, unsigned char* data, size_t i, double v) {
  visit_dtype(dtype, [&]<typename C>(C) {
    const typename C::Bits b = C::from_double(v);
    std::memcpy(data + sizeof b * i, &b, sizeof b);
  });
}

// The 16-bit formats: bits of the nearest f16 / bf16 to `v` (ties to even; NaN becomes the quiet NaN of that sign),
// and the exact value of a bit pattern.
inline uint16_t f16_bits(double v) { return dtype_codec::F16::from_double(v); }
inline uint16_t bf16_bits(double v) { return dtype_codec::BF16::from_double(v); }
inline double f16_value(uint16_t bits) { return dtype_codec::F16::to_double(bits); }
inline double bf16_value(uint16_t bits) { return dtype_codec::BF16::to_double(bits); }

}  // namespace kwb
