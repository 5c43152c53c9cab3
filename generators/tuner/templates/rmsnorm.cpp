// RMSNorm, written by kwb's "tuner" generator (generators/tuner) from its template for the task: the fused
// two-pass reference (tasks/rmsnorm/cpu/fused.cpp) with its two tuning knobs fixed below.
//
//   pass 1: s = sum(x[r, :]^2) with UNROLL independent vector accumulators, over column blocks of BLOCK elements
//           (BLOCK = 0: the whole row as one block); the block sums are added in order
//   pass 2: y[r, :] = x[r, :] * (1 / sqrt(s / cols + eps)) * weight
//
// kwb-tuner: task=rmsnorm @PARAMS@
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The knobs. UNROLL: independent accumulators (1, 2, 4, 8); BLOCK: column block of the reduction, 0 = whole row.
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

// sum(x[0, n)^2): k_unroll vector accumulators, combined pairwise, then the scalar tail.
float sum_of_squares_span(const float* x, int64_t n) {
  constexpr int64_t k_step = static_cast<int64_t>(k_unroll) * k_lanes;
  Vec acc[k_unroll] = {};
  int64_t i = 0;
  for (; i + k_step <= n; i += k_step) {
#pragma GCC unroll 8
    for (int u = 0; u < k_unroll; ++u) {
      const Vec a = load(x + i + u * k_lanes);
      acc[u] += a * a;
    }
  }
  for (; i + k_lanes <= n; i += k_lanes) {
    const Vec a = load(x + i);
    acc[0] += a * a;
  }
#pragma GCC unroll 8
  for (int width = k_unroll / 2; width >= 1; width /= 2) {
#pragma GCC unroll 8
    for (int u = 0; u < width; ++u) acc[u] += acc[u + width];
  }
  float sum = 0.0f;
  for (int lane = 0; lane < k_lanes; ++lane) sum += acc[0][lane];
  for (; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

float sum_of_squares(const float* x, int64_t n) {
  if constexpr (k_block == 0) {
    return sum_of_squares_span(x, n);
  } else {
    float sum = 0.0f;
    for (int64_t b = 0; b < n; b += k_block) sum += sum_of_squares_span(x + b, n - b < k_block ? n - b : k_block);
    return sum;
  }
}

void scale_row(const float* __restrict x, const float* __restrict weight, float inv_rms, float* __restrict y,
               int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv_rms * weight[i];
}

struct Rmsnorm {
  const float* x;
  const float* weight;
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

std::optional<Rmsnorm> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& weight = call.inputs[1];
  const DLTensor& y = call.outputs[0];
  if (!is_compact_host_f32(x, 2) || !is_compact_host_f32(weight, 1) || !is_compact_host_f32(y, 2)) {
    return std::nullopt;
  }
  if (weight.shape[0] != x.shape[1] || y.shape[0] != x.shape[0] || y.shape[1] != x.shape[1]) return std::nullopt;
  return Rmsnorm{elements<const float>(x), elements<const float>(weight), elements<float>(y), x.shape[0],
                 x.shape[1], static_cast<float>(kwb_scalar_or(&call, "eps", 1e-6))};
}

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  const float cols = static_cast<float>(p->cols);
  for (int64_t r = 0; r < p->rows; ++r) {
    const float* x = p->x + r * p->cols;
    const float inv_rms = 1.0f / std::sqrt(sum_of_squares(x, p->cols) / cols + p->eps);
    scale_row(x, p->weight, inv_rms, p->y + r * p->cols, p->cols);
  }
  return 0;
}
