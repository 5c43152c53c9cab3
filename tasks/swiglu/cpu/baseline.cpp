// SwiGLU on bfloat16, baseline cpu implementation: y = silu(gate) * up with silu(g) = g / (1 + exp(-g)), as an
// eager framework runs it when every step is its own kernel and float32 its compute type:
//
//   0. pass_widen     gf = float(gate), uf = float(up)   (two new n-element float temporaries)
//   1. pass_negate    t  = -gf                           (new temporary)
//   2. pass_exp       e  = exp(t)                        (new temporary, libm expf one element at a time)
//   3. pass_sigmoid   s  = 1 / (1 + e)                   (new temporary)
//   4. pass_mul       a  = gf * s            (silu)      (new temporary)
//   5. pass_mul       yf = a * uf                        (new temporary)
//   6. pass_narrow    y  = bf16(yf)                      (into the output, rounded to nearest even)
//
// Deliberately unfused: each pass is its own non-inlined function with its own sweep over memory, and every
// temporary is allocated on each call (seven n-element float arrays), so a profiler sees eight "kernels", seven
// float round trips through memory and the allocations. expf is a libm call the compiler cannot vectorize without
// -ffast-math (errno), so pass_exp runs one element at a time. All arithmetic is float32 and silu(gate) is *not*
// rounded to bfloat16 between the passes (the task's arithmetic is float32 inside; rounding there is the
// bf16_intermediate control). It is the "before" that the fused reference (cpu/fused.cpp) is measured against.
//
// Large |gate| needs no special case: for g < -88.72 exp(-g) overflows to +inf, s = 1 / inf = 0 and silu = g * 0
// = -0 (the true value is below 2.7e-37 in magnitude); for g > 88.72 e = exp(-g) underflows to 0 and silu = g.
// gate = -inf gives -inf * 0 = NaN, as the oracle's IEEE evaluation does (oracle.cpp).
#include <kwb/kernel.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The call's tensors, checked against the task signature: gate and up in, y out, all [tokens, ffn] bfloat16
// (DLPack's kDLBfloat, 16 bits), compact row-major, host memory. The operator is element-wise, so only the element
// count matters once the shapes agree. Anything else is refused rather than guessed at.
struct SwiGLU {
  const uint16_t* gate;
  const uint16_t* up;
  uint16_t* y;
  int64_t n;
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

bool same_shape(const DLTensor& a, const DLTensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int32_t d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
  }
  return true;
}

template <typename T>
T* elements(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

std::optional<SwiGLU> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& gate = call.inputs[0];
  const DLTensor& up = call.inputs[1];
  const DLTensor& y = call.outputs[0];
  if (!is_compact_host_bf16(gate, 2) || !is_compact_host_bf16(up, 2) || !is_compact_host_bf16(y, 2)) {
    return std::nullopt;
  }
  if (!same_shape(gate, up) || !same_shape(gate, y)) return std::nullopt;
  return SwiGLU{elements<const uint16_t>(gate), elements<const uint16_t>(up), elements<uint16_t>(y),
                gate.shape[0] * gate.shape[1]};
}

// bfloat16 is the upper half of a float32: widening is exact, a shift.
float from_bf16(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

// float32 to bfloat16, rounded to nearest, ties to even (as kwb's store_element and torch do); NaN stays NaN
// (quiet), where the rounding add could carry a NaN's payload into infinity.
uint16_t to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if (f != f) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__attribute__((noinline)) void pass_widen(const uint16_t* x, float* xf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) xf[i] = from_bf16(x[i]);
}

__attribute__((noinline)) void pass_negate(const float* x, float* t, int64_t n) {
  for (int64_t i = 0; i < n; ++i) t[i] = -x[i];
}

__attribute__((noinline)) void pass_exp(const float* t, float* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = std::exp(t[i]);
}

__attribute__((noinline)) void pass_sigmoid(const float* e, float* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) s[i] = 1.0f / (1.0f + e[i]);
}

__attribute__((noinline)) void pass_mul(const float* a, const float* b, float* c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] * b[i];
}

__attribute__((noinline)) void pass_narrow(const float* yf, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(yf[i]);
}

// Uninitialized, like an eager framework's empty(): every element is written by the pass that produces it.
std::unique_ptr<float[]> temporary(int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
}

}  // namespace

// Returns 1 when the call does not match the task signature, 2 when a temporary cannot be allocated (an exception
// must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<SwiGLU> p = unpack(*call);
  if (!p) return 1;
  const int64_t n = p->n;
  try {
    const std::unique_ptr<float[]> gf = temporary(n);
    pass_widen(p->gate, gf.get(), n);
    const std::unique_ptr<float[]> uf = temporary(n);
    pass_widen(p->up, uf.get(), n);

    const std::unique_ptr<float[]> t = temporary(n);
    pass_negate(gf.get(), t.get(), n);

    const std::unique_ptr<float[]> e = temporary(n);
    pass_exp(t.get(), e.get(), n);

    const std::unique_ptr<float[]> s = temporary(n);
    pass_sigmoid(e.get(), s.get(), n);

    const std::unique_ptr<float[]> a = temporary(n);
    pass_mul(gf.get(), s.get(), a.get(), n);

    const std::unique_ptr<float[]> yf = temporary(n);
    pass_mul(a.get(), uf.get(), yf.get(), n);

    pass_narrow(yf.get(), p->y, n);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
