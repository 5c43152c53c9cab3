// LayerNorm, baseline cpu implementation: the textbook composition of seven element-wise and reduction kernels, the
// way an eager framework runs
// `m = x.mean(-1, keepdim=True); t = x - m; v = (t * t).mean(-1, keepdim=True); y = t * (v + eps).rsqrt() * w + b`.
//
//   1. pass_row_mean   m = mean(x, last axis)       (new rows temporary, plain sequential float sum)
//   2. pass_center     t = x - m, m broadcast        (new rows*cols temporary)
//   3. pass_square     sq = t * t                    (new rows*cols temporary)
//   4. pass_row_var    v = mean(sq, last axis)       (new rows temporary, plain sequential float sum)
//   5. pass_rstd       r = 1 / sqrt(v + eps)         (new rows temporary)
//   6. pass_normalize  nrm = t * r, r broadcast      (new rows*cols temporary)
//   7. pass_affine     y = nrm * weight + bias       (into the output)
//
// Deliberately unfused: each pass is its own non-inlined function with its own full sweep over memory, and every
// temporary is allocated on each call, so a profiler sees seven "kernels", three extra rows*cols round trips
// through memory and the allocations. The two row sums add one float at a time in order: without -ffast-math the
// compiler may not reorder them, so they do not vectorize either. It is the "before" that the fused reference is
// measured against, and the ordering the task's tolerance is derived for (the two-pass form: the variance is the
// mean of squared deviations, never E[x^2] - E[x]^2).
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// noipa on the two row reductions: their code is identical, and GCC would otherwise fold them into one function
// (identical code folding), which a profile then reports as a single pass.
__attribute__((noinline, noipa)) void pass_row_mean(const float* x, float* m, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += x[r * cols + c];
    m[r] = sum / static_cast<float>(cols);
  }
}

__attribute__((noinline)) void pass_center(const float* x, const float* m, float* t, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[r * cols + c] = x[r * cols + c] - m[r];
  }
}

__attribute__((noinline)) void pass_square(const float* t, float* sq, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sq[i] = t[i] * t[i];
}

__attribute__((noinline, noipa)) void pass_row_var(const float* sq, float* v, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += sq[r * cols + c];
    v[r] = sum / static_cast<float>(cols);
  }
}

__attribute__((noinline)) void pass_rstd(const float* v, float eps, float* rstd, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) rstd[r] = 1.0f / std::sqrt(v[r] + eps);
}

__attribute__((noinline)) void pass_normalize(const float* t, const float* rstd, float* nrm, int64_t rows,
                                              int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) nrm[r * cols + c] = t[r * cols + c] * rstd[r];
  }
}

__attribute__((noinline)) void pass_affine(const float* nrm, const float* weight, const float* bias, float* y,
                                           int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = nrm[r * cols + c] * weight[c] + bias[c];
  }
}

// Uninitialized, like an eager framework's empty(): every element is written by the pass that produces it.
std::unique_ptr<float[]> temporary(int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
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
  return Layernorm{elements<const float>(x), elements<const float>(weight), elements<const float>(bias),
                   elements<float>(y),       x.shape[0],                    x.shape[1],
                   static_cast<float>(kwb_scalar_or(&call, "eps", 1e-5))};
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty), 2 when a temporary cannot be
// allocated (an exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Layernorm> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  const int64_t n = p->rows * p->cols;
  try {
    const std::unique_ptr<float[]> mean = temporary(p->rows);
    pass_row_mean(p->x, mean.get(), p->rows, p->cols);

    const std::unique_ptr<float[]> centered = temporary(n);
    pass_center(p->x, mean.get(), centered.get(), p->rows, p->cols);

    const std::unique_ptr<float[]> squares = temporary(n);
    pass_square(centered.get(), squares.get(), n);

    const std::unique_ptr<float[]> var = temporary(p->rows);
    pass_row_var(squares.get(), var.get(), p->rows, p->cols);

    const std::unique_ptr<float[]> rstd = temporary(p->rows);
    pass_rstd(var.get(), p->eps, rstd.get(), p->rows);

    const std::unique_ptr<float[]> normalized = temporary(n);
    pass_normalize(centered.get(), rstd.get(), normalized.get(), p->rows, p->cols);

    pass_affine(normalized.get(), p->weight, p->bias, p->y, p->rows, p->cols);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
