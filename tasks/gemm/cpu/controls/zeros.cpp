// Error control for the gemm task. Must be rejected by the check with: numeric_mismatch.
//
// Defect: it writes 0 to every output element and computes nothing. Every case has non-zero outputs (the positive
// cases have c >= k/4), so every case fails. It is the control for a grader that would accept "some output was
// written" or compare too loosely.
#include <kwb/kernel.h>

#include <algorithm>
#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The call's tensors, checked against the task signature: a [m, k] and b [k, n] in, c [m, n] out, all f32,
// compact row-major, host memory. Anything else is refused rather than guessed at.
struct Gemm {
  const float* a;
  const float* b;
  float* c;
  int64_t m;
  int64_t k;
  int64_t n;
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

std::optional<Gemm> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& a = call.inputs[0];
  const DLTensor& b = call.inputs[1];
  const DLTensor& c = call.outputs[0];
  if (!is_compact_host_f32(a, 2) || !is_compact_host_f32(b, 2) || !is_compact_host_f32(c, 2)) return std::nullopt;
  if (b.shape[0] != a.shape[1] || c.shape[0] != a.shape[0] || c.shape[1] != b.shape[1]) return std::nullopt;
  return Gemm{elements<const float>(a), elements<const float>(b), elements<float>(c), a.shape[0], a.shape[1],
              b.shape[1]};
}

void gemm(const Gemm& g) { std::fill_n(g.c, g.m * g.n, 0.0f); }

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Gemm> p = unpack(*call);
  if (!p) return 1;
  gemm(*p);
  return 0;
}
