// Error control for the layernorm task. Must be rejected by the check with: numeric_mismatch.
//
// Defect: the mean and the variance are taken over axis 0 (down each column, across the rows) instead of the last
// axis (along each row), as with a [cols, rows] tensor read as [rows, cols], or torch.mean(x, dim=0). Every case
// with more than one row fails by factors; with one row (`decode`) every column has variance 0 and y degenerates to
// bias.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <new>
#include <optional>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

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

// Two sweeps over the whole tensor for the per-column statistics (two-pass, so the statistics themselves are
// accurate), then the output.
void layernorm(const Layernorm& p) {
  std::vector<float> mean(static_cast<size_t>(p.cols), 0.0f);
  std::vector<float> rstd(static_cast<size_t>(p.cols), 0.0f);
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t c = 0; c < p.cols; ++c) mean[c] += p.x[r * p.cols + c];
  }
  for (float& m : mean) m /= static_cast<float>(p.rows);
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t c = 0; c < p.cols; ++c) {
      const float d = p.x[r * p.cols + c] - mean[c];
      rstd[c] += d * d;
    }
  }
  for (float& v : rstd) v = 1.0f / std::sqrt(v / static_cast<float>(p.rows) + p.eps);
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t c = 0; c < p.cols; ++c) {
      p.y[r * p.cols + c] = (p.x[r * p.cols + c] - mean[c]) * rstd[c] * p.weight[c] + p.bias[c];
    }
  }
}

}  // namespace

// Returns 1 when the call does not match the task signature, 2 when the column statistics cannot be allocated (an
// exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Layernorm> p = unpack(*call);
  if (!p || p->rows < 1) return 1;
  try {
    layernorm(*p);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
