// Softmax, baseline cpu implementation: the textbook composition of five element-wise and reduction kernels, the
// way an eager framework runs `e = (x - x.amax(-1, keepdim=True)).exp(); y = e / e.sum(-1, keepdim=True)`.
//
//   1. pass_row_max   m = max(x, last axis)       (new rows temporary)
//   2. pass_sub_max   t = x - m, m broadcast      (new rows*cols temporary)
//   3. pass_exp       e = exp(t)                  (new rows*cols temporary, libm expf one element at a time)
//   4. pass_row_sum   s = sum(e, last axis)       (new rows temporary, plain sequential float sum)
//   5. pass_divide    y = e / s, s broadcast      (into the output)
//
// Deliberately unfused: each pass is its own non-inlined function with its own full sweep over memory, and every
// temporary is allocated on each call, so a profiler sees five "kernels", two extra rows*cols round trips through
// memory and the allocations. expf is a libm call the compiler cannot vectorize without -ffast-math (errno), so
// pass_exp runs one element at a time. It is the "before" that the online reference is measured against.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

__attribute__((noinline)) void pass_row_max(const float* x, float* m, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float v = x[r * cols];
    for (int64_t c = 1; c < cols; ++c) v = x[r * cols + c] > v ? x[r * cols + c] : v;
    m[r] = v;
  }
}

__attribute__((noinline)) void pass_sub_max(const float* x, const float* m, float* t, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[r * cols + c] = x[r * cols + c] - m[r];
  }
}

__attribute__((noinline)) void pass_exp(const float* t, float* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = std::exp(t[i]);
}

__attribute__((noinline)) void pass_row_sum(const float* e, float* s, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += e[r * cols + c];
    s[r] = sum;
  }
}

__attribute__((noinline)) void pass_divide(const float* e, const float* s, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = e[r * cols + c] / s[r];
  }
}

// Uninitialized, like an eager framework's empty(): every element is written by the pass that produces it.
std::unique_ptr<float[]> temporary(int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
}

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

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty), 2 when a temporary cannot be
// allocated (an exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  const int64_t n = p->rows * p->cols;
  try {
    const std::unique_ptr<float[]> m = temporary(p->rows);
    pass_row_max(p->x, m.get(), p->rows, p->cols);

    const std::unique_ptr<float[]> t = temporary(n);
    pass_sub_max(p->x, m.get(), t.get(), p->rows, p->cols);

    const std::unique_ptr<float[]> e = temporary(n);
    pass_exp(t.get(), e.get(), n);

    const std::unique_ptr<float[]> s = temporary(p->rows);
    pass_row_sum(e.get(), s.get(), p->rows, p->cols);

    pass_divide(e.get(), s.get(), p->y, p->rows, p->cols);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
