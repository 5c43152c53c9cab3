// The dtype table (util/dtype.h): each row's name, width, DLPack type, conversions and NaN patterns. The 16-bit
// dtypes: bit patterns of known values, rounding to nearest even straight from double,
// overflow, subnormals, NaN and infinity; generated inputs that are exactly values of their dtype; unwritten 16-bit
// outputs found by their poison.
#include "util/dtype.h"
#include "oracle/tolerance.h"
#include "task/data.h"
#include "task/task.h"

#include <gtest/gtest.h>

#include <set>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kwb {
namespace {

const double k_inf = std::numeric_limits<double>::infinity();
const double k_nan = std::numeric_limits<double>::quiet_NaN();

TEST(dtype_test, f16_bit_patterns_of_known_values) {
  EXPECT_EQ(f16_bits(1.0), 0x3C00);
  EXPECT_EQ(f16_bits(-2.0), 0xC000);
  EXPECT_EQ(f16_bits(0.0), 0x0000);
  EXPECT_EQ(f16_bits(-0.0), 0x8000);
  EXPECT_EQ(f16_bits(65504.0), 0x7BFF);                  // largest finite
  EXPECT_EQ(f16_bits(std::ldexp(1.0, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(f16_bits(std::ldexp(1.0, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(f16_bits(std::ldexp(1023.0, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(f16_bits(k_inf), 0x7C00);
  EXPECT_EQ(f16_bits(-k_inf), 0xFC00);
  EXPECT_EQ(f16_bits(k_nan), 0x7E00);
}

TEST(dtype_test, bf16_bit_patterns_of_known_values) {
  EXPECT_EQ(bf16_bits(1.0), 0x3F80);
  EXPECT_EQ(bf16_bits(-2.0), 0xC000);
  EXPECT_EQ(bf16_bits(std::ldexp(255.0, 120)), 0x7F7F);  // largest finite, 3.3895e38
  EXPECT_EQ(bf16_bits(std::ldexp(1.0, -126)), 0x0080);   // smallest normal
  EXPECT_EQ(bf16_bits(std::ldexp(1.0, -133)), 0x0001);   // smallest subnormal
  EXPECT_EQ(bf16_bits(k_inf), 0x7F80);
  EXPECT_EQ(bf16_bits(-k_inf), 0xFF80);
  EXPECT_EQ(bf16_bits(k_nan), 0x7FC0);
}

TEST(dtype_test, values_of_bit_patterns_are_exact) {
  EXPECT_EQ(f16_value(0x3C00), 1.0);
  EXPECT_EQ(f16_value(0x7BFF), 65504.0);
  EXPECT_EQ(f16_value(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(f16_value(0x3555), 0.333251953125);
  EXPECT_EQ(f16_value(0xFC00), -k_inf);
  EXPECT_TRUE(std::isnan(f16_value(0x7E01)));
  EXPECT_EQ(bf16_value(0x3F80), 1.0);
  EXPECT_EQ(bf16_value(0x7F7F), std::ldexp(255.0, 120));
  EXPECT_EQ(bf16_value(0x0001), std::ldexp(1.0, -133));
  EXPECT_EQ(bf16_value(0x7F80), k_inf);
  EXPECT_TRUE(std::isnan(bf16_value(0xFFC1)));
  // Every pattern that is not NaN converts to a value that converts back to the same pattern.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    if (!std::isnan(f16_value(bits))) {
      EXPECT_EQ(f16_bits(f16_value(bits)), bits) << std::hex << b;
    }
    if (!std::isnan(bf16_value(bits))) {
      EXPECT_EQ(bf16_bits(bf16_value(bits)), bits) << std::hex << b;
    }
  }
}

// The bulk conversion the oracle's inputs go through is load_element, bit for bit: every pattern of the 16-bit
// formats (NaNs included), and a spread of patterns of every other dtype.
TEST(dtype_test, load_elements_is_load_element_of_each_element) {
  std::vector<unsigned char> halves(2 * 65536);
  for (uint32_t b = 0; b < 65536; ++b) std::memcpy(halves.data() + 2 * b, &b, 2);
  for (DType d : {DType::f16, DType::bf16}) {
    std::vector<double> out(65536);
    load_elements(d, halves.data(), out.size(), out.data());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint64_t>(out[i]), std::bit_cast<uint64_t>(load_element(d, halves.data(), i)))
          << to_string(d) << " pattern " << i;
    }
  }
  std::vector<unsigned char> bytes(8 * 4096);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (unsigned char& c : bytes) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<unsigned char>(x >> 56);
  }
  for (const DTypeInfo& t : k_dtypes) {
    const size_t n = bytes.size() / t.size;
    std::vector<double> out(n);
    load_elements(t.dtype, bytes.data(), n, out.data());
    for (size_t i = 0; i < n; ++i) {
      const double want = load_element(t.dtype, bytes.data(), i);
      ASSERT_TRUE(std::bit_cast<uint64_t>(out[i]) == std::bit_cast<uint64_t>(want) ||
                  (std::isnan(out[i]) && std::isnan(want)))
          << t.name << " element " << i;
    }
  }
}

TEST(dtype_test, ties_round_to_even) {
  // Halfway between 1 (0x3C00, even) and 1 + 2^-10 (0x3C01): to 0x3C00; halfway between 0x3C01 and 0x3C02: up.
  EXPECT_EQ(f16_bits(1.0 + std::ldexp(1.0, -11)), 0x3C00);
  EXPECT_EQ(f16_bits(1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);
  EXPECT_EQ(bf16_bits(1.0 + std::ldexp(1.0, -8)), 0x3F80);
  EXPECT_EQ(bf16_bits(1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82);
  // Among subnormals too: half the smallest subnormal goes to zero, one and a half to two.
  EXPECT_EQ(f16_bits(std::ldexp(1.0, -25)), 0x0000);
  EXPECT_EQ(f16_bits(3 * std::ldexp(1.0, -25)), 0x0002);
  // Just above a tie rounds up: the double is rounded once, not through float (which would make it a tie).
  EXPECT_EQ(f16_bits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3C01);
}

TEST(dtype_test, beyond_the_largest_finite_value_rounds_to_infinity) {
  // 65520 is halfway between 65504 (odd significand) and 2^16: ties to even overflow.
  EXPECT_EQ(f16_bits(65519.99), 0x7BFF);
  EXPECT_EQ(f16_bits(65520.0), 0x7C00);
  EXPECT_EQ(f16_bits(-1e10), 0xFC00);
  EXPECT_EQ(bf16_bits(std::ldexp(511.0, 119)), 0x7F80);  // halfway between 0x7F7F and 2^128
  EXPECT_EQ(bf16_bits(1e300), 0x7F80);
}

TEST(dtype_test, load_and_store_go_through_the_same_conversions) {
  std::vector<unsigned char> bytes(4);
  store_element(DType::f16, bytes.data(), 1, 65504.0);
  EXPECT_EQ(load_element(DType::f16, bytes.data(), 1), 65504.0);
  uint16_t raw;
  std::memcpy(&raw, bytes.data() + 2, 2);
  EXPECT_EQ(raw, 0x7BFF);
  store_element(DType::bf16, bytes.data(), 0, 1.0);
  std::memcpy(&raw, bytes.data(), 2);
  EXPECT_EQ(raw, 0x3F80);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_STREQ(to_string(DType::f16), "f16");
}

TEST(dtype_table, every_name_parses_back_to_its_row_and_no_other_spelling_does) {
  for (size_t i = 0; i < std::size(k_dtypes); ++i) {
    const DTypeInfo& t = k_dtypes[i];
    EXPECT_EQ(static_cast<size_t>(t.dtype), i);  // rows in enumerator order: dtype_info indexes the table
    EXPECT_EQ(parse_dtype(to_string(t.dtype)), t.dtype) << t.name;
    EXPECT_EQ(&dtype_info(t.dtype), &t);
  }
  for (const char* other : {"float32", "F32", "fp16", "", "f32 ", "double"})
    EXPECT_EQ(parse_dtype(other), std::nullopt);
  EXPECT_EQ(dtype_choices(), "f16, bf16, f32, f64, i8, u8, i32, i64, bool");
}

TEST(dtype_table, widths_and_dlpack_types) {
  struct Expected {
    DType t;
    size_t size;
    uint8_t code;
  };
  for (const Expected& e :
       {Expected{DType::f16, 2, kDLFloat}, Expected{DType::bf16, 2, kDLBfloat}, Expected{DType::f32, 4, kDLFloat},
        Expected{DType::f64, 8, kDLFloat}, Expected{DType::i8, 1, kDLInt}, Expected{DType::u8, 1, kDLUInt},
        Expected{DType::i32, 4, kDLInt}, Expected{DType::i64, 8, kDLInt},
        Expected{DType::boolean, 1, 6 /* DLPack 0.8's kDLBool */}}) {
    EXPECT_EQ(dtype_size(e.t), e.size) << to_string(e.t);
    const DLDataType dl = to_dlpack(e.t);
    EXPECT_EQ(dl.code, e.code) << to_string(e.t);
    EXPECT_EQ(dl.bits, 8 * e.size) << to_string(e.t);
    EXPECT_EQ(dl.lanes, 1) << to_string(e.t);
  }
}

TEST(dtype_table, values_of_every_dtype_store_and_load_exactly) {
  for (const DTypeInfo& t : k_dtypes) {
    if (t.kind != DTypeKind::floating) continue;  // integers and booleans: the next test
    std::vector<unsigned char> bytes(4 * t.size);
    const double values[] = {1.5, -0.25, 0.0, 3.0};
    for (size_t i = 0; i < 4; ++i) store_element(t.dtype, bytes.data(), i, values[i]);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(load_element(t.dtype, bytes.data(), i), values[i]) << t.name;
    store_element(t.dtype, bytes.data(), 1, k_inf);
    EXPECT_EQ(load_element(t.dtype, bytes.data(), 1), k_inf) << t.name;
  }
  // Rounded to the dtype, once.
  std::vector<unsigned char> bytes(8);
  store_element(DType::f32, bytes.data(), 0, 0.1);
  EXPECT_EQ(load_element(DType::f32, bytes.data(), 0), static_cast<double>(0.1f));
  store_element(DType::f64, bytes.data(), 0, 0.1);
  EXPECT_EQ(load_element(DType::f64, bytes.data(), 0), 0.1);
  store_element(DType::bf16, bytes.data(), 0, 1.0 + std::ldexp(1.0, -8));
  EXPECT_EQ(load_element(DType::bf16, bytes.data(), 0), 1.0);
}

// Integers store exactly within their range and saturate beyond it (never wrap: -129 is no 127); a fraction rounds to
// nearest even; i64 holds what a double holds exactly, +-(2^53 - 1), the range kwb's data and oracle values keep to.
// A boolean is 0 or 1, and a byte that is neither reads as itself, so it equals no oracle value.
TEST(dtype_table, integers_store_exactly_in_range_and_saturate_beyond_it) {
  std::vector<unsigned char> bytes(8);
  auto round_trip = [&](DType d, double v) {
    store_element(d, bytes.data(), 0, v);
    return load_element(d, bytes.data(), 0);
  };
  EXPECT_EQ(round_trip(DType::i8, -128), -128);
  EXPECT_EQ(round_trip(DType::i8, 127), 127);
  EXPECT_EQ(round_trip(DType::i8, -129), -128);
  EXPECT_EQ(round_trip(DType::i8, 300), 127);
  EXPECT_EQ(round_trip(DType::u8, 255), 255);
  EXPECT_EQ(round_trip(DType::u8, -1), 0);
  EXPECT_EQ(round_trip(DType::i32, -2147483648.0), -2147483648.0);
  EXPECT_EQ(round_trip(DType::i32, 2.5), 2);  // ties to even
  EXPECT_EQ(round_trip(DType::i32, 3.5), 4);
  EXPECT_EQ(round_trip(DType::i64, 9007199254740991.0), 9007199254740991.0);
  EXPECT_EQ(round_trip(DType::i64, -1e300), -9007199254740991.0);
  EXPECT_EQ(dtype_info(DType::i64).highest, 9007199254740991.0);
  EXPECT_EQ(dtype_info(DType::i8).lowest, -128);
  EXPECT_EQ(round_trip(DType::boolean, 0.0), 0);
  EXPECT_EQ(round_trip(DType::boolean, -3.0), 1);
  bytes[0] = 0xA7;
  EXPECT_EQ(load_element(DType::boolean, bytes.data(), 0), 167.0);
  for (DType d : {DType::i8, DType::u8, DType::i32, DType::i64, DType::boolean}) {
    EXPECT_FALSE(dtype_info(d).has_nan) << to_string(d);
    EXPECT_TRUE(is_exact_dtype(d)) << to_string(d);
  }
  EXPECT_FALSE(is_exact_dtype(DType::bf16));
  EXPECT_EQ(parse_dtype("bool"), DType::boolean);
}

TEST(dtype_table, every_poison_pattern_is_a_nan_other_than_the_canonical_one) {
  for (DType d : {DType::f16, DType::bf16, DType::f32, DType::f64}) EXPECT_TRUE(dtype_info(d).has_nan);
  for (const DTypeInfo& t : k_dtypes) {
    if (!t.has_nan) continue;  // an integer dtype's poison is no NaN
    // The canonical quiet NaN is what storing a NaN gives; the payload sits below its quiet bit.
    std::vector<unsigned char> bytes(t.size);
    store_element(t.dtype, bytes.data(), 0, k_nan);
    uint64_t canonical = 0;
    std::memcpy(&canonical, bytes.data(), t.size);
    EXPECT_EQ(canonical, t.quiet_nan) << t.name;
    EXPECT_EQ(t.quiet_nan & t.nan_payload, 0u) << t.name;
    EXPECT_NE(t.nan_payload, 0u) << t.name;
    for (uint64_t payload : {uint64_t{1}, t.nan_payload, t.nan_payload >> 1}) {
      const uint64_t poison = t.quiet_nan | (payload & t.nan_payload);
      std::memcpy(bytes.data(), &poison, t.size);
      EXPECT_TRUE(std::isnan(load_element(t.dtype, bytes.data(), 0))) << t.name << std::hex << " " << poison;
    }
  }
}

// The integer laws: randint covers [low, high] with both ends, arange counts from low in memory order, and a
// permutation holds each of 0..n-1 exactly once, in an order that depends on the seed.
TEST(dtype_test, integer_laws_draw_the_values_they_promise) {
  Distribution r;
  r.kind = DistributionKind::randint;
  r.low = -3;
  r.high = 2;
  std::vector<unsigned char> bytes(4 * 600);
  fill_tensor(r, DType::i32, bytes, 5);
  std::set<double> seen;
  for (size_t i = 0; i < 600; ++i) seen.insert(load_element(DType::i32, bytes.data(), i));
  EXPECT_EQ(seen, (std::set<double>{-3, -2, -1, 0, 1, 2}));

  Distribution a;
  a.kind = DistributionKind::arange;
  a.low = 4095;
  std::vector<unsigned char> pos(8 * 5);
  fill_tensor(a, DType::i64, pos, 1);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(load_element(DType::i64, pos.data(), i), 4095.0 + static_cast<double>(i));

  Distribution p;
  p.kind = DistributionKind::permutation;
  std::vector<unsigned char> one(4 * 100), two(4 * 100);
  fill_tensor(p, DType::f32, one, 1);  // a float tensor of distinct integers: tie-free data
  fill_tensor(p, DType::f32, two, 2);
  std::set<double> values;
  for (size_t i = 0; i < 100; ++i) values.insert(load_element(DType::f32, one.data(), i));
  EXPECT_EQ(values.size(), 100u);
  EXPECT_EQ(*values.begin(), 0.0);
  EXPECT_EQ(*values.rbegin(), 99.0);
  EXPECT_NE(one, two);
}

// What a law may fill: an integer dtype takes only the integer laws (and zeros, constant) within its range; a float
// dtype takes an integer law only where every integer it reaches is exact (bf16: 256 values).
TEST(dtype_test, a_law_that_cannot_fill_a_dtype_exactly_is_named) {
  Distribution normal;
  EXPECT_NE(distribution_misfit(normal, DType::i8, 10).find("i8 data needs an integer law"), std::string::npos);
  EXPECT_EQ(distribution_misfit(normal, DType::f32, 10), "");
  Distribution r;
  r.kind = DistributionKind::randint;
  r.low = -200;
  r.high = 100;
  EXPECT_NE(distribution_misfit(r, DType::i8, 10).find("beyond what i8 holds exactly (-128 to 127)"), std::string::npos)
      << distribution_misfit(r, DType::i8, 10);
  EXPECT_EQ(distribution_misfit(r, DType::i32, 10), "");
  Distribution p;
  p.kind = DistributionKind::permutation;
  EXPECT_EQ(distribution_misfit(p, DType::bf16, 256), "");
  EXPECT_NE(distribution_misfit(p, DType::bf16, 258), "");
  EXPECT_NE(distribution_misfit(p, DType::u8, 257), "");
  EXPECT_NE(distribution_misfit(p, DType::boolean, 3), "");
  Distribution c;
  c.kind = DistributionKind::constant;
  c.value = 0.5;
  EXPECT_NE(distribution_misfit(c, DType::i32, 4).find("integers only"), std::string::npos);
  c.value = 1;
  c.special_fraction = 0.1;
  c.special_value = -std::numeric_limits<double>::infinity();
  EXPECT_NE(distribution_misfit(c, DType::i32, 4).find("special_value"), std::string::npos);
}

TEST(dtype_test, generated_inputs_are_values_of_their_dtype) {
  Distribution d;
  d.kind = DistributionKind::normal;
  d.scale = 3.0;
  for (DType t : {DType::f16, DType::bf16}) {
    std::vector<unsigned char> bytes(2 * 1000);
    fill_tensor(d, t, bytes, 11);
    size_t distinct_from_zero = 0;
    for (size_t i = 0; i < 1000; ++i) {
      const double v = load_element(t, bytes.data(), i);
      ASSERT_TRUE(std::isfinite(v));
      distinct_from_zero += v != 0.0;
      // Stored again, the value is the same pattern: it is exactly a value of the dtype.
      std::vector<unsigned char> again(2);
      store_element(t, again.data(), 0, v);
      EXPECT_EQ(std::memcmp(again.data(), bytes.data() + 2 * i, 2), 0);
    }
    EXPECT_GT(distinct_from_zero, 990u);
  }
}

TEST(dtype_test, an_unwritten_16_bit_output_is_found_by_its_poison) {
  const uint64_t poison = 0x7E5A;  // an f16 quiet NaN with a payload
  std::vector<uint16_t> got = {f16_bits(1.0), static_cast<uint16_t>(poison), f16_bits(2.5)};
  const std::vector<double> expected = {1.0, 2.0, 2.0};
  const OutputComparison c = compare_output({reinterpret_cast<const unsigned char*>(got.data()), got.size() * 2},
                                            DType::f16, expected, Tolerance{ToleranceMode::abs_rel, 1e-3, 0.0}, poison);
  EXPECT_EQ(c.elements, 3u);
  EXPECT_EQ(c.poison_left, 1u);
  EXPECT_EQ(c.value_mismatches, 1u);  // 2.5 against 2
}

// The special-value mix replaces about special_fraction of the elements and leaves every other element exactly what
// the plain law draws (its draws come from a stream of their own).
TEST(special_values, a_mix_replaces_a_fraction_and_leaves_the_rest_as_drawn) {
  Distribution plain;
  plain.kind = DistributionKind::normal;
  Distribution masked = plain;
  masked.special_fraction = 0.25;
  masked.special_value = -k_inf;
  const size_t n = 40000;
  std::vector<unsigned char> a(n * 4), b(n * 4);
  fill_tensor(plain, DType::f32, a, 7);
  fill_tensor(masked, DType::f32, b, 7);
  size_t special = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = load_element(DType::f32, b.data(), i);
    if (x == -k_inf) {
      ++special;
    } else {
      EXPECT_EQ(x, load_element(DType::f32, a.data(), i)) << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(special) / n, 0.25, 0.01);  // 0.25 +- 4.6 sd
}

}  // namespace
}  // namespace kwb
