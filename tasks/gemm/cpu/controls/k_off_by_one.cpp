// Error control for the gemm task. Must be rejected by the check with: numeric_mismatch.
//
// Defect: an off-by-one in the depth loop, `p < k - 1` where `p < k` was meant, so the last term a[i, k-1] *
// b[k-1, j] of every dot product is left out (the reference's i-k-j loop order otherwise). With positive data
// that is ~1/k of c: 7.8e-3 at k = 129 (`ragged`), beyond rtol = 1e-3; with k = 1 (`k_one`, `one_by_one`) c is 0.
// (At k = 2048, `decode`, the missing 4.9e-4 hides inside rtol: the short sums are the ones that catch it.)
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
    for (int64_t p = 0; p < g.k - 1; ++p) {  // the bug: the last p is skipped
      const float aip = g.a[i * g.k + p];
      const float* b = g.b + p * g.n;
      for (int64_t j = 0; j < g.n; ++j) c[j] += aip * b[j];
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
