// Decode attention on bfloat16, reference optimized cpu implementation: tasks/attention_decode/cpu/flash_decode.cpp
// with bfloat16 storage. q, k and v are widened to float32 as they are loaded (a zero-extend and a shift, exact),
// all arithmetic is float32, and each output is rounded once to bfloat16 (nearest, ties to even) at the end.
//
// One pass over the KV cache with an online softmax, in the manner of flash-decoding (Dao et al., "Flash-Decoding
// for long-context inference", 2023) and of Milakov & Gimelshein's online normalizer ("Online normalizer
// calculation for softmax", 2018). No score matrix; the running
// state (max, sum, a block of scores and the float32 accumulators) lives in a workspace that grows to the largest
// shape seen and is kept (its contents are rewritten on every call), so calls allocate nothing once warm.
//
// The cache is token-major ([n_ctx, n_kv_heads, head_dim]), so k and v are each swept front to back once, in
// memory order, in blocks of k_block tokens: first the block's scores for every query head (a kv row serves the
// `group` query heads that share it while it is in L1), then each head's online-softmax update, then the weighted
// rows of v. Each head keeps a running max m, a running sum l of exp(s - m) and an accumulator
// acc = sum_t exp(s_t - m) v_t (float32, in the workspace). Per block and head:
//   s_j   = scale * (q . k_j)                         (SIMD dot products, zero-padded tails)
//   m'    = max(m, max_j s_j);  c = exp(m - m')       (only when the block raises the max)
//   l     = l c + sum_j exp(s_j - m')                 (k_block exponentials as whole vectors)
//   acc   = acc c + sum_j exp(s_j - m') v_j           (SIMD axpys)
// and at the end out = bf16(acc / l). Rescaling l and acc by the same rounded c cancels c's error in the ratio.
//
// expf from libm is a scalar call (errno keeps the compiler from vectorizing it without -ffast-math), so the
// exponential is inline vector code: Cody-Waite range reduction and Cephes' expf polynomial (about 2 ulp), the
// same as tasks/softmax/cpu/online.cpp. NaN follows IEEE: a NaN score is skipped by the max but exp(NaN - m) is
// NaN, which poisons l and acc, so the head's output is NaN, as the oracle's.
#include <kwb/kernel.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

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
using IVec = int32_t __attribute__((vector_size(k_lanes * sizeof(int32_t))));
using UVec = uint32_t __attribute__((vector_size(k_lanes * sizeof(uint32_t))));
using HVec = uint16_t __attribute__((vector_size(k_lanes * sizeof(uint16_t))));

// Tokens per block: a multiple of every k_lanes above, so a block's scores are whole vectors.
constexpr int64_t k_block = 16;
constexpr int k_score_vecs = static_cast<int>(k_block / k_lanes);

constexpr float k_neg_inf = -std::numeric_limits<float>::infinity();

Vec splat(float v) { return v - Vec{}; }

Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// bfloat16 is the upper half of a float32: widening is exact, a zero-extend and a shift.
Vec widen(HVec h) { return std::bit_cast<Vec>(__builtin_convertvector(h, UVec) << 16); }

