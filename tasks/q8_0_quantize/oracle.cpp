// The q8_0_quantize task's oracle (include/kwb/oracle.h): ggml's Q8_0 quantization of a float32 row, 32 values per
// block, written from its definition and shared with no implementation.
//
// The operator is *defined* by ggml's float32 recipe (quantize_row_q8_0_ref, ggml/src/ggml-quants.c), not by the
// real-number formula it approximates. Per block b of 32 values x_0..x_31:
//
//   amax = max_j |x_j|                       exact
//   d    = fl32(amax / 127)                  one float32 division, rounded to nearest even
//   id   = d != 0 ? fl32(1 / d) : 0          one float32 division
//   p_j  = fl32(x_j * id)                    one float32 multiplication
//   qs_j = roundf(p_j)                       to the nearest integer, halves AWAY from zero (C's roundf)
//   scales_b = f16(d)                        the float d rounded once to binary16, to nearest even; above the
//                                            largest f16 (d >= 65520) it is +inf, below 2^-24 it is subnormal or 0
//
// Both outputs are integers or f16 values with no rounding freedom, so they are compared exactly. That is also why
// the oracle computes in float32 and not in higher precision: the float32 roundings of d, id and x * id create
// exact halves (p_j = k + 0.5) where the real quotient x_j * 127 / amax is not a half, and miss some where it is, so
// a long-double oracle would disagree with ggml (and with every honest float32 implementation) on those elements.
// The quantization uses the float d, not the f16-rounded scale that is stored: that is what ggml does.
//
// Domain. The recipe is undefined for some inputs, and the oracle refuses them (a task error, not a silent
// convention): a NaN or infinite x (amax = inf gives id = 0 and inf * 0 = NaN, whose conversion to int8 is undefined
// in C), and a block with 0 < amax < 127 * FLT_MIN, where d is a float32 subnormal: 1/d can overflow to inf (0 * inf
// = NaN) or carry so little precision that |p| reaches 128. No law of the task draws such data. A block of zeros is
// in the domain: d = 0, id = 0 by the recipe's guard, every qs = 0 and the scale is 0.
//
// Arithmetic here: float32 operations on x86-64 SSE are IEEE binary32 rounded to nearest even, and kwb builds the
// oracle with -ffp-contract=off (no FMA) and no fast-math, so d, id and p are exactly the recipe's. roundf is
// written out (in double, where |p| + 0.5 is exact for |p| < 2^52) rather than called, and the f16 rounding is done
// from the exact value with nearbyint, not with the bit tricks or the F16C instruction implementations use.
#include "kwb/oracle.h"

#include <cfloat>
#include <cmath>
#include <cstdio>

namespace {

constexpr int k_block = 32;

int fail(const kwb_oracle_args* args, const char* message) {
  std::snprintf(args->error, args->error_capacity, "%s", message);
  return 1;
}

// C's roundf on a float value: the nearest integer, a half rounded away from zero. |p| + 0.5 is exact in double.
double round_half_away(float p) {
  const double magnitude = std::floor(std::fabs(static_cast<double>(p)) + 0.5);
  return p < 0.0f ? -magnitude : magnitude;
}

// The binary16 value nearest to v >= 0 (ties to even), as a double; +inf when it rounds above 65504.
double to_f16(double v) {
  if (v == 0.0) return 0.0;
  int exponent = 0;
  std::frexp(v, &exponent);  // v = m * 2^exponent, m in [0.5, 1)
  // binary16 carries 11 significant bits for normals (v >= 2^-14), so its spacing there is 2^(exponent - 11);
  // subnormals are multiples of 2^-24.
  const int quantum = exponent - 11 > -24 ? exponent - 11 : -24;
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(v, -quantum)), quantum);  // default mode: ties to even
  return rounded > 65504.0 ? HUGE_VAL : rounded;
}

}  // namespace

extern "C" int kwb_oracle(const kwb_oracle_args* args) {
  if (args->num_inputs != 1 || args->num_outputs != 2) {
    return fail(args, "q8_0_quantize expects one input (x) and two outputs (qs, scales)");
  }
  const kwb_oracle_tensor& x = args->inputs[0];
  const kwb_oracle_tensor& qs = args->outputs[0];
  const kwb_oracle_tensor& scales = args->outputs[1];
  if (x.ndim != 2 || qs.elements != x.elements || x.shape[1] % k_block != 0 ||
      scales.elements * k_block != x.elements) {
    return fail(args, "q8_0_quantize: x is [rows, 32*blocks], qs is shaped like x and scales is [rows, blocks]");
  }
  const int64_t blocks = x.elements / k_block;  // rows are whole blocks, so blocks run on across rows
  for (int64_t b = 0; b < blocks; ++b) {
    const double* in = x.data + b * k_block;
    float amax = 0.0f;
    for (int j = 0; j < k_block; ++j) {
      if (!std::isfinite(in[j])) return fail(args, "q8_0_quantize: x holds a NaN or an infinity (outside the domain)");
      const float a = std::fabs(static_cast<float>(in[j]));  // every input is a float32, so this is exact
      if (a > amax) amax = a;
    }
    if (amax != 0.0f && amax < 127.0f * FLT_MIN) {
      char message[200];
      std::snprintf(message, sizeof message,
                    "q8_0_quantize: block %lld has amax = %g, below 127 * FLT_MIN: d = amax / 127 is a float32 "
                    "subnormal, where ggml's recipe is undefined (outside the domain)",
                    static_cast<long long>(b), static_cast<double>(amax));
      return fail(args, message);
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < k_block; ++j) {
      const float p = static_cast<float>(in[j]) * id;
      const double q = round_half_away(p);
      if (q < -127.0 || q > 127.0) return fail(args, "q8_0_quantize: internal error, |qs| > 127");
      qs.data[b * k_block + j] = q;
    }
    scales.data[b] = to_f16(static_cast<double>(d));
  }
  return 0;
}
