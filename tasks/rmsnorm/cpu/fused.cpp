// RMSNorm, reference optimized cpu implementation: two passes over each row and nothing else.
//
//   pass 1: s = sum(x[r, :]^2), vectorized with independent accumulators
//   pass 2: y[r, :] = x[r, :] * (1 / sqrt(s / cols + eps)) * weight
//
// Compared with the six-kernel baseline it reads x twice instead of three times, never writes a temporary and
// never allocates. The row is re-read by pass 2 while it is still in L1/L2, so on rows that fit in cache the
// second read is nearly free.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The widest vector the target has. -march=native picks it; the code below is the same for every width, and
// GCC/Clang lower the vector type to plain scalar code on a target with no SIMD at all.
#if defined(__AVX512F__)
constexpr int k_lanes = 16;
#elif defined(__AVX__)
constexpr int k_lanes = 8;
#else
constexpr int k_lanes = 4;
#endif
using Vec = float __attribute__((vector_size(k_lanes * sizeof(float))));

// Rows carry no alignment promise, so every vector load is an unaligned one; memcpy is how to say that without
// undefined behaviour, and it compiles to a single load instruction.
Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Without -ffast-math the compiler must add the terms in source order, so one accumulator would make every add
// wait for the previous one (3-4 cycles of latency while two adders sit idle). Four independent vector
// accumulators keep the adders busy; as a bonus each lane sums only n / (4 * k_lanes) terms, so the rounding
// error is smaller than that of a sequential sum.
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
  // Whole vectors left over after the last full block (up to three of them).
  for (; i + k_lanes <= n; i += k_lanes) {
    const Vec a = load(x + i);
    acc0 += a * a;
  }
  const Vec acc = (acc0 + acc1) + (acc2 + acc3);
  float sum = 0.0f;
  for (int lane = 0; lane < k_lanes; ++lane) sum += acc[lane];
  // Row lengths need not be a multiple of the vector width (4097, 7): the last few elements one at a time.
  for (; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

// No reduction here, so the compiler vectorizes this loop by itself; __restrict tells it y overlaps neither input.
void scale_row(const float* __restrict x, const float* __restrict weight, float inv_rms, float* __restrict y,
               int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv_rms * weight[i];
}

// The call's tensors, checked against the task signature: x [rows, cols] and weight [cols] in, y [rows, cols] out,
// all f32, compact row-major, host memory. Anything else is refused rather than guessed at.
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
