// Error control for the softmax_bf16 task. Must be rejected by the check with: numeric_mismatch.
//
// Defect: the sum of exponentials is kept in bfloat16, the storage type, instead of float32: after every add the
// running sum is rounded to bfloat16 (8 significant bits, to nearest even). Max, exp and divide are float32, as in
// the reference. Each add then loses up to 2^-9 of the sum, and once the sum is large a term below half its
// spacing vanishes: on `decode` (32000 terms) and `batch` (4096) the sum, and so every output, is off by percents,
// far beyond rtol = 6.5e-3. It is the bug of a kernel that accumulates in its input's precision.
#include <kwb/kernel.h>

#include <bit>
#include <cmath>
#include <cstdint>
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

void softmax_row(const uint16_t* x, uint16_t* y, int64_t n) {
  float m = from_bf16(x[0]);
  for (int64_t c = 1; c < n; ++c) m = std::fmax(m, from_bf16(x[c]));
  float sum = 0.0f;
  for (int64_t c = 0; c < n; ++c) sum = from_bf16(to_bf16(sum + std::exp(from_bf16(x[c]) - m)));  // the bug
  for (int64_t c = 0; c < n; ++c) y[c] = to_bf16(std::exp(from_bf16(x[c]) - m) / sum);
}

}  // namespace

// Returns 1 when the call does not match the task signature (or a row is empty).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Softmax> p = unpack(*call);
  if (!p || p->cols < 1) return 1;
  for (int64_t r = 0; r < p->rows; ++r) softmax_row(p->x + r * p->cols, p->y + r * p->cols, p->cols);
  return 0;
}
