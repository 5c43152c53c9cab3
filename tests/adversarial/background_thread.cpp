// Adversarial candidate. Class: work finishing after return (DeepReinforce; KernelBench THREAD_PATTERNS).
// Cheat: computes the first half of the rows, hands the second half to a detached thread and returns at once, so
// the timer stops while half of the work is still running.
// Defense: on a single-threaded task the sandbox forbids creating threads at all; where the task allows threads,
// the parent fingerprints the outputs when the call returns and again after validating them, and watches the
// worker's CPU time while it should be idle.
// Expected reason: sandbox_violation on tasks/rmsnorm (threads = 1); work_after_return on a task with threads > 1.
#include <kwb/kernel.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <thread>

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

// Plain two-pass RMSNorm of rows [r0, r1) into `out` (laid out like y).
void rmsnorm_rows(const Rmsnorm& p, float* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = p.x + r * p.cols;
    float* y = out + r * p.cols;
    float sum = 0.0f;
    for (int64_t c = 0; c < p.cols; ++c) sum += x[c] * x[c];
    const float inv_rms = 1.0f / std::sqrt(sum / static_cast<float>(p.cols) + p.eps);
    for (int64_t c = 0; c < p.cols; ++c) y[c] = x[c] * inv_rms * p.weight[c];
  }
}

void rmsnorm(const Rmsnorm& p) { rmsnorm_rows(p, p.y, 0, p.rows); }

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  const int64_t half = p->rows / 2;
  rmsnorm_rows(*p, p->y, 0, half);
  const Rmsnorm copy = *p;
  std::thread([copy, half] {
    // A head start for the return: the second half is written 10 ms after kwb_run has returned, however the threads
    // happen to be scheduled. Without it the thread can finish first on an idle core (the call is then merely
    // parallel, not a cheat); with a spin instead of a sleep, a parent preempted for a few milliseconds on a busy
    // machine could capture the outputs after the thread had finished, and the check would pass by chance.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    rmsnorm_rows(copy, copy.y, half, copy.rows);
  }).detach();
  return 0;
}
