// The softmax_bf16 task's oracle (include/kwb/oracle.h), the same definition as tasks/softmax/oracle.cpp (a task's
// oracle lives in its own folder; kwb hands it the bfloat16 inputs as the doubles they exactly are):
// y[r, c] = exp(x[r, c] - m_r) / sum_c' exp(x[r, c'] - m_r), m_r = max_c x[r, c], one row at a time, shared with
// no implementation. Subtracting the row's maximum changes nothing mathematically and keeps every exponent <= 0,
// so nothing overflows even for logits of +-1e4. The exponentials and their sum are in long double (a 64-bit
// mantissa on x86-64) with Neumaier's compensated summation (Neumaier 1974: the error stays O(u) independent of
// the row length, even for 32000 terms), and each output is rounded once, from long double to double; kwb compares
// the candidate's bfloat16 outputs with these doubles.
//
// Non-finite inputs follow IEEE arithmetic rather than a convention of their own: a -inf entry contributes
// exp(-inf) = 0; a row that is entirely -inf has m = -inf, x - m = NaN, and NaN outputs (as torch.softmax gives);
// a NaN or +inf entry makes its row NaN.
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
  if (args->num_inputs != 1 || args->num_outputs != 1) {
    return fail(args, "softmax expects one input (x) and one output (y)");
  }
  const kwb_oracle_tensor& x = args->inputs[0];
  const kwb_oracle_tensor& y = args->outputs[0];
  if (x.ndim < 1 || y.elements != x.elements || x.shape[x.ndim - 1] < 1) {
    return fail(args, "softmax: y must be shaped like x, and x's last axis must not be empty");
  }
  const int64_t cols = x.shape[x.ndim - 1];
  const int64_t rows = x.elements / cols;
  for (int64_t r = 0; r < rows; ++r) {
    const double* in = x.data + r * cols;
    double* out = y.data + r * cols;
    long double m = in[0];
    bool has_nan = std::isnan(in[0]);
    for (int64_t c = 1; c < cols; ++c) {
      if (std::isnan(in[c])) has_nan = true;
      if (in[c] > m) m = in[c];
    }
    if (has_nan) m = NAN;  // a NaN anywhere in the row makes the whole row NaN (exp(NaN - m) and the sum are NaN)
    CompensatedSum sum;
    for (int64_t c = 0; c < cols; ++c) sum.add(std::exp(static_cast<long double>(in[c]) - m));
    const long double s = sum.value();
    for (int64_t c = 0; c < cols; ++c) {
      out[c] = static_cast<double>(std::exp(static_cast<long double>(in[c]) - m) / s);
    }
  }
  return 0;
}
