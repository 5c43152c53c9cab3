// Error control for the softmax task. Must be rejected by the check with: nan_mismatch.
//
// Defect: the row's maximum is not subtracted, y = exp(x) / sum(exp(x)). Mathematically the same, and right on
// well-scaled logits, but float32's exp overflows above 88.7 and underflows below -103.9: on `large_logits`,
// `wide_spread` and `equal_values` (x = 100) the largest terms are inf and y = inf / inf = NaN; on
// `negative_logits` every term is 0 and y = 0 / 0 = NaN, where the oracle has finite outputs: nan_mismatch.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The call's tensors, checked against the task signature: x [rows, cols] in, y [rows, cols] out, both f32,
// compact row-major, host memory. Anything else is refused rather than guessed at.
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
  float sum = 0.0f;
  for (int64_t c = 0; c < n; ++c) sum += std::exp(x[c]);
  for (int64_t c = 0; c < n; ++c) y[c] = std::exp(x[c]) / sum;
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  for (int64_t r = 0; r < p->rows; ++r) softmax_row(p->x + r * p->cols, p->y + r * p->cols, p->cols);
  return 0;
}
