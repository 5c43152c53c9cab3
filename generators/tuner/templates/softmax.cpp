// Softmax, written by kwb's "tuner" generator (generators/tuner) from its template for the task: the online
// softmax reference (tasks/softmax/cpu/online.cpp) with its two tuning knobs fixed below.
//
//   BLOCK = 0 (whole row): pass 1 is the online normalizer of Milakov & Gimelshein over the whole row with UNROLL
//           independent (max, sum) vector states, combined at the end; one exponential per element.
//   BLOCK > 0: pass 1 walks the row in column blocks of BLOCK elements; per block a max (UNROLL vector
//           accumulators), then sum exp(x - block max) (UNROLL accumulators) while the block is in L1, merged into
//           the row's running (M, D) with one scalar rescale per block instead of one per element.
//   pass 2: y = exp(x - M) * (1 / D), UNROLL vectors per iteration.
//
// The vector exponential, the -inf handling (masked logits contribute exactly 0; an all -inf row gives NaN, as the
// oracle does) and the padded tail are the reference's.
//
// kwb-tuner: task=softmax @PARAMS@
#include <kwb/kernel.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The knobs. UNROLL: independent vector states / accumulators (1, 2, 4, 8); BLOCK: column block, 0 = whole row.
constexpr int k_unroll = @UNROLL@;
constexpr int64_t k_block = @BLOCK@;
static_assert(k_unroll == 1 || k_unroll == 2 || k_unroll == 4 || k_unroll == 8, "UNROLL is 1, 2, 4 or 8");
static_assert(k_block >= 0, "BLOCK is 0 (whole row) or a positive column count");

#if defined(__AVX512F__)
constexpr int k_lanes = 16;
#elif defined(__AVX__)
constexpr int k_lanes = 8;
#else
constexpr int k_lanes = 4;
#endif
using Vec = float __attribute__((vector_size(k_lanes * sizeof(float))));
using IVec = int32_t __attribute__((vector_size(k_lanes * sizeof(int32_t))));

constexpr float k_neg_inf = -std::numeric_limits<float>::infinity();

Vec splat(float v) { return v - Vec{}; }

Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The last `count` (< k_lanes) elements of a row, the missing lanes set to -inf.
Vec load_tail(const float* p, int64_t count) {
  Vec v = splat(k_neg_inf);
  std::memcpy(&v, p, static_cast<size_t>(count) * sizeof(float));
  return v;
}

// exp(t) for t <= 0 (and t = -inf or NaN), lane by lane: Cody-Waite reduction and Cephes' expf polynomial.
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

// One step of the online normalizer for every lane (the reference's, -inf guard included).
void online_step(Vec& m, Vec& d, Vec v) {
  const Vec delta = v - m;
  const Vec magnitude = delta < splat(0.0f) ? -delta : delta;
  const Vec e = exp_nonpositive(v == splat(k_neg_inf) ? splat(k_neg_inf) : -magnitude);
  const auto raises = v > m;
  d = raises ? d * e + splat(1.0f) : d + e;
  m = raises ? v : m;
}

// Lane-wise max that keeps a NaN once it has seen one, so a NaN input spreads to its row as in the oracle.
Vec max_nan(Vec v, Vec acc) {
  const auto take = (v > acc) | (v != v);
  return take ? v : acc;
}

float max_lanes(Vec v) {
  float m = v[0];
  for (int lane = 1; lane < k_lanes; ++lane) m = (v[lane] > m || v[lane] != v[lane]) ? v[lane] : m;
  return m;
}

float add_lanes(Vec v) {
  float s = 0.0f;
  for (int lane = 0; lane < k_lanes; ++lane) s += v[lane];
  return s;
}

struct RowStats {
  float max;
  float sum;  // sum exp(x - max)
};

// BLOCK = 0: the online pass over the whole row with k_unroll independent states.
RowStats stats_online(const float* x, int64_t n) {
  constexpr int64_t k_step = static_cast<int64_t>(k_unroll) * k_lanes;
  Vec m[k_unroll];
  Vec d[k_unroll];
#pragma GCC unroll 8
  for (int u = 0; u < k_unroll; ++u) {
    m[u] = splat(k_neg_inf);
    d[u] = splat(0.0f);
  }
  int64_t i = 0;
  for (; i + k_step <= n; i += k_step) {
#pragma GCC unroll 8
    for (int u = 0; u < k_unroll; ++u) online_step(m[u], d[u], load(x + i + u * k_lanes));
  }
  for (; i + k_lanes <= n; i += k_lanes) online_step(m[0], d[0], load(x + i));
  if (i < n) online_step(m[0], d[0], load_tail(x + i, n - i));

  float row_max = k_neg_inf;
  for (int u = 0; u < k_unroll; ++u) {
    const float mu = max_lanes(m[u]);
    row_max = mu > row_max ? mu : row_max;
  }
  float sum = 0.0f;
  for (int u = 0; u < k_unroll; ++u) {
    const Vec scale = exp_nonpositive(m[u] == splat(k_neg_inf) ? splat(k_neg_inf) : m[u] - splat(row_max));
    sum += add_lanes(d[u] * scale);
  }
  return {row_max, sum};
}

