// RoPE (interleaved pairs), reference optimized cpu implementation: one pass over q and k, no temporary tensor, no
// allocation. Per token, the angles' cosines and sines are computed once and applied to every q head and every k
// head of that token (n_heads + n_kv_heads heads share them); pairs are processed in chunks of k_chunk so that the
// per-token tables live on the stack whatever head_dim is.
//
//   per call:           f_i = powf(base, -2i / head_dim)                          (head_dim / 2 powf, once)
//   per token, pair i:  theta = (float)pos * f_i; c, s = cos, sin(theta)          (vectorized, below)
//                       C = (c0, c0, c1, c1, ...), S = (-s0, s0, -s1, s1, ...)     (tables of one head's width)
//   per head:           out = x * C + swap_pairs(x) * S                             (whole SIMD vectors)
//
// swap_pairs exchanges the two floats of every 64-bit lane, (x0, x1) -> (x1, x0), written as a 32-bit rotation of
// 64-bit integers, which the compiler lowers to one instruction (vprolq) or two shifts and an or. So
// out[2i] = x0 c - x1 s and out[2i+1] = x1 c + x0 s, rounded as the definition's two products and sum.
//
// cos and sin: the float32 angle is widened to double and reduced by k * pi/2 in double, with pi/2 split in two
// (fdlibm's medium reduction: the first part has 33 bits, so k * part exact for |k| < 2^20), then Taylor polynomials
// of degree 9 (sin) and 10 (cos) on |r| <= pi/4 (truncation < 2e-9) and the quadrant's signs. Every lane computes
// both, so it is branch-free and vectorizes; its error (~1e-9 before the rounding to float) is far below sinf's
// 1 ulp. An angle beyond 1e6 rad (a position beyond ~1e6) takes libm's double sin/cos instead.
#include <kwb/kernel.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

#if defined(__AVX512F__)
constexpr int k_lanes = 16;
#elif defined(__AVX__)
constexpr int k_lanes = 8;
#else
constexpr int k_lanes = 4;
#endif
using Vec = float __attribute__((vector_size(k_lanes * sizeof(float))));
using U64 = uint64_t __attribute__((vector_size(k_lanes * sizeof(float))));
constexpr int k_dlanes = k_lanes / 2;
using DVec = double __attribute__((vector_size(k_dlanes * sizeof(double))));
using DI = int64_t __attribute__((vector_size(k_dlanes * sizeof(double))));
using FHalf = float __attribute__((vector_size(k_dlanes * sizeof(float))));

// Pairs per chunk: the stack tables hold 2 * k_chunk floats each.
constexpr int64_t k_chunk = 128;

Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// (x0, x1, x2, x3, ...) -> (x1, x0, x3, x2, ...): each 64-bit lane rotated by 32 bits.
Vec swap_pairs(Vec v) {
  const U64 w = std::bit_cast<U64>(v);
  return std::bit_cast<Vec>((w << 32) | (w >> 32));
}

DVec dsplat(double v) { return v - DVec{}; }

// cos and sin of k_dlanes angles (|theta| <= 1e6), in double.
void sincos_lanes(DVec theta, DVec& c_out, DVec& s_out) {
  const DVec magic = dsplat(6755399441055744.0);  // 1.5 * 2^52: adding it rounds to an integer
  const DVec shifted = theta * dsplat(0.63661977236758134308) + magic;
  const DVec kd = shifted - magic;
  const DI quadrant = std::bit_cast<DI>(shifted) & 3;
  const DVec r = (theta - kd * dsplat(1.57079632673412561417e+00)) - kd * dsplat(6.07710050650619224932e-11);
  const DVec r2 = r * r;
  DVec s = dsplat(1.0 / 362880.0);
  s = s * r2 - dsplat(1.0 / 5040.0);
  s = s * r2 + dsplat(1.0 / 120.0);
  s = s * r2 - dsplat(1.0 / 6.0);
  s = s * r2 * r + r;
  DVec c = dsplat(-1.0 / 3628800.0);
  c = c * r2 + dsplat(1.0 / 40320.0);
  c = c * r2 - dsplat(1.0 / 720.0);
  c = c * r2 + dsplat(1.0 / 24.0);
  c = c * r2 - dsplat(0.5);
  c = c * r2 + dsplat(1.0);
  // quadrant 0: (c, s); 1: (-s, c); 2: (-c, -s); 3: (s, -c).
  const DI odd = (quadrant & 1) != 0;
  const DVec cc = odd ? s : c;
  const DVec ss = odd ? c : s;
  c_out = ((quadrant == 1) | (quadrant == 2)) ? -cc : cc;
  s_out = (quadrant >= 2) ? -ss : ss;
}

// The call's tensors, checked against the task signature: q [n_tokens, n_heads, head_dim], k [n_tokens,
// n_kv_heads, head_dim] f32, pos [n_tokens] i32; outputs shaped like q and k; compact row-major, host memory.
struct Rope {
  const float* q;
  const float* k;
  const int32_t* pos;
  float* q_out;
  float* k_out;
  int64_t n_tokens, n_heads, n_kv_heads, head_dim;
};

bool is_compact_host(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0) return false;
  }
  if (t.strides == nullptr) return true;  // DLPack: NULL strides mean compact row-major
  int64_t expected = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;  // a size-1 axis may have any stride
    expected *= t.shape[d];
  }
  return true;
}

