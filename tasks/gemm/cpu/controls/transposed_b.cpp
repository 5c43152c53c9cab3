// Error control for the gemm task. Must be rejected by the check with: numeric_mismatch.
//
// Defect: B is read as if it were stored transposed (b[j, p] at b[j * k + p]), so the result is A B^T (for a
// square B; for another shape, A times B's memory reinterpreted as an n x k matrix, transposed). The reference's
// i-k-j loop order with that one index swapped. With k = 1 both readings agree (b[0, j] = b[j]), and a 1 x 1 x 1
// case cannot tell; every other case errs by several percent (a different sum of ~k positive products).
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

void gemm(const Gemm& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    float* c = g.c + i * g.n;
    std::fill_n(c, g.n, 0.0f);
    for (int64_t p = 0; p < g.k; ++p) {
      const float aip = g.a[i * g.k + p];
      for (int64_t j = 0; j < g.n; ++j) c[j] += aip * g.b[j * g.k + p];  // the bug: should be b[p * n + j]
    }
  }
}

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Gemm> p = unpack(*call);
  if (!p) return 1;
  gemm(*p);
  return 0;
}
