// Error control for the softmax task. Must be rejected by the check with: numeric_mismatch.
//
// Defect: the max and the sum are taken over axis 0 (down each column, across the rows) instead of the last
// axis (along each row), as `softmax(x, dim=0)` would. Every case fails: with one row (`decode`) every output is
// exp(0) / 1 = 1; with several, the columns sum to one instead of the rows.
#include <kwb/kernel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <optional>
#include <vector>

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

// Column-wise: m[c] = max_r x[r, c], s[c] = sum_r exp(x[r, c] - m[c]), y[r, c] = exp(x[r, c] - m[c]) / s[c].
void softmax_columns(const Softmax& p, float* m, float* s) {
  std::fill_n(m, p.cols, -std::numeric_limits<float>::infinity());
  std::fill_n(s, p.cols, 0.0f);
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t c = 0; c < p.cols; ++c) m[c] = std::max(m[c], p.x[r * p.cols + c]);
  }
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t c = 0; c < p.cols; ++c) s[c] += std::exp(p.x[r * p.cols + c] - m[c]);
  }
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t c = 0; c < p.cols; ++c) p.y[r * p.cols + c] = std::exp(p.x[r * p.cols + c] - m[c]) / s[c];
  }
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty), 2 when the column statistics
// cannot be allocated (an exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  try {
    std::vector<float> m(static_cast<size_t>(p->cols));
    std::vector<float> s(static_cast<size_t>(p->cols));
    softmax_columns(*p, m.data(), s.data());
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
