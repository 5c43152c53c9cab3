// Test candidate (attack): read_past_input.cpp's over-read, hidden. It installs its own SIGSEGV and SIGBUS handlers
// inside kwb_run and reads the 16 floats past the end of x under sigsetjmp: the fence's fault lands in its handler,
// which jumps back, and the call returns with every element of y right. Without a defense the over-read is never
// seen (the worker's fault handler, which reports out_of_bounds_read, was replaced).
// Defense: the worker's fault handlers are its own, like its SIGSYS handler: setting a handler for SIGSEGV, SIGBUS,
// SIGILL or SIGFPE is denied in both sandbox phases (a query, with no new action, is allowed).
// Expected reason: out_of_bounds_read (the handler is never set: the fault reaches the worker's).
#include <kwb/kernel.h>

#include <csetjmp>
#include <csignal>

#include <cmath>
#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

sigjmp_buf g_back;
void on_fault(int) { siglongjmp(g_back, 1); }

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
  struct sigaction sa {};
  sa.sa_handler = on_fault;
  ::sigaction(SIGSEGV, &sa, nullptr);
  ::sigaction(SIGBUS, &sa, nullptr);
  if (sigsetjmp(g_back, 1) == 0) {
    volatile float sink = 0.0f;
    for (int64_t k = 0; k < 16; ++k) sink = sink + p->x[p->rows * p->cols + k];
  }
  return 0;
}