float from_bf16(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

Vec load_bf16(const uint16_t* p) {
  HVec h;
  std::memcpy(&h, p, sizeof h);
  return widen(h);
}

// The last `count` (< k_lanes) elements of a row, the missing lanes 0.
Vec load_bf16_tail(const uint16_t* p, int64_t count) {
  HVec h = HVec{};
  std::memcpy(&h, p, static_cast<size_t>(count) * sizeof(uint16_t));
  return widen(h);
}

// float32 to bfloat16, rounded to nearest, ties to even (as kwb's store_element and torch do); NaN stays NaN
// (quiet), where the rounding add could carry a NaN's payload into infinity.
HVec narrow(Vec v) {
  const UVec bits = std::bit_cast<UVec>(v);
  const UVec rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const UVec out = v != v ? (bits >> 16) | 0x0040u : rounded;
  return __builtin_convertvector(out, HVec);
}

float hsum(Vec v) {
  float s = 0.0f;
  for (int lane = 0; lane < k_lanes; ++lane) s += v[lane];
  return s;
}

// exp(t) for t <= 0 (and t = -inf or NaN), lane by lane. Below -110 the result is 0 in float32, so t is clamped
// there; that also turns -inf into 0. A NaN compares false and stays NaN.
Vec exp_nonpositive(Vec t) {
  const Vec lo = splat(-110.0f);
  t = t < lo ? lo : t;
  const Vec magic = splat(12582912.0f);
  const Vec shifted = t * splat(1.44269504088896341f) + magic;
  const Vec n = shifted - magic;
  const IVec ni = std::bit_cast<IVec>(shifted) - std::bit_cast<IVec>(magic);
  Vec r = t - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  Vec p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r + splat(1.0f);
  const IVec bits = (ni + 64 + 127) << 23;
  return p * std::bit_cast<Vec>(bits) * splat(5.42101086242752217e-20f);
}

// Row (token t, kv head g) of a [n_ctx, n_kv, d] cache.
const uint16_t* kv_row(const uint16_t* cache, int64_t t, int64_t g, int64_t n_ctx, int64_t n_kv, int64_t d) {
  (void)n_ctx;
  return cache + (t * n_kv + g) * d;
}

float dot(const uint16_t* a, const uint16_t* b, int64_t d) {
  Vec acc0 = Vec{}, acc1 = Vec{};
  int64_t i = 0;
  for (; i + 2 * k_lanes <= d; i += 2 * k_lanes) {
    acc0 += load_bf16(a + i) * load_bf16(b + i);
    acc1 += load_bf16(a + i + k_lanes) * load_bf16(b + i + k_lanes);
  }
  if (i + k_lanes <= d) {
    acc0 += load_bf16(a + i) * load_bf16(b + i);
    i += k_lanes;
  }
  if (i < d) acc1 += load_bf16_tail(a + i, d - i) * load_bf16_tail(b + i, d - i);
  return hsum(acc0 + acc1);
}

// acc *= c, over d elements.
void scale_row(float* acc, float c, int64_t d) {
  const Vec cv = splat(c);
  int64_t i = 0;
  for (; i + k_lanes <= d; i += k_lanes) store(acc + i, load(acc + i) * cv);
  for (; i < d; ++i) acc[i] *= c;
}

// acc += w * x, over d elements.
void axpy(float* acc, float w, const uint16_t* x, int64_t d) {
  const Vec wv = splat(w);
  int64_t i = 0;
  for (; i + k_lanes <= d; i += k_lanes) store(acc + i, load(acc + i) + wv * load_bf16(x + i));
  for (; i < d; ++i) acc[i] += w * from_bf16(x[i]);
}

struct Attention {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  uint16_t* out;
  int64_t n_heads;
  int64_t n_kv;
  int64_t n_ctx;
  int64_t d;
  float scale;
};

bool is_compact_host_bf16(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim) return false;
  if (t.dtype.code != kDLBfloat || t.dtype.bits != 16 || t.dtype.lanes != 1) return false;
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

// The call's tensors, checked against the task signature: q [n_heads, d], k and v [n_ctx, n_kv, d] in, out
// [n_heads, d] out, bf16, compact row-major, host memory; n_heads a multiple of n_kv. Anything else is refused.
std::optional<Attention> unpack(const kwb_call& call) {
  if (call.num_inputs != 3 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& q = call.inputs[0];
  const DLTensor& k = call.inputs[1];
  const DLTensor& v = call.inputs[2];
  const DLTensor& out = call.outputs[0];
  if (!is_compact_host_bf16(q, 2) || !is_compact_host_bf16(k, 3) || !is_compact_host_bf16(v, 3) ||
      !is_compact_host_bf16(out, 2)) {
    return std::nullopt;
  }
  const int64_t n_heads = q.shape[0], d = q.shape[1], n_ctx = k.shape[0], n_kv = k.shape[1];
  if (k.shape[2] != d || v.shape[0] != n_ctx || v.shape[1] != n_kv || v.shape[2] != d || out.shape[0] != n_heads ||
      out.shape[1] != d) {
    return std::nullopt;
  }
  if (n_ctx < 1 || n_kv < 1 || n_heads % n_kv != 0) return std::nullopt;
  const float scale = static_cast<float>(kwb_scalar_or(&call, "scale", 0.08838834764831845));
  return Attention{elements<const uint16_t>(q), elements<const uint16_t>(k), elements<const uint16_t>(v),
                   elements<uint16_t>(out), n_heads, n_kv, n_ctx, d, scale};
}

// Query head h reads kv head h / group: `group` consecutive query heads share one kv head.
int64_t kv_head(int64_t h, int64_t group, int64_t n_kv) {
  (void)n_kv;
  return h / group;
}

// m, l: n_heads floats each; s: n_heads * k_block floats (scores, then their exponentials); acc: n_heads * d.
void attend(const Attention& p, float* m, float* l, float* s, float* acc) {
  const int64_t group = p.n_heads / p.n_kv;
  std::fill(acc, acc + p.n_heads * p.d, 0.0f);
  std::fill(m, m + p.n_heads, k_neg_inf);
  std::fill(l, l + p.n_heads, 0.0f);
  for (int64_t t0 = 0; t0 < p.n_ctx; t0 += k_block) {
    const int64_t nb = std::min(k_block, p.n_ctx - t0);
    // 1. The block's scores, walking k in memory order (token, then kv head; a kv row serves its group's query
    //    heads while it is in L1). Missing tokens of a last, short block score -inf: exp(-inf) = 0.
    for (int64_t j = 0; j < nb; ++j) {
      for (int64_t h = 0; h < p.n_heads; ++h) {
        const uint16_t* kr = kv_row(p.k, t0 + j, kv_head(h, group, p.n_kv), p.n_ctx, p.n_kv, p.d);
        s[h * k_block + j] = dot(p.q + h * p.d, kr, p.d) * p.scale;
      }
    }
    for (int64_t h = 0; h < p.n_heads; ++h) {
      for (int64_t j = nb; j < k_block; ++j) s[h * k_block + j] = k_neg_inf;
    }
    // 2. Per head: the block's max, the rescale when it raises the running max, the exponentials and their sum.
    for (int64_t h = 0; h < p.n_heads; ++h) {
      float* sh = s + h * k_block;
      Vec block_max = load(sh);
      for (int vi = 1; vi < k_score_vecs; ++vi) {
        const Vec x = load(sh + vi * k_lanes);
        block_max = x > block_max ? x : block_max;
      }
      float m_new = m[h];
      for (int lane = 0; lane < k_lanes; ++lane) m_new = block_max[lane] > m_new ? block_max[lane] : m_new;
      if (m_new > m[h]) {
        const float c = exp_nonpositive(splat(m[h] - m_new))[0];  // 0 on the first block (m = -inf)
        l[h] *= c;
        scale_row(acc + h * p.d, c, p.d);
        m[h] = m_new;
      }
      Vec sum = Vec{};
      for (int vi = 0; vi < k_score_vecs; ++vi) {
        const Vec ev = exp_nonpositive(load(sh + vi * k_lanes) - splat(m_new));
        store(sh + vi * k_lanes, ev);
        sum += ev;
      }
      l[h] += hsum(sum);
    }
    // 3. acc += sum_j exp(s_j - m) v_j, walking v in memory order.
    for (int64_t j = 0; j < nb; ++j) {
      for (int64_t h = 0; h < p.n_heads; ++h) {
        const uint16_t* vr = kv_row(p.v, t0 + j, kv_head(h, group, p.n_kv), p.n_ctx, p.n_kv, p.d);
        axpy(acc + h * p.d, s[h * k_block + j], vr, p.d);
      }
    }
  }
  for (int64_t h = 0; h < p.n_heads; ++h) {
    const float* ah = acc + h * p.d;
    uint16_t* oh = p.out + h * p.d;
    const Vec inv_l = splat(1.0f / l[h]);
    int64_t i = 0;
    for (; i + k_lanes <= p.d; i += k_lanes) {
      const HVec o = narrow(load(ah + i) * inv_l);
      std::memcpy(oh + i, &o, sizeof o);
    }
    if (i < p.d) {
      Vec a = Vec{};
      std::memcpy(&a, ah + i, static_cast<size_t>(p.d - i) * sizeof(float));
      const HVec o = narrow(a * inv_l);
      std::memcpy(oh + i, &o, static_cast<size_t>(p.d - i) * sizeof(uint16_t));
    }
  }
}

// The running state, reused from call to call (rewritten before it is read on every call): a buffer that grows to
// the largest shape seen, so that only a call with a new, larger shape allocates.
std::vector<float> g_workspace;

}  // namespace

// Returns 1 when the call does not match the task signature (or the context is empty), 2 when the workspace cannot
// be allocated (an exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Attention> p = unpack(*call);
  if (!p) return 1;
  const size_t need = static_cast<size_t>((2 + k_block + p->d) * p->n_heads);
  try {
    if (g_workspace.size() < need) g_workspace.resize(need);
  } catch (...) {
    return 2;
  }
  float* w = g_workspace.data();
  attend(*p, w, w + p->n_heads, w + 2 * p->n_heads, w + (2 + k_block) * p->n_heads);
  return 0;
}
