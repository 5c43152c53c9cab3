// The attention_decode task's oracle (include/kwb/oracle.h): single-token decode attention against a KV cache,
// written from the definition and shared with no implementation. For every query head h, with kv head
// g = h / group (group = n_heads / n_kv_heads consecutive query heads share one kv head):
//
//   s[t]   = scale * sum_i q[h, i] * k[t, g, i]                  t in [0, n_ctx)
//   p[t]   = exp(s[t] - m) / sum_t' exp(s[t'] - m),   m = max_t s[t]
//   out[h, i] = sum_t p[t] * v[t, g, i]
//
// q and out are [n_heads, head_dim]; k and v are [n_ctx, n_kv_heads, head_dim] (token-major). Everything is in long
// double (a 64-bit mantissa on x86-64): a product of two float32 (or bfloat16) values is exact there, and every sum
// (the dot products, the softmax's denominator, the weighted sums of v) is Neumaier-compensated, so the error stays
// O(u_ld) whatever the length (16384 tokens here). Subtracting the max changes nothing mathematically and keeps every
// exponent <= 0, so scores of +-1000 are fine. Each output is rounded once, from long double to double.
//
// Non-finite inputs follow IEEE arithmetic: a NaN anywhere in q[h, :], or in k[t, g, :] for any t, makes s[t] NaN,
// and a NaN score makes the whole head's softmax (and so out[h, :]) NaN, as torch's scaled_dot_product_attention
// gives. Generated data hold no infinities (v's law is fixed, finite).
#include "kwb/oracle.h"

#include <cmath>
#include <cstdio>
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
  if (args->num_inputs != 3 || args->num_outputs != 1 || args->num_scalars != 1) {
    return fail(args, "attention_decode expects inputs q, k, v, output out and the scalar scale");
  }
  const kwb_oracle_tensor& q = args->inputs[0];
  const kwb_oracle_tensor& k = args->inputs[1];
  const kwb_oracle_tensor& v = args->inputs[2];
  const kwb_oracle_tensor& out = args->outputs[0];
  if (q.ndim != 2 || k.ndim != 3 || v.ndim != 3 || out.ndim != 2) {
    return fail(args, "attention_decode: q and out must be [n_heads, head_dim], k and v [n_ctx, n_kv_heads, head_dim]");
  }
  const int64_t n_heads = q.shape[0];
  const int64_t head_dim = q.shape[1];
  const int64_t n_ctx = k.shape[0];
  const int64_t n_kv = k.shape[1];
  if (k.shape[2] != head_dim || v.shape[0] != n_ctx || v.shape[1] != n_kv || v.shape[2] != head_dim ||
      out.shape[0] != n_heads || out.shape[1] != head_dim) {
    return fail(args, "attention_decode: q, k, v and out disagree on n_heads, n_ctx, n_kv_heads or head_dim");
  }
  if (n_ctx < 1 || n_kv < 1 || head_dim < 1 || n_heads % n_kv != 0) {
    return fail(args, "attention_decode: n_ctx, n_kv_heads and head_dim must be >= 1, n_heads a multiple of n_kv_heads");
  }
  const int64_t group = n_heads / n_kv;
  const long double scale = args->scalars[0];

  std::vector<long double> s(static_cast<size_t>(n_ctx));
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t g = h / group;
    const double* qh = q.data + h * head_dim;
    double* oh = out.data + h * head_dim;
    bool has_nan = false;
    for (int64_t t = 0; t < n_ctx; ++t) {
      const double* kt = k.data + (t * n_kv + g) * head_dim;
      CompensatedSum dot;
      for (int64_t i = 0; i < head_dim; ++i) dot.add(static_cast<long double>(qh[i]) * kt[i]);
      s[t] = scale * dot.value();
      if (std::isnan(s[t])) has_nan = true;
    }
    if (has_nan) {
      for (int64_t i = 0; i < head_dim; ++i) oh[i] = NAN;
      continue;
    }
    long double m = s[0];
    for (int64_t t = 1; t < n_ctx; ++t) m = s[t] > m ? s[t] : m;
    CompensatedSum denominator;
    for (int64_t t = 0; t < n_ctx; ++t) {
      s[t] = std::exp(s[t] - m);  // s now holds the unnormalized weights exp(s - m), in (0, 1]
      denominator.add(s[t]);
    }
    const long double d = denominator.value();
    for (int64_t i = 0; i < head_dim; ++i) {
      CompensatedSum acc;
      for (int64_t t = 0; t < n_ctx; ++t) acc.add(s[t] * static_cast<long double>(v.data[(t * n_kv + g) * head_dim + i]));
      oh[i] = static_cast<double>(acc.value() / d);
    }
  }
  return 0;
}
