// The swiglu task's oracle (include/kwb/oracle.h): the SwiGLU activation of a gated MLP, element by element,
//
//   y[i] = silu(gate[i]) * up[i],   silu(g) = g * sigmoid(g) = g / (1 + exp(-g)),
//
// written from the definition and shared with no implementation. kwb hands it the bfloat16 inputs as the doubles
// they exactly are; it computes in long double (a 64-bit mantissa on x86-64, exponent range to ~1e4932) and rounds
// each output once, from long double to double. In long double exp(-g) does not overflow for any finite bfloat16 g
// with |g| < 11356, so silu(g) keeps its full relative precision where a float32 evaluation has long underflowed
// (silu(-100) = -3.7e-42, silu(-1000) = -5e-432 as a long double, 0 once stored as a double), and g = +1e4
// gives exp(-g) = 1.1e-4343, silu(g) = g to the last bit.
//
// Non-finite inputs follow IEEE arithmetic on the formula above, as torch.nn.functional.silu and ggml's
// ggml_silu_f32 (x / (1 + expf(-x))) evaluate it, rather than a convention of the oracle's own:
//   silu(+inf) = +inf / (1 + exp(-inf)) = +inf / 1 = +inf,
//   silu(-inf) = -inf / (1 + exp(+inf)) = -inf / +inf = NaN   (the limit would be -0; IEEE gives NaN),
//   silu(NaN)  = NaN;
// and then y = silu(g) * up: a NaN in either input gives NaN, inf * (nonzero) gives a signed inf, 0 * inf = NaN.
#include "kwb/oracle.h"

#include <cmath>
#include <cstdio>

namespace {

int fail(const kwb_oracle_args* args, const char* message) {
  std::snprintf(args->error, args->error_capacity, "%s", message);
  return 1;
}

long double silu(long double g) { return g / (1.0L + std::exp(-g)); }

}  // namespace

extern "C" int kwb_oracle(const kwb_oracle_args* args) {
  if (args->num_inputs != 2 || args->num_outputs != 1) {
    return fail(args, "swiglu expects two inputs (gate, up) and one output (y)");
  }
  const kwb_oracle_tensor& gate = args->inputs[0];
  const kwb_oracle_tensor& up = args->inputs[1];
  const kwb_oracle_tensor& y = args->outputs[0];
  if (up.elements != gate.elements || y.elements != gate.elements) {
    return fail(args, "swiglu: gate, up and y must have the same number of elements");
  }
  for (int64_t i = 0; i < gate.elements; ++i) {
    const long double s = silu(static_cast<long double>(gate.data[i]));
    y.data[i] = static_cast<double>(s * static_cast<long double>(up.data[i]));
  }
  return 0;
}
