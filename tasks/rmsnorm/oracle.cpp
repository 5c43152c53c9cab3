// The rmsnorm task's oracle (include/kwb/oracle.h): y[r, c] = x[r, c] / sqrt(mean_c x[r, c]^2 + eps) * weight[c],
// written from the definition, one row at a time, shared with no implementation. The squares and their sum are in
// long double (a 64-bit mantissa on x86-64) with Neumaier's compensated summation (Neumaier 1974: the error stays
// O(u) independent of the row length, even when a term is larger than the running sum), and each output is rounded
// once, from long double to double.
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
  if (args->num_inputs != 2 || args->num_outputs != 1 || args->num_scalars != 1) {
    return fail(args, "rmsnorm expects inputs (x, weight), output (y) and scalar (eps)");
  }
  const kwb_oracle_tensor& x = args->inputs[0];
  const kwb_oracle_tensor& w = args->inputs[1];
  const kwb_oracle_tensor& y = args->outputs[0];
  if (x.ndim < 1 || w.ndim != 1 || w.shape[0] != x.shape[x.ndim - 1] || y.elements != x.elements) {
    return fail(args, "rmsnorm: weight must be 1-D with the length of x's last axis, and y shaped like x");
  }
  const int64_t cols = w.shape[0];
  const int64_t rows = x.elements / cols;
  const long double eps = args->scalars[0];
  for (int64_t r = 0; r < rows; ++r) {
    CompensatedSum sum;
    for (int64_t c = 0; c < cols; ++c) {
      const long double v = x.data[r * cols + c];
      sum.add(v * v);
    }
    const long double inv_rms = 1.0L / std::sqrt(sum.value() / static_cast<long double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      y.data[r * cols + c] = static_cast<double>(static_cast<long double>(x.data[r * cols + c]) * inv_rms * w.data[c]);
    }
  }
  return 0;
}
