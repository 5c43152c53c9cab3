// Error control for the layernorm task. Must be rejected by the check with: stale_output.
//
// Defect: every call writes the honest result of the *previous* call and keeps the current call's result for the
// next one; only the first call of the process computes its own answer. Where the previous output was shorter, the
// rest is the current honest result. The output is therefore correct whenever the inputs did not change between
// calls (one call per process, or the same inputs every time), and wrong as soon as a call brings fresh inputs of
// the same shape. It stands for any candidate that replays outputs instead of computing them. The second call of a
// worker writes exactly what the first one wrote, which is what kwb's replay test looks for; later calls lag by one
// call and may show as plain numeric_mismatch.
#include <kwb/kernel.h>

#include <algorithm>
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

// Plain two-pass LayerNorm, one row at a time.
void layernorm(const Layernorm& p, float* out) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* x = p.x + r * p.cols;
    float* y = out + r * p.cols;
    float sum = 0.0f;
    for (int64_t c = 0; c < p.cols; ++c) sum += x[c];
    const float mean = sum / static_cast<float>(p.cols);
    float sq = 0.0f;
    for (int64_t c = 0; c < p.cols; ++c) sq += (x[c] - mean) * (x[c] - mean);
    const float rstd = 1.0f / std::sqrt(sq / static_cast<float>(p.cols) + p.eps);
    for (int64_t c = 0; c < p.cols; ++c) y[c] = (x[c] - mean) * rstd * p.weight[c] + p.bias[c];
  }
}

// The previous call's result; absent until the first call has finished.
std::optional<std::vector<float>> g_previous;

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty), 2 when the saved result cannot be
// allocated (an exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Layernorm> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  try {
    std::vector<float> current(static_cast<size_t>(p->rows * p->cols));
    layernorm(*p, current.data());
    const size_t replayed = g_previous ? std::min(g_previous->size(), current.size()) : 0;
    if (replayed > 0) std::copy_n(g_previous->data(), replayed, p->y);
    std::copy_n(current.data() + replayed, current.size() - replayed, p->y + replayed);
    g_previous = std::move(current);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
