// Test candidate: computes RMSNorm honestly, then reads the 16 floats (64 bytes) just past the end of its input x, as
// a kernel whose last vector load or last row runs over does. Every element of y is correct, so only a fence after
// the input can tell: check places each input flush with the end of a page (within 64 bytes) and the worker makes
// the pages after it PROT_NONE, so the read faults and the call fails with out_of_bounds_read, naming x.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

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

// Plain two-pass RMSNorm, one row at a time.
void rmsnorm(const Rmsnorm& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* x = p.x + r * p.cols;
    float* y = p.y + r * p.cols;
    float sum = 0.0f;
    for (int64_t c = 0; c < p.cols; ++c) sum += x[c] * x[c];
    const float inv_rms = 1.0f / std::sqrt(sum / static_cast<float>(p.cols) + p.eps);
    for (int64_t c = 0; c < p.cols; ++c) y[c] = x[c] * inv_rms * p.weight[c];
  }
}

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  rmsnorm(*p);
  volatile float sink = 0.0f;
  for (int64_t k = 0; k < 16; ++k) sink = sink + p->x[p->rows * p->cols + k];
  return 0;
}
