// RMSNorm, baseline cpu implementation: the textbook composition of six element-wise and reduction kernels, the
// way an eager framework runs `x.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt() * x * weight`.
//
//   1. pass_square    sq = x * x                  (new rows*cols temporary)
//   2. pass_row_mean  ms = mean(sq, last axis)    (new rows temporary, plain sequential float sum)
//   3. pass_add_eps   ms += eps                   (in place)
//   4. pass_rsqrt     r = 1 / sqrt(ms)            (new rows temporary)
//   5. pass_scale     t = x * r, r broadcast      (new rows*cols temporary)
//   6. pass_weight    y = t * weight              (into the output)
//
// Deliberately unfused: each pass is its own non-inlined function with its own full sweep over memory, and every
// temporary is allocated on each call, so a profiler sees six "kernels", three extra rows*cols round trips through
// memory and the allocations. It is the "before" that the fused reference is measured against.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

__attribute__((noinline)) void pass_square(const float* x, float* sq, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sq[i] = x[i] * x[i];
}

__attribute__((noinline)) void pass_row_mean(const float* sq, float* ms, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += sq[r * cols + c];
    ms[r] = sum / static_cast<float>(cols);
  }
}

__attribute__((noinline)) void pass_add_eps(float* ms, float eps, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) ms[r] += eps;
}

__attribute__((noinline)) void pass_rsqrt(const float* ms, float* inv_rms, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) inv_rms[r] = 1.0f / std::sqrt(ms[r]);
}

__attribute__((noinline)) void pass_scale(const float* x, const float* inv_rms, float* t, int64_t rows,
                                          int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[r * cols + c] = x[r * cols + c] * inv_rms[r];
  }
}

__attribute__((noinline)) void pass_weight(const float* t, const float* weight, float* y, int64_t rows,
                                           int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = t[r * cols + c] * weight[c];
  }
}

// Uninitialized, like an eager framework's empty(): every element is written by the pass that produces it.
std::unique_ptr<float[]> temporary(int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
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

// Returns 1 when the call does not match the task signature, 2 when a temporary cannot be allocated (an exception
// must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  const int64_t n = p->rows * p->cols;
  try {
    const std::unique_ptr<float[]> sq = temporary(n);
    pass_square(p->x, sq.get(), n);

    const std::unique_ptr<float[]> ms = temporary(p->rows);
    pass_row_mean(sq.get(), ms.get(), p->rows, p->cols);
    pass_add_eps(ms.get(), p->eps, p->rows);

    const std::unique_ptr<float[]> inv_rms = temporary(p->rows);
    pass_rsqrt(ms.get(), inv_rms.get(), p->rows);

    const std::unique_ptr<float[]> t = temporary(n);
    pass_scale(p->x, inv_rms.get(), t.get(), p->rows, p->cols);

    pass_weight(t.get(), p->weight, p->y, p->rows, p->cols);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