template <typename T>
T* elements(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

bool same_shape(const DLTensor& a, const DLTensor& b) {
  return a.shape[0] == b.shape[0] && a.shape[1] == b.shape[1] && a.shape[2] == b.shape[2];
}

std::optional<Rope> unpack(const kwb_call& call) {
  if (call.num_inputs != 3 || call.num_outputs != 2) return std::nullopt;
  const DLTensor& q = call.inputs[0];
  const DLTensor& k = call.inputs[1];
  const DLTensor& pos = call.inputs[2];
  const DLTensor& q_out = call.outputs[0];
  const DLTensor& k_out = call.outputs[1];
  if (!is_compact_host(q, 3, kDLFloat, 32) || !is_compact_host(k, 3, kDLFloat, 32) ||
      !is_compact_host(pos, 1, kDLInt, 32) || !is_compact_host(q_out, 3, kDLFloat, 32) ||
      !is_compact_host(k_out, 3, kDLFloat, 32)) {
    return std::nullopt;
  }
  if (!same_shape(q, q_out) || !same_shape(k, k_out) || k.shape[0] != q.shape[0] || pos.shape[0] != q.shape[0] ||
      k.shape[2] != q.shape[2] || q.shape[2] % 2 != 0) {
    return std::nullopt;
  }
  return Rope{elements<const float>(q), elements<const float>(k), elements<const int32_t>(pos),
              elements<float>(q_out), elements<float>(k_out), q.shape[0], q.shape[1], k.shape[1], q.shape[2]};
}

// The tables C (cosines, each twice) and S (-sin, +sin) for pairs [0, n) of one token, from its angles.
void tables(const float* theta, int64_t n, float* C, float* S) {
  int64_t i = 0;
  bool small = true;
  for (int64_t j = 0; j < n; ++j) small &= std::fabs(theta[j]) <= 1e6f;
  if (small) {
    for (; i + k_dlanes <= n; i += k_dlanes) {
      FHalf t;
      std::memcpy(&t, theta + i, sizeof t);
      DVec c, s;
      sincos_lanes(__builtin_convertvector(t, DVec), c, s);
      for (int l = 0; l < k_dlanes; ++l) {
        C[2 * (i + l)] = C[2 * (i + l) + 1] = static_cast<float>(c[l]);
        S[2 * (i + l)] = static_cast<float>(-s[l]);
        S[2 * (i + l) + 1] = static_cast<float>(s[l]);
      }
    }
  }
  for (; i < n; ++i) {
    const double c = std::cos(static_cast<double>(theta[i])), s = std::sin(static_cast<double>(theta[i]));
    C[2 * i] = C[2 * i + 1] = static_cast<float>(c);
    S[2 * i] = static_cast<float>(-s);
    S[2 * i + 1] = static_cast<float>(s);
  }
}

// Rotates `heads` consecutive heads of one token, floats [lo, lo + w) of each, with the chunk's tables.
void rotate_heads(const float* x, float* y, int64_t heads, int64_t head_dim, int64_t lo, int64_t w, const float* C,
                  const float* S) {
  for (int64_t h = 0; h < heads; ++h) {
    const float* in = x + h * head_dim + lo;
    float* out = y + h * head_dim + lo;
    int64_t c = 0;
    for (; c + k_lanes <= w; c += k_lanes) {
      const Vec v = load(in + c);
      store(out + c, v * load(C + c) + swap_pairs(v) * load(S + c));
    }
    for (; c < w; c += 2) {  // the tail: whole pairs, since w and c are even
      const float x0 = in[c], x1 = in[c + 1];
      out[c] = x0 * C[c] + x1 * S[c];
      out[c + 1] = x1 * C[c + 1] + x0 * S[c + 1];
    }
  }
}

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rope> p = unpack(*call);
  if (!p) return 1;
  const float base = static_cast<float>(kwb_scalar_or(call, "base", 10000.0));
  const int64_t half = p->head_dim / 2;
  alignas(64) float freq[k_chunk];
  alignas(64) float theta[k_chunk];
  alignas(64) float C[2 * k_chunk];
  alignas(64) float S[2 * k_chunk];
  for (int64_t i0 = 0; i0 < half; i0 += k_chunk) {
    const int64_t n = half - i0 < k_chunk ? half - i0 : k_chunk;
    for (int64_t i = 0; i < n; ++i) {
      freq[i] = std::pow(base, -static_cast<float>(2 * (i0 + i)) / static_cast<float>(p->head_dim));
    }
    for (int64_t t = 0; t < p->n_tokens; ++t) {
      const float position = static_cast<float>(p->pos[t]);
      for (int64_t i = 0; i < n; ++i) theta[i] = position * freq[i];
      tables(theta, n, C, S);
      rotate_heads(p->q + t * p->n_heads * p->head_dim, p->q_out + t * p->n_heads * p->head_dim, p->n_heads,
                   p->head_dim, 2 * i0, 2 * n, C, S);
      rotate_heads(p->k + t * p->n_kv_heads * p->head_dim, p->k_out + t * p->n_kv_heads * p->head_dim,
                   p->n_kv_heads, p->head_dim, 2 * i0, 2 * n, C, S);
    }
  }
  return 0;
}
