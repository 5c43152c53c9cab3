// GEMM, baseline cpu implementation: C = A B, the textbook triple loop in i, j, k order with the k loop innermost,
// c[i, j] = sum_k a[i, k] * b[k, j] accumulated in one float, exactly as the definition reads.
//
// It is the "before" the blocked reference is measured against. The inner loop walks a row of A contiguously but
// a column of B with a stride of n floats, so every b load touches a new cache line (and, for n a multiple of a
// large power of two, the same few cache sets); each C element is a serial chain of dependent adds, so neither the
// compiler (no reassociation without -ffast-math) nor the CPU can overlap them, and nothing is vectorized.
#include <kwb/kernel.h>

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

__attribute__((noinline)) void gemm_ijk(const Gemm& p) {
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      float sum = 0.0f;
      for (int64_t kk = 0; kk < p.k; ++kk) sum += p.a[i * p.k + kk] * p.b[kk * p.n + j];
      p.c[i * p.n + j] = sum;
    }
  }
}

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Gemm> p = unpack(*call);
  if (!p) return 1;
  gemm_ijk(*p);
  return 0;
}
