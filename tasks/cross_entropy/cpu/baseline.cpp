// Cross-entropy loss, baseline cpu implementation: the composition an eager framework runs for
// `F.nll_loss(F.log_softmax(x, -1), t)` (what torch.nn.functional.cross_entropy is), one pass per operator:
//
//   1. pass_row_max      m = max(x, last axis)        (new rows temporary)
//   2. pass_sub_max      t = x - m, m broadcast       (new rows*vocab temporary)
//   3. pass_exp          e = exp(t)                   (new rows*vocab temporary, libm expf one element at a time)
//   4. pass_row_sum      s = sum(e, last axis)        (new rows temporary, plain sequential float sum)
//   5. pass_log_softmax  lp = t - log(s), broadcast   (new rows*vocab temporary: the whole log-probability matrix)
//   6. pass_nll          loss[r] = -lp[r, target[r]]  (into the output)
//
// Deliberately unfused: each pass is its own non-inlined function with its own full sweep over memory, and every
// temporary is allocated on each call, so a profiler sees six "kernels", three rows*vocab temporaries written and
// read back, and the allocations; of the whole log-probability matrix only one element per row is ever used. It is
// the "before" that the two-sweep reference is measured against. Non-finite logits come out as the oracle defines
// them by plain IEEE arithmetic: a masked target has t = -inf and loss +inf, a +inf logit makes its row's sum NaN,
// a row of -inf only has m = -inf and t = NaN.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

__attribute__((noinline)) void pass_row_max(const float* x, float* m, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    float v = x[r * vocab];
    for (int64_t c = 1; c < vocab; ++c) v = x[r * vocab + c] > v ? x[r * vocab + c] : v;
    m[r] = v;
  }
}

__attribute__((noinline)) void pass_sub_max(const float* x, const float* m, float* t, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < vocab; ++c) t[r * vocab + c] = x[r * vocab + c] - m[r];
  }
}

__attribute__((noinline)) void pass_exp(const float* t, float* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = std::exp(t[i]);
}

__attribute__((noinline)) void pass_row_sum(const float* e, float* s, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t c = 0; c < vocab; ++c) sum += e[r * vocab + c];
    s[r] = sum;
  }
}

__attribute__((noinline)) void pass_log_softmax(const float* t, const float* s, float* lp, int64_t rows,
                                                int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    const float log_s = std::log(s[r]);
    for (int64_t c = 0; c < vocab; ++c) lp[r * vocab + c] = t[r * vocab + c] - log_s;
  }
}

__attribute__((noinline)) void pass_nll(const float* lp, const int64_t* targets, float* loss, int64_t rows,
                                        int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) loss[r] = -lp[r * vocab + targets[r]];
}

// The call's tensors, checked against the task signature: logits [rows, vocab] f32 and targets [rows] i64 in,
// loss [rows] f32 out, compact row-major host memory. Anything else is refused rather than guessed at.
struct CrossEntropy {
  const float* logits;
  const int64_t* targets;
  float* loss;
  int64_t rows;
  int64_t vocab;
};

bool is_compact_host(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0) return false;
  }
  return t.strides == nullptr;
}

template <typename T>
T* elements(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

std::optional<CrossEntropy> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& logits = call.inputs[0];
  const DLTensor& targets = call.inputs[1];
  const DLTensor& loss = call.outputs[0];
  if (!is_compact_host(logits, 2, kDLFloat, 32) || !is_compact_host(targets, 1, kDLInt, 64) ||
      !is_compact_host(loss, 1, kDLFloat, 32)) {
    return std::nullopt;
  }
  if (targets.shape[0] != logits.shape[0] || loss.shape[0] != logits.shape[0]) return std::nullopt;
  return CrossEntropy{elements<const float>(logits), elements<const int64_t>(targets), elements<float>(loss),
                      logits.shape[0], logits.shape[1]};
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty), 2 for a target outside the row,
// 3 when a temporary cannot be allocated.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<CrossEntropy> p = unpack(*call);
  if (!p || (p->rows > 0 && p->vocab < 1)) return 1;
  const int64_t rows = p->rows, vocab = p->vocab, n = rows * vocab;
  for (int64_t r = 0; r < rows; ++r) {
    if (p->targets[r] < 0 || p->targets[r] >= vocab) return 2;
  }
  if (rows == 0) return 0;
  std::unique_ptr<float[]> m(new (std::nothrow) float[rows]);
  std::unique_ptr<float[]> t(new (std::nothrow) float[n]);
  std::unique_ptr<float[]> e(new (std::nothrow) float[n]);
  std::unique_ptr<float[]> s(new (std::nothrow) float[rows]);
  std::unique_ptr<float[]> lp(new (std::nothrow) float[n]);
  if (!m || !t || !e || !s || !lp) return 3;
  pass_row_max(p->logits, m.get(), rows, vocab);
  pass_sub_max(p->logits, m.get(), t.get(), rows, vocab);
  pass_exp(t.get(), e.get(), n);
  pass_row_sum(e.get(), s.get(), rows, vocab);
  pass_log_softmax(t.get(), s.get(), lp.get(), rows, vocab);
  pass_nll(lp.get(), p->targets, p->loss, rows, vocab);
  return 0;
}
