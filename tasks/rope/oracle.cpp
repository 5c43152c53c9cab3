// The rope task's oracle (include/kwb/oracle.h): rotary position embedding, GPT-J / Meta-Llama "interleaved" layout,
// written from the definition and shared with no implementation. For every token t, head h and pair index
// i in [0, head_dim / 2), with p = pos[t]:
//
//     theta          = p * base^(-2i / head_dim)
//     out[t, h, 2i]   = x[t, h, 2i] * cos(theta) - x[t, h, 2i+1] * sin(theta)
//     out[t, h, 2i+1] = x[t, h, 2i] * sin(theta) + x[t, h, 2i+1] * cos(theta)
//
// applied to q (q_out) and to k (k_out) with the same angles. Everything is in long double (a 64-bit mantissa on
// x86-64): the exponent -2i/head_dim, base^exponent (powl), the angle p * freq (|theta| <= 2^15 here, so its
// absolute error is ~2^15 * 2^-64, far below float32's), cosl/sinl (exact argument reduction) and the rotation.
// Each output is rounded once, from long double to double. Non-finite inputs follow IEEE arithmetic on the formula
// (a NaN in either element of a pair makes both outputs of the pair NaN, even at theta = 0 where sin = 0).
#include "kwb/oracle.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace {

int fail(const kwb_oracle_args* args, const char* message) {
  std::snprintf(args->error, args->error_capacity, "%s", message);
  return 1;
}

// One tensor [n_tokens, n_heads, head_dim] rotated into out with the angles of its tokens.
void rotate(const kwb_oracle_tensor& x, const kwb_oracle_tensor& out, const double* pos, long double base) {
  const int64_t n_tokens = x.shape[0], n_heads = x.shape[1], head_dim = x.shape[2];
  for (int64_t t = 0; t < n_tokens; ++t) {
    const long double p = pos[t];
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const long double exponent = -static_cast<long double>(2 * i) / static_cast<long double>(head_dim);
      const long double theta = p * std::pow(base, exponent);
      const long double c = std::cos(theta), s = std::sin(theta);
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t at = (t * n_heads + h) * head_dim + 2 * i;  // the pair (2i, 2i+1): interleaved
        const long double a = x.data[at], b = x.data[at + 1];
        out.data[at] = static_cast<double>(a * c - b * s);
        out.data[at + 1] = static_cast<double>(a * s + b * c);
      }
    }
  }
}

}  // namespace

extern "C" int kwb_oracle(const kwb_oracle_args* args) {
  if (args->num_inputs != 3 || args->num_outputs != 2 || args->num_scalars != 1 ||
      std::strcmp(args->scalar_names[0], "base") != 0) {
    return fail(args, "rope expects inputs q, k, pos, outputs q_out, k_out and the scalar base");
  }
  const kwb_oracle_tensor& q = args->inputs[0];
  const kwb_oracle_tensor& k = args->inputs[1];
  const kwb_oracle_tensor& pos = args->inputs[2];
  const kwb_oracle_tensor& q_out = args->outputs[0];
  const kwb_oracle_tensor& k_out = args->outputs[1];
  if (q.ndim != 3 || k.ndim != 3 || pos.ndim != 1 || q_out.elements != q.elements || k_out.elements != k.elements) {
    return fail(args, "rope: q, k must be [n_tokens, heads, head_dim], pos [n_tokens], outputs shaped like q and k");
  }
  if (k.shape[0] != q.shape[0] || pos.shape[0] != q.shape[0] || k.shape[2] != q.shape[2]) {
    return fail(args, "rope: q, k and pos must agree on n_tokens, q and k on head_dim");
  }
  if (q.shape[2] % 2 != 0) return fail(args, "rope: head_dim must be even (pairs are rotated)");
  const long double base = args->scalars[0];
  if (!(base > 0)) return fail(args, "rope: base must be positive");
  rotate(q, q_out, pos.data, base);
  rotate(k, k_out, pos.data, base);
  return 0;
}
