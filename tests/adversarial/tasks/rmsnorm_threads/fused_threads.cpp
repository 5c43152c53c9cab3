// RMSNorm, honest multi-threaded cpu implementation for the rmsnorm_threads test task: rows split over up to
// kwb_context.max_threads std::threads, every one joined before kwb_run returns. It must pass every check where the
// task allows threads (no false rejections from the sandbox or the post-return checks).
#include <kwb/kernel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

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

// Two passes per row; eight independent partial sums keep the adders busy (as in tasks/rmsnorm/cpu/fused.cpp).
void rmsnorm_rows(const Rmsnorm& p, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = p.x + r * p.cols;
    float* y = p.y + r * p.cols;
    float acc[8] = {};
    int64_t c = 0;
    for (; c + 8 <= p.cols; c += 8) {
      for (int k = 0; k < 8; ++k) acc[k] += x[c + k] * x[c + k];
    }
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; c < p.cols; ++c) sum += x[c] * x[c];
    const float inv_rms = 1.0f / std::sqrt(sum / static_cast<float>(p.cols) + p.eps);
    for (c = 0; c < p.cols; ++c) y[c] = x[c] * inv_rms * p.weight[c];
  }
}

int g_max_threads = 1;

}  // namespace

extern "C" KWB_EXPORT int kwb_setup(const kwb_context* ctx) {
  g_max_threads = std::max(1, static_cast<int>(ctx->max_threads));
  return 0;
}

// Returns 1 when the call does not match the task signature, 2 when a thread cannot be started (an exception must
// not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  // A thread per 32 rows at most: for a single row, starting threads costs more than it saves.
  const int64_t threads = std::clamp<int64_t>(p->rows / 32, 1, g_max_threads);
  if (threads == 1) {
    rmsnorm_rows(*p, 0, p->rows);
    return 0;
  }
  std::vector<std::thread> workers;
  int rc = 0;
  try {
    for (int64_t t = 1; t < threads; ++t) {
      workers.emplace_back(rmsnorm_rows, *p, p->rows * t / threads, p->rows * (t + 1) / threads);
    }
  } catch (const std::system_error&) {
    rc = 2;
  }
  rmsnorm_rows(*p, 0, p->rows / threads);
  for (std::thread& w : workers) w.join();
  return rc;
}
