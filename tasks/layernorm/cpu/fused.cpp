// LayerNorm, reference optimized cpu implementation: the two-pass algorithm, fused per row, with no temporary and no
// allocation.
//
//   pass 1: s = sum(x[r, :])                                  mean = s / cols
//   pass 2: q = sum((x[r, :] - mean)^2)                       var = q / cols,  rstd = 1 / sqrt(var + eps)
//   pass 3: y[r, :] = (x[r, :] - mean) * rstd * weight + bias
//
// Passes 1 and 2 are vectorized with independent accumulators, pass 3 is a plain loop the compiler vectorizes. A row
// (at most 4544 floats = 18 KiB here) is read three times, but the second and third reads hit L1, so the cost is
// one sweep from memory instead of the baseline's seven sweeps and three rows*cols temporaries.
//
// Why two passes and not one: the one-pass form var = E[x^2] - E[x]^2 subtracts two numbers of size mean^2 to get
// one of size spread^2, and in float32 loses log2(mean^2 / var) of its 24 bits (all of them at mean/spread = 4096:
// the variance can even come out negative). The centred sum in pass 2 has no such subtraction: its terms are
// non-negative and its error is relative to the variance itself. Welford's update would give the same accuracy in
// one read, but with a division per element; with the row in L1 the second read is cheaper.
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

// A scalar operand of a vector operation is broadcast to every lane; subtracting +0 leaves every value as it is.
Vec splat(float v) { return v - Vec{}; }

float add_lanes(Vec v) {
  float sum = 0.0f;
  for (int lane = 0; lane < k_lanes; ++lane) sum += v[lane];
  return sum;
}

// Without -ffast-math the compiler must add the terms in source order, so one accumulator would make every add wait
// for the previous one. Four independent vector accumulators keep the adders busy, and each lane sums only
// n / (4 * k_lanes) terms, so the rounding error is smaller than that of the sequential sum the tolerance is derived
// for. Rows need not be a multiple of the vector width (4097, 5): the last few elements are added one at a time.
float row_sum(const float* x, int64_t n) {
  constexpr int64_t k_block = 4 * k_lanes;
  Vec acc0 = {};
  Vec acc1 = {};
  Vec acc2 = {};
  Vec acc3 = {};
  int64_t i = 0;
  for (; i + k_block <= n; i += k_block) {
    acc0 += load(x + i);
    acc1 += load(x + i + k_lanes);
    acc2 += load(x + i + 2 * k_lanes);
    acc3 += load(x + i + 3 * k_lanes);
  }
  for (; i + k_lanes <= n; i += k_lanes) acc0 += load(x + i);
  float sum = add_lanes((acc0 + acc1) + (acc2 + acc3));
  for (; i < n; ++i) sum += x[i];
  return sum;
}

// sum((x - mean)^2), organised like row_sum.
float centered_sum_of_squares(const float* x, float mean, int64_t n) {
  constexpr int64_t k_block = 4 * k_lanes;
  const Vec m = splat(mean);
  Vec acc0 = {};
  Vec acc1 = {};
  Vec acc2 = {};
  Vec acc3 = {};
  int64_t i = 0;
  for (; i + k_block <= n; i += k_block) {
    const Vec d0 = load(x + i) - m;
    const Vec d1 = load(x + i + k_lanes) - m;
    const Vec d2 = load(x + i + 2 * k_lanes) - m;
    const Vec d3 = load(x + i + 3 * k_lanes) - m;
    acc0 += d0 * d0;
    acc1 += d1 * d1;
    acc2 += d2 * d2;
    acc3 += d3 * d3;
  }
  for (; i + k_lanes <= n; i += k_lanes) {
    const Vec d = load(x + i) - m;
    acc0 += d * d;
  }
  float sum = add_lanes((acc0 + acc1) + (acc2 + acc3));
  for (; i < n; ++i) sum += (x[i] - mean) * (x[i] - mean);
  return sum;
}

// No reduction here, so the compiler vectorizes this loop by itself; __restrict tells it y overlaps no input.
void normalize_row(const float* __restrict x, float mean, float rstd, const float* __restrict weight,
                   const float* __restrict bias, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * weight[i] + bias[i];
}

// The call's tensors, checked against the task signature: x [rows, cols], weight [cols] and bias [cols] in,
// y [rows, cols] out, all f32, compact row-major, host memory. Anything else is refused rather than guessed at.
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
    float* y = p->y + r * p->cols;
    const float mean = row_sum(x, p->cols) / cols;
    const float var = centered_sum_of_squares(x, mean, p->cols) / cols;
    const float rstd = 1.0f / std::sqrt(var + p->eps);
    normalize_row(x, mean, rstd, p->weight, p->bias, y, p->cols);
  }
  return 0;
}
