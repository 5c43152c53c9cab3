// Error control for the gemm task. Must be rejected by the check with: numeric_mismatch.
//
// Defect: the accumulator is bfloat16 (8 significant bits), as when a kernel keeps its partial sums in the
// input's 16-bit type instead of float32: after every multiply-add the running sum is rounded to bfloat16 (to
// nearest, ties to even). The products themselves are float32 and the loop order is the reference's i-k-j. On
// `large_k` the sum stalls: once it reaches ~256-512 the spacing of bfloat16 numbers (2 to 4) swallows products
// in [0.25, 2.25), and c comes out in the hundreds where the oracle has ~16384. Shorter sums lose up to 2^-9 per
// step and fail too, by less; even k = 1 fails (the one product rounded to bfloat16: up to 2^-9 > rtol = 1e-3).
#include <kwb/kernel.h>

#include <algorithm>
#include <bit>
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

// x rounded to the nearest bfloat16 (ties to even), returned as a float. The cases hold no NaN or inf.
float round_to_bf16(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xffff0000u);
}

void gemm(const Gemm& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    float* c = g.c + i * g.n;
    std::fill_n(c, g.n, 0.0f);
    for (int64_t p = 0; p < g.k; ++p) {
      const float aip = g.a[i * g.k + p];
      const float* b = g.b + p * g.n;
      for (int64_t j = 0; j < g.n; ++j) c[j] = round_to_bf16(c[j] + aip * b[j]);  // the bug: a 16-bit accumulator
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
