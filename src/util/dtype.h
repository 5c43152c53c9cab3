// The element types of a task's tensors: one row each in KWB_DTYPES. Everything that depends on the dtype reads
// that row: its name (in task.toml and in the run message), its width, its DLPack type, the NaN patterns its
// poison is drawn from, and its exact conversions to and from double. Header-only: the worker, which links no
// kwb_core, builds its DLTensors from the same table.
#pragma once

#include <dlpack/dlpack.h>

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

namespace dtype_codec {

// What every codec has: the storage word `Bits`, whether the type has NaN, its quiet NaN (a set quiet bit) and the
// payload bits below that quiet bit, `to_double(Bits)` (exact) and `from_double(double)` (rounded to nearest, ties
// to even, once, straight from the double; overflowing to infinity; NaN becomes the quiet NaN of its sign).

// A binary floating-point format: 1 sign bit, `E` exponent bits, `M` stored significand bits, in the word `B`.
template <typename B, int E, int M>
struct BinaryFloat {
  using Bits = B;
  static constexpr bool has_nan = true;
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
    const double frac = std::frexp(a, &exp);  // a = frac * 2^exp, frac in [0.5, 1)
    int e = exp - 1;                           // a = s * 2^e, s in [1, 2)
    double m = std::nearbyint(std::ldexp(frac, M + 1)) - std::ldexp(1.0, M);  // stored significand, rounded once
    if (m >= std::ldexp(1.0, M)) {  // rounded up to the next power of two
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
    if (e == (1u << E) - 1) return m == 0 ? sign * std::numeric_limits<double>::infinity()
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

using F16 = Half<5, 10>;   // IEEE 754 binary16
using BF16 = Half<8, 7>;   // bfloat16: float32's exponent, 8 significant bits
using F32 = Native<float>;
using F64 = Native<double>;

}  // namespace dtype_codec

// The table. One row per dtype: its name (in task.toml, in the run message, and the enumerator), its codec (which
// fixes its width and NaN patterns), and its DLPack type code (bits: the codec's width; one lane).
#define KWB_DTYPES(X)                       \
  X(f16, dtype_codec::F16, kDLFloat)        \
  X(bf16, dtype_codec::BF16, kDLBfloat)     \
  X(f32, dtype_codec::F32, kDLFloat)        \
  X(f64, dtype_codec::F64, kDLFloat)

#define KWB_DTYPE_ENUMERATOR(name, codec, dl_code) name,
enum class DType : uint8_t { KWB_DTYPES(KWB_DTYPE_ENUMERATOR) };
#undef KWB_DTYPE_ENUMERATOR

// A row as data, for code that needs no conversion.
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;            // bytes per element
  DLDataType dlpack;      // what the candidate's DLTensor says
  bool has_nan;
  uint64_t quiet_nan;     // the quiet NaN's bits (the low `size` bytes); 0 without NaN
  uint64_t nan_payload;   // the payload bits below the quiet bit; 0 without NaN
};

#define KWB_DTYPE_INFO(name, codec, dl_code)                                                                \
  DTypeInfo{DType::name,                                                                                    \
            #name,                                                                                          \
            sizeof(codec::Bits),                                                                            \
            DLDataType{static_cast<uint8_t>(dl_code), static_cast<uint8_t>(8 * sizeof(codec::Bits)), 1},    \
            codec::has_nan,                                                                                 \
            codec::has_nan ? static_cast<uint64_t>(codec::quiet_nan) : 0,                                   \
            codec::has_nan ? static_cast<uint64_t>(codec::nan_payload) : 0},
inline constexpr DTypeInfo k_dtypes[] = {KWB_DTYPES(KWB_DTYPE_INFO)};
#undef KWB_DTYPE_INFO

constexpr const DTypeInfo& dtype_info(DType d) { return k_dtypes[static_cast<size_t>(d)]; }
inline const char* to_string(DType d) { return dtype_info(d).name; }
inline size_t dtype_size(DType d) { return dtype_info(d).size; }
inline DLDataType to_dlpack(DType d) { return dtype_info(d).dlpack; }

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
#define KWB_DTYPE_CASE(name, codec, dl_code) \
  case DType::name: return f(codec{});
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
