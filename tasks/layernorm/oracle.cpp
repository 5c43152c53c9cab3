// The layernorm task's oracle (include/kwb/oracle.h): y[r, c] = (x[r, c] - m_r) / sqrt(v_r + eps) * weight[c] +
// bias[c], with m_r = mean_c x[r, c] and v_r = mean_c (x[r, c] - m_r)^2 (the biased, population variance), written
// from the definition, one row at a time, shared with no implementation.
//
// Two passes in long double (a 64-bit mantissa on x86-64): the mean, then the variance as the mean of the squared
// deviations from it, each sum with Neumaier's compensated summation (Neumaier 1974: the error stays O(u) whatever
// the row length, even when a term is larger than the running sum). The centred form is what keeps this exact on
// rows with a large mean and a small spread (the `large_mean` case): there E[x^2] - E[x]^2 would subtract two
// numbers that agree in their first ~20 bits. Each output is rounded once, from long double to double.
//
// Non-finite inputs follow IEEE arithmetic rather than a convention of their own: a row holding a NaN or an
// infinity has a NaN or infinite mean, the element responsible gives x - m = NaN (NaN - m, or inf - inf), so the
// variance, and with it every output of the row, is NaN (as torch.nn.functional.layer_norm gives). The row is set
// to NaN directly, because a compensated sum meeting an infinity already turns NaN on its own.
#include "kwb/oracle.h"

#include <cmath>
#include <cstdio>

namespace {

class CompensatedSum {
public:
  void add(long double x) {
    const long double t = m_sum + x;
    if (std::fabs(m_sum) >= std::fabs(x)) {
      m_c += (m_sum - t) + x;
    } else {
      m_c += (x - t) + m_sum;
    }
    m_sum = t;
  }
  long double value() const { return m_sum + m_c; }

private:
  long double m_sum = 0.0L;
  long double m_c = 0.0L;
};

int fail(const kwb_oracle_args* args, const char* message) {
  std::snprintf(args->error, args->error_capacity, "%s", message);
  return 1;
}

}  // namespace

extern "C" int kwb_oracle(const kwb_oracle_args* args) {
  if (args->num_inputs != 3 || args->num_outputs != 1 || args->num_scalars != 1) {
    return fail(args, "layernorm expects inputs (x, weight, bias), output (y) and scalar (eps)");
  }
  const kwb_oracle_tensor& x = args->inputs[0];
  const kwb_oracle_tensor& w = args->inputs[1];
  const kwb_oracle_tensor& b = args->inputs[2];
  const kwb_oracle_tensor& y = args->outputs[0];
  if (x.ndim < 1 || w.ndim != 1 || b.ndim != 1 || w.shape[0] != x.shape[x.ndim - 1] || b.shape[0] != w.shape[0] ||
      y.elements != x.elements) {
    return fail(args, "layernorm: weight and bias must be 1-D with the length of x's last axis, and y shaped like x");
  }
  const int64_t cols = w.shape[0];
  if (cols < 1) return fail(args, "layernorm: x's last axis must not be empty");
  const int64_t rows = x.elements / cols;
  const long double eps = args->scalars[0];
  const long double n = static_cast<long double>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double* in = x.data + r * cols;
    double* out = y.data + r * cols;
    bool finite = true;
    for (int64_t c = 0; c < cols; ++c) finite = finite && std::isfinite(in[c]);
    if (!finite) {
      for (int64_t c = 0; c < cols; ++c) out[c] = NAN;
      continue;
    }
    CompensatedSum sum;
    for (int64_t c = 0; c < cols; ++c) sum.add(in[c]);
    const long double mean = sum.value() / n;
    CompensatedSum squares;
    for (int64_t c = 0; c < cols; ++c) {
      const long double d = static_cast<long double>(in[c]) - mean;
      squares.add(d * d);
    }
    const long double variance = squares.value() / n;
    const long double inv_std = 1.0L / std::sqrt(variance + eps);
    for (int64_t c = 0; c < cols; ++c) {
      const long double d = static_cast<long double>(in[c]) - mean;
      out[c] = static_cast<double>(d * inv_std * w.data[c] + b.data[c]);
    }
  }
  return 0;
}
