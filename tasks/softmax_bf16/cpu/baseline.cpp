// Softmax on bfloat16, baseline cpu implementation: what an eager framework runs for a bfloat16 tensor, the
// five-kernel float32 composition of tasks/softmax/cpu/baseline.cpp between a widening pass and a narrowing pass:
//
//   0. pass_widen     xf = float(x)               (new rows*cols float temporary)
//   1. pass_row_max   m = max(xf, last axis)      (new rows temporary)
//   2. pass_sub_max   t = xf - m                  (new rows*cols temporary)
//   3. pass_exp       e = exp(t)                  (new rows*cols temporary, libm expf one element at a time)
//   4. pass_row_sum   s = sum(e, last axis)       (new rows temporary, plain sequential float sum)
//   5. pass_divide    yf = e / s                  (new rows*cols temporary)
//   6. pass_narrow    y = bf16(yf)                (into the output, rounded to nearest even)
//
// Each pass is its own non-inlined function with its own sweep over memory and every temporary is allocated on
// each call. All arithmetic is float32: bfloat16 is only the storage format, as in torch's softmax for bfloat16.
#include <kwb/kernel.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The call's tensors, checked against the task signature: x [rows, cols] in, y [rows, cols] out, both bfloat16
// (DLPack's kDLBfloat, 16 bits), compact row-major, host memory. Anything else is refused rather than guessed at.
struct Softmax {
  const uint16_t* x;
  uint16_t* y;
  int64_t rows;
  int64_t cols;
};

bool is_compact_host_bf16(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim) return false;
  if (t.dtype.code != kDLBfloat || t.dtype.bits != 16 || t.dtype.lanes != 1) return false;
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
  if (!is_compact_host_bf16(x, 2) || !is_compact_host_bf16(y, 2)) return std::nullopt;
  if (y.shape[0] != x.shape[0] || y.shape[1] != x.shape[1]) return std::nullopt;
  return Softmax{elements<const uint16_t>(x), elements<uint16_t>(y), x.shape[0], x.shape[1]};
}

// bfloat16 is the upper half of a float32: widening is exact, a shift.
float from_bf16(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

// float32 to bfloat16, rounded to nearest, ties to even (as kwb's store_element and torch do); NaN stays NaN.
uint16_t to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if (f != f) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__attribute__((noinline)) void pass_widen(const uint16_t* x, float* xf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) xf[i] = from_bf16(x[i]);
}

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

__attribute__((noinline)) void pass_narrow(const float* yf, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(yf[i]);
}

// Uninitialized, like an eager framework's empty(): every element is written by the pass that produces it.
std::unique_ptr<float[]> temporary(int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty), 2 when a temporary cannot be
// allocated (an exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  const int64_t n = p->rows * p->cols;
  try {
    const std::unique_ptr<float[]> xf = temporary(n);
    pass_widen(p->x, xf.get(), n);

    const std::unique_ptr<float[]> m = temporary(p->rows);
    pass_row_max(xf.get(), m.get(), p->rows, p->cols);

    const std::unique_ptr<float[]> t = temporary(n);
    pass_sub_max(xf.get(), m.get(), t.get(), p->rows, p->cols);

    const std::unique_ptr<float[]> e = temporary(n);
    pass_exp(t.get(), e.get(), n);

    const std::unique_ptr<float[]> s = temporary(p->rows);
    pass_row_sum(e.get(), s.get(), p->rows, p->cols);

    const std::unique_ptr<float[]> yf = temporary(n);
    pass_divide(e.get(), s.get(), yf.get(), p->rows, p->cols);

    pass_narrow(yf.get(), p->y, n);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
