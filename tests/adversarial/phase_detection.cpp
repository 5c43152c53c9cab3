// Adversarial candidate. Class: phase detection (GPU MODE NVFP4 post-mortem 2026-03; pygpubench submission_warmup).
// Cheat: counts the calls it receives for each shape. A correctness check makes a handful of calls per shape (kwb's
// full check up to 8, where two cases share a shape); a timing loop makes many. After the 8th call of a shape it
// stops computing and replays the last result it computed for that shape, so it is honest whenever it believes it
// is being checked. kwb's default timing visit (2 warm-ups and 5 timed calls, each visit a fresh process) never
// reaches a 9th call, so there it stays honest and gains nothing; with longer visits (--samples 20) it cheats.
// Defense: every timed output is validated (compare reports INVALID), and the final check (--held-out) rehearses a
// timing visit (same process, same call pattern, a secret number of calls) with every output validated.
// Expected reason: numeric_mismatch (kwb check --held-out); INVALID in compare.
#include <kwb/kernel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <new>
#include <optional>
#include <utility>
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

struct Seen {
  int calls = 0;
  std::vector<float> last;
};

std::map<std::pair<int64_t, int64_t>, Seen> g_shapes;

}  // namespace

// Returns 1 when the call does not match the task signature, 2 when the saved result cannot be allocated.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rmsnorm> p = unpack(*call);
  if (!p) return 1;
  try {
    Seen& s = g_shapes[{p->rows, p->cols}];
    if (++s.calls > 8 && !s.last.empty()) {
      std::copy(s.last.begin(), s.last.end(), p->y);
      return 0;
    }
    rmsnorm(*p);
    s.last.assign(p->y, p->y + p->rows * p->cols);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
