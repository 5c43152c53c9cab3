// The gemm task's oracle (include/kwb/oracle.h): c[i, j] = sum_p a[i, p] * b[p, j], written from the definition,
// shared with no implementation. Every product of two float32 inputs is exact in long double (at most 48
// significant bits of 64), and the sum over p is Neumaier-compensated in long double (Neumaier 1974: the error
// stays O(u) independent of k, even for k = 16384), so each output is the exact dot product up to one rounding
// from long double to double. The loops run i, p, j so that rows of B are read
// contiguously, with one compensated accumulator per element of the output row.
#include "kwb/oracle.h"

#include <cmath>
#include <cstdio>
#include <new>
#include <vector>

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
  if (args->num_inputs != 2 || args->num_outputs != 1) {
    return fail(args, "gemm expects inputs (a, b) and output (c)");
  }
  const kwb_oracle_tensor& a = args->inputs[0];
  const kwb_oracle_tensor& b = args->inputs[1];
  const kwb_oracle_tensor& c = args->outputs[0];
  if (a.ndim != 2 || b.ndim != 2 || c.ndim != 2 || b.shape[0] != a.shape[1] || c.shape[0] != a.shape[0] ||
      c.shape[1] != b.shape[1]) {
    return fail(args, "gemm: a must be [m, k], b [k, n] and c [m, n]");
  }
  const int64_t m = a.shape[0];
  const int64_t k = a.shape[1];
  const int64_t n = b.shape[1];
  try {
    std::vector<CompensatedSum> row(static_cast<size_t>(n));
    for (int64_t i = 0; i < m; ++i) {
      row.assign(static_cast<size_t>(n), CompensatedSum{});
      for (int64_t p = 0; p < k; ++p) {
        const long double aip = a.data[i * k + p];
        const double* bp = b.data + p * n;
        for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)].add(aip * static_cast<long double>(bp[j]));
      }
      for (int64_t j = 0; j < n; ++j) c.data[i * n + j] = static_cast<double>(row[static_cast<size_t>(j)].value());
    }
  } catch (const std::bad_alloc&) {
    return fail(args, "gemm: out of memory for one row of accumulators");
  }
  return 0;
}
