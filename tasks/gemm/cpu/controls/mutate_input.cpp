// Error control for the gemm task. Must be rejected by the check with: input_modified.
//
// Defect: when B is square it transposes B in place so that the inner loop can read B^T's rows contiguously (a
// dot-product i-j-p order), and transposes it back before returning. Its C is correct and B holds its original
// values on return, but B is written during the call. On the cpu backend inputs are mapped read-only, so the first
// swap faults (SIGSEGV) inside kwb_run and kwb reports input_modified; the `square` case (384 x 384) triggers it.
// Other shapes, and a 1 x 1 B (nothing to swap), take the reference's plain i-k-j loop and pass.
#include <kwb/kernel.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

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

void transpose_in_place(float* b, int64_t n) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t s = r + 1; s < n; ++s) std::swap(b[r * n + s], b[s * n + r]);
  }
}

void gemm(const Gemm& g) {
  if (g.k == g.n) {
    float* b = const_cast<float*>(g.b);  // casting away the read-only promise the ABI makes
    transpose_in_place(b, g.n);          // the bug: b is an input
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        float sum = 0.0f;
        for (int64_t p = 0; p < g.k; ++p) sum += g.a[i * g.k + p] * b[j * g.k + p];
        g.c[i * g.n + j] = sum;
      }
    }
    transpose_in_place(b, g.n);
    return;
  }
  for (int64_t i = 0; i < g.m; ++i) {
    float* c = g.c + i * g.n;
    std::fill_n(c, g.n, 0.0f);
    for (int64_t p = 0; p < g.k; ++p) {
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
