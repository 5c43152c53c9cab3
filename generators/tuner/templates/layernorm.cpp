// LayerNorm, written by kwb's "tuner" generator (generators/tuner) from its template for the task: the fused
// two-pass reference (tasks/layernorm/cpu/fused.cpp) with its two tuning knobs fixed below.
//
//   BLOCK = 0 (whole row): pass 1 mean = sum(x) / cols, pass 2 var = sum((x - mean)^2) / cols, each with UNROLL
//           independent vector accumulators.
//   BLOCK > 0: the row in column blocks of BLOCK elements; each block's mean and centred sum of squares M2 by the
//           same two passes while the block is in L1, merged into the row's (n, mean, M2) with the pairwise update
//           of Chan, Golub & LeVeque (delta = mean_b - mean_a; mean += delta * n_b / n; M2 += M2_b + delta^2 *
//           n_a * n_b / n). No one-pass E[x^2] - E[x]^2 anywhere: every sum of squares is centred.
//   pass 3: y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps).
//
// kwb-tuner: task=layernorm @PARAMS@
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The knobs. UNROLL: independent accumulators (1, 2, 4, 8); BLOCK: column block, 0 = whole row.
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

Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

Vec splat(float v) { return v - Vec{}; }

// acc[0] + ... + acc[k_unroll - 1], pairwise, then across the lanes.
float reduce(Vec (&acc)[k_unroll]) {
#pragma GCC unroll 8
  for (int width = k_unroll / 2; width >= 1; width /= 2) {
#pragma GCC unroll 8
    for (int u = 0; u < width; ++u) acc[u] += acc[u + width];
  }
  float sum = 0.0f;
  for (int lane = 0; lane < k_lanes; ++lane) sum += acc[0][lane];
  return sum;
}

float span_sum(const float* x, int64_t n) {
  constexpr int64_t k_step = static_cast<int64_t>(k_unroll) * k_lanes;
  Vec acc[k_unroll] = {};
  int64_t i = 0;
  for (; i + k_step <= n; i += k_step) {
#pragma GCC unroll 8
    for (int u = 0; u < k_unroll; ++u) acc[u] += load(x + i + u * k_lanes);
  }
  for (; i + k_lanes <= n; i += k_lanes) acc[0] += load(x + i);
  float sum = reduce(acc);
  for (; i < n; ++i) sum += x[i];
  return sum;
}

float span_centered_sum_of_squares(const float* x, float mean, int64_t n) {
  constexpr int64_t k_step = static_cast<int64_t>(k_unroll) * k_lanes;
  const Vec m = splat(mean);
  Vec acc[k_unroll] = {};
  int64_t i = 0;
  for (; i + k_step <= n; i += k_step) {
#pragma GCC unroll 8
    for (int u = 0; u < k_unroll; ++u) {
      const Vec d = load(x + i + u * k_lanes) - m;
      acc[u] += d * d;
    }
  }
  for (; i + k_lanes <= n; i += k_lanes) {
    const Vec d = load(x + i) - m;
    acc[0] += d * d;
  }
  float sum = reduce(acc);
  for (; i < n; ++i) sum += (x[i] - mean) * (x[i] - mean);
  return sum;
}

struct Moments {
  float mean;
  float m2;  // sum((x - mean)^2)
};

Moments row_moments(const float* x, int64_t n) {
  if constexpr (k_block == 0) {
    const float mean = span_sum(x, n) / static_cast<float>(n);
    return {mean, span_centered_sum_of_squares(x, mean, n)};
  } else {
    Moments row{0.0f, 0.0f};
    int64_t count = 0;
    for (int64_t b = 0; b < n; b += k_block) {
      const int64_t len = n - b < k_block ? n - b : k_block;
      const float bmean = span_sum(x + b, len) / static_cast<float>(len);
      const float bm2 = span_centered_sum_of_squares(x + b, bmean, len);
      if (count == 0) {
        row = {bmean, bm2};
      } else {
        const float total = static_cast<float>(count + len);
        const float delta = bmean - row.mean;
        row.mean += delta * (static_cast<float>(len) / total);
        row.m2 += bm2 + delta * delta * (static_cast<float>(count) * static_cast<float>(len) / total);
      }
      count += len;
    }
    return row;
  }
}

void normalize_row(const float* __restrict x, float mean, float rstd, const float* __restrict weight,
                   const float* __restrict bias, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * weight[i] + bias[i];
}

struct Layernorm {
  const float* x;
  const float* weight;
  const float* bias;
  float* y;
  int64_t rows;
  int64_t cols;
  float eps;
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

std::optional<Layernorm> unpack(const kwb_call& call) {
  if (call.num_inputs != 3 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& weight = call.inputs[1];
  const DLTensor& bias = call.inputs[2];
  const DLTensor& y = call.outputs[0];
  if (!is_compact_host_f32(x, 2) || !is_compact_host_f32(weight, 1) || !is_compact_host_f32(bias, 1) ||
      !is_compact_host_f32(y, 2)) {
    return std::nullopt;
  }
  if (weight.shape[0] != x.shape[1] || bias.shape[0] != x.shape[1] || y.shape[0] != x.shape[0] ||
      y.shape[1] != x.shape[1]) {
    return std::nullopt;
  }
  const float eps = static_cast<float>(kwb_scalar_or(&call, "eps", 1e-5));
  return Layernorm{elements<const float>(x), elements<const float>(weight), elements<const float>(bias),
                   elements<float>(y),       x.shape[0],                    x.shape[1],
                   eps};
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Layernorm> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  const float cols = static_cast<float>(p->cols);
  for (int64_t r = 0; r < p->rows; ++r) {
    const float* x = p->x + r * p->cols;
    const Moments m = row_moments(x, p->cols);
    const float rstd = 1.0f / std::sqrt(m.m2 / cols + p->eps);
    normalize_row(x, m.mean, rstd, p->weight, p->bias, p->y + r * p->cols, p->cols);
  }
  return 0;
}
