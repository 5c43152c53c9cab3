// Test candidate: an honest RMSNorm that is slower than tasks/rmsnorm/cpu/fused.cpp by a small, known amount.
//
// It is fused.cpp plus one piece of extra work per call: before the row loop, a serial (single-accumulator) sum of
// squares over the first `extra_work * k_extra_fraction` of all of x. The result is folded into row 0's sum as
// `extra * 0.0f`, which adds exactly +0 for the finite, non-negative extra, so the output is bit-identical to
// fused.cpp; without -ffast-math the compiler may not assume that (extra could be Inf or NaN), so it cannot drop
// the work.
//
// kwb's tests use it to check that a small slowdown is detected, not reported as noise. Measured against fused.cpp
// on an AMD EPYC (Zen 5), GCC 12 and Clang 14, interleaved calls, median of 6000:
//   extra_work = 1 (default)  prefill [64, 4096] +1.9%   decode [1, 4096] +0.4%   dram [8192, 4096] +1% (noisy)
//   extra_work = 5            prefill +9%
//   extra_work = 0            same work as fused.cpp (+0.1%, within noise)
// The cost is linear in extra_work up to 1 / k_extra_fraction (all of x). The rmsnorm task declares no
// `extra_work` scalar, so there it is always 1; a test task can declare it to choose the effect size.
#include <kwb/kernel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// Fraction of x that the extra serial sum covers at extra_work = 1: about 470 fused multiply-adds at ~4 cycles of
// latency each on [64, 4096], ~2% of fused.cpp's time there.
constexpr double k_extra_fraction = 0.0018;

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

// Same as fused.cpp: four independent vector accumulators, scalar tail.
float sum_of_squares(const float* x, int64_t n) {
  constexpr int64_t k_block = 4 * k_lanes;
  Vec acc0 = {};
  Vec acc1 = {};
  Vec acc2 = {};
  Vec acc3 = {};
  int64_t i = 0;
  for (; i + k_block <= n; i += k_block) {
    const Vec a0 = load(x + i);
    const Vec a1 = load(x + i + k_lanes);
    const Vec a2 = load(x + i + 2 * k_lanes);
    const Vec a3 = load(x + i + 3 * k_lanes);
    acc0 += a0 * a0;
    acc1 += a1 * a1;
    acc2 += a2 * a2;
    acc3 += a3 * a3;
  }
  for (; i + k_lanes <= n; i += k_lanes) {
    const Vec a = load(x + i);
    acc0 += a * a;
  }
  const Vec acc = (acc0 + acc1) + (acc2 + acc3);
  float sum = 0.0f;
  for (int lane = 0; lane < k_lanes; ++lane) sum += acc[lane];
  for (; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

// The extra work: one accumulator, so every step waits for the previous one. std::fma makes the step one
// fused multiply-add for every compiler (GCC and Clang contract `sum += x * x` differently, and an add has half
// an FMA's latency on some cores). Latency-bound work costs the same whether the data come from L1 or L2, and
// out-of-order execution can overlap only a few hundred instructions of it with the row loop, so its cost adds
// up predictably.
float serial_sum_of_squares(const float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum = std::fma(x[i], x[i], sum);
  return sum;
}

// Same as fused.cpp.
void scale_row(const float* __restrict x, const float* __restrict weight, float inv_rms, float* __restrict y,
               int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv_rms * weight[i];
}

// The call's tensors, checked against the task signature as in fused.cpp, and the extra_work knob.
struct Rmsnorm {
  const float* x;
  const float* weight;
  float* y;
  int64_t rows;
  int64_t cols;
  float eps;
  double extra_work;
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
                 x.shape[1], static_cast<float>(kwb_scalar_or(&call, "eps", 1e-6)),
                 kwb_scalar_or(&call, "extra_work", 1.0)};
}

}  // namespace

// Returns 1 when the call does not match the task signature or extra_work is negative or not a number.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p || !(p->extra_work >= 0.0)) return 1;
  const int64_t n = p->rows * p->cols;
  const double fraction = std::min(p->extra_work * k_extra_fraction, 1.0);
  const float extra = serial_sum_of_squares(p->x, static_cast<int64_t>(fraction * static_cast<double>(n)));
  const float cols = static_cast<float>(p->cols);
  for (int64_t r = 0; r < p->rows; ++r) {
    const float* x = p->x + r * p->cols;
    // Row 0 waits for the extra sum, so the extra latency cannot hide behind this row's loads and stores.
    const float sum = r == 0 ? sum_of_squares(x, p->cols) + extra * 0.0f : sum_of_squares(x, p->cols);
    const float inv_rms = 1.0f / std::sqrt(sum / cols + p->eps);
    scale_row(x, p->weight, inv_rms, p->y + r * p->cols, p->cols);
  }
  return 0;
}