// The max of x[0, n), k_unroll accumulators; the tail is padded with -inf.
float block_max(const float* x, int64_t n) {
  constexpr int64_t k_step = static_cast<int64_t>(k_unroll) * k_lanes;
  Vec acc[k_unroll];
#pragma GCC unroll 8
  for (int u = 0; u < k_unroll; ++u) acc[u] = splat(k_neg_inf);
  int64_t i = 0;
  for (; i + k_step <= n; i += k_step) {
#pragma GCC unroll 8
    for (int u = 0; u < k_unroll; ++u) {
      const Vec v = load(x + i + u * k_lanes);
      acc[u] = max_nan(v, acc[u]);
    }
  }
  for (; i + k_lanes <= n; i += k_lanes) {
    const Vec v = load(x + i);
    acc[0] = max_nan(v, acc[0]);
  }
  if (i < n) {
    const Vec v = load_tail(x + i, n - i);
    acc[0] = max_nan(v, acc[0]);
  }
  float m = k_neg_inf;
  for (int u = 0; u < k_unroll; ++u) {
    const float mu = max_lanes(acc[u]);
    m = (mu > m || mu != mu) ? mu : m;
  }
  return m;
}

// sum exp(x[0, n) - max), max finite; k_unroll accumulators; the -inf padded tail contributes 0.
float block_exp_sum(const float* x, int64_t n, float max) {
  constexpr int64_t k_step = static_cast<int64_t>(k_unroll) * k_lanes;
  const Vec mv = splat(max);
  Vec acc[k_unroll] = {};
  int64_t i = 0;
  for (; i + k_step <= n; i += k_step) {
#pragma GCC unroll 8
    for (int u = 0; u < k_unroll; ++u) acc[u] += exp_nonpositive(load(x + i + u * k_lanes) - mv);
  }
  for (; i + k_lanes <= n; i += k_lanes) acc[0] += exp_nonpositive(load(x + i) - mv);
  if (i < n) acc[0] += exp_nonpositive(load_tail(x + i, n - i) - mv);
  float sum = 0.0f;
  for (int u = 0; u < k_unroll; ++u) sum += add_lanes(acc[u]);
  return sum;
}

// BLOCK > 0: per block a max and a sum of exponentials, merged into the running (M, D).
RowStats stats_blocked(const float* x, int64_t n) {
  RowStats s{k_neg_inf, 0.0f};
  for (int64_t b = 0; b < n; b += k_block) {
    const int64_t len = n - b < k_block ? n - b : k_block;
    const float bmax = block_max(x + b, len);
    if (bmax == k_neg_inf) continue;  // an all -inf block contributes exactly 0
    const float bsum = block_exp_sum(x + b, len, bmax);
    if (bmax > s.max) {
      s.sum = s.sum * std::exp(s.max - bmax) + bsum;  // s.max = -inf: exp(-inf) = 0 and s.sum = 0
      s.max = bmax;
    } else {
      s.sum += bsum * std::exp(bmax - s.max);
    }
  }
  return s;
}

struct Softmax {
  const float* x;
  float* y;
  int64_t rows;
  int64_t cols;
};

bool is_compact_host_f32(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim) return false;
  if (t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1) return false;
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

std::optional<Softmax> unpack(const kwb_call& call) {
  if (call.num_inputs != 1 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& y = call.outputs[0];
  if (!is_compact_host_f32(x, 2) || !is_compact_host_f32(y, 2)) return std::nullopt;
  if (y.shape[0] != x.shape[0] || y.shape[1] != x.shape[1]) return std::nullopt;
  return Softmax{elements<const float>(x), elements<float>(y), x.shape[0], x.shape[1]};
}

void softmax_row(const float* x, float* y, int64_t n) {
  RowStats s;
  if constexpr (k_block == 0) {
    s = stats_online(x, n);
  } else {
    s = stats_blocked(x, n);
  }
  if (s.max == k_neg_inf) s.sum = std::numeric_limits<float>::quiet_NaN();  // every element -inf: 0/0

  const Vec inv_sum = splat(1.0f / s.sum);
  const Vec max_vec = splat(s.max);
  constexpr int64_t k_step = static_cast<int64_t>(k_unroll) * k_lanes;
  int64_t i = 0;
  for (; i + k_step <= n; i += k_step) {
#pragma GCC unroll 8
    for (int u = 0; u < k_unroll; ++u) {
      const Vec out = exp_nonpositive(load(x + i + u * k_lanes) - max_vec) * inv_sum;
      std::memcpy(y + i + u * k_lanes, &out, sizeof out);
    }
  }
  for (; i + k_lanes <= n; i += k_lanes) {
    const Vec out = exp_nonpositive(load(x + i) - max_vec) * inv_sum;
    std::memcpy(y + i, &out, sizeof out);
  }
  if (i < n) {
    const Vec out = exp_nonpositive(load_tail(x + i, n - i) - max_vec) * inv_sum;
    std::memcpy(y + i, &out, static_cast<size_t>(n - i) * sizeof(float));
  }
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  for (int64_t r = 0; r < p->rows; ++r) softmax_row(p->x + r * p->cols, p->y + r * p->cols, p->cols);
  return 0;
}
