// Error control for the softmax task. Must be rejected by the check with: numeric_mismatch.
//
// Defect: an off-by-one in the normalizer's loop bound: the sum runs over the row's first cols - 1 terms and
// leaves out the last column (the online form of the reference, with `c < n - 1` where `c < n` was meant). Every
// output is too large by the missing term's share of the row. On long rows that share is ~1/cols and may hide
// inside rtol; on `many_short_rows` (cols = 5) it is ~20% and cannot.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <limits>
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

// The online normalizer (Milakov & Gimelshein 2018) over x[0, count): running max m, running sum d of exp(x - m).
void online_normalizer(const float* x, int64_t count, float& m, float& d) {
  m = -std::numeric_limits<float>::infinity();
  d = 0.0f;
  for (int64_t c = 0; c < count; ++c) {
    if (x[c] > m) {
      d = d * std::exp(m - x[c]) + 1.0f;
      m = x[c];
    } else {
      d += std::exp(x[c] - m);
    }
  }
}

void softmax_row(const float* x, float* y, int64_t n) {
  float m = 0.0f;
  float d = 0.0f;
  online_normalizer(x, n - 1, m, d);  // the bug: the last column is left out
  if (x[n - 1] > m) m = x[n - 1];     // (the max still sees it, so nothing overflows)
  for (int64_t c = 0; c < n; ++c) y[c] = std::exp(x[c] - m) / d;
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  for (int64_t r = 0; r < p->rows; ++r) softmax_row(p->x + r * p->cols, p->y + r * p->cols, p->cols);
  return 0;
}
