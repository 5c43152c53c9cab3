// Q8_0 quantization, reference optimized cpu implementation: one pass over x, one block of 32 values at a time held
// in registers, no temporary, no allocation, no libm call.
//
// Per block: load the 32 floats as whole SIMD vectors, take |x| by clearing the sign bit, reduce to the block's
// amax (max is exact and order-free, so any reduction tree gives the same value), then d = amax / 127 and
// id = d ? 1/d : 0 in float32 exactly as ggml's quantize_row_q8_0_ref, the f16 scale by a float -> _Float16
// conversion (round to nearest even; F16C's vcvtps2ph under -march=native), and qs = roundf(x * id) on whole
// vectors. C's roundf (halves away from zero) has no single SIMD instruction (vroundps' nearest mode is ties-to-even,
// which differs on exact halves), so it is built from exact steps: t = trunc(p) (a truncating conversion: |p| <=
// 127.x fits int32), f = p - t (exact: t is p with its fraction bits cleared), then t + 1 where f >= 0.5 and t - 1
// where f <= -0.5. The int32 lanes are narrowed to int8 in registers and stored.
//
// Rows are whole blocks, so the tensor is one contiguous run of blocks: x[b*32 .. b*32+31] -> qs[b*32 ..], scales[b].
#include <kwb/kernel.h>

#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

constexpr int64_t k_block = 32;

// The widest vector the target has. -march=native picks it; the code below is the same for every width, and
// GCC/Clang lower the vector types to plain scalar code on a target with no SIMD at all.
#if defined(__AVX512F__)
constexpr int k_lanes = 16;
#elif defined(__AVX__)
constexpr int k_lanes = 8;
#else
constexpr int k_lanes = 4;
#endif
constexpr int k_vectors = k_block / k_lanes;  // vectors per block
using Vec = float __attribute__((vector_size(k_lanes * sizeof(float))));
using IVec = int32_t __attribute__((vector_size(k_lanes * sizeof(int32_t))));
using UVec = uint32_t __attribute__((vector_size(k_lanes * sizeof(uint32_t))));
using QVec = int8_t __attribute__((vector_size(k_lanes * sizeof(int8_t))));

// A scalar operand of a vector operation is broadcast to every lane.
Vec splat(float v) { return v - Vec{}; }

// Rows carry no alignment promise, so every vector load is an unaligned one; memcpy is how to say that without
// undefined behaviour, and it compiles to a single load instruction.
Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

Vec abs(Vec v) { return reinterpret_cast<Vec>(reinterpret_cast<UVec>(v) & 0x7FFFFFFFu); }

// roundf lane by lane for |p| < 2^31: halves away from zero, from exact steps (see the header).
IVec round_half_away(Vec p) {
  IVec t = __builtin_convertvector(p, IVec);  // truncation toward zero
  const Vec f = p - __builtin_convertvector(t, Vec);
  // A comparison gives -1 in the lanes where it holds: subtracting it adds 1.
  t -= f >= splat(0.5f);
  t += f <= splat(-0.5f);
  return t;
}

void quantize_block(const float* x, int8_t* qs, uint16_t* scale) {
  Vec v[k_vectors];
  for (int k = 0; k < k_vectors; ++k) v[k] = load(x + k * k_lanes);
  Vec m = abs(v[0]);
  for (int k = 1; k < k_vectors; ++k) {
    const Vec a = abs(v[k]);
    m = a > m ? a : m;
  }
  float amax = m[0];
  for (int lane = 1; lane < k_lanes; ++lane) amax = m[lane] > amax ? m[lane] : amax;

  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const _Float16 h = static_cast<_Float16>(d);
  std::memcpy(scale, &h, sizeof h);

  const Vec mul = splat(id);
  for (int k = 0; k < k_vectors; ++k) {
    const QVec q = __builtin_convertvector(round_half_away(v[k] * mul), QVec);
    std::memcpy(qs + k * k_lanes, &q, sizeof q);
  }
}

// The call's tensors, checked against the task signature: x [rows, 32*blocks] f32 in; qs [rows, 32*blocks] i8
// and scales [rows, blocks] f16 out; compact row-major, host memory. Anything else is refused.
struct Q8 {
  const float* x;
  int8_t* qs;
  uint16_t* scales;
  int64_t blocks;  // over the whole tensor: every row is a whole number of blocks
};

bool is_compact_host(const DLTensor& t, int32_t ndim, uint8_t code, uint8_t bits) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim) return false;
  if (t.dtype.code != code || t.dtype.bits != bits || t.dtype.lanes != 1) return false;
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

std::optional<Q8> unpack(const kwb_call& call) {
  if (call.num_inputs != 1 || call.num_outputs != 2) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& qs = call.outputs[0];
  const DLTensor& scales = call.outputs[1];
  if (!is_compact_host(x, 2, kDLFloat, 32) || !is_compact_host(qs, 2, kDLInt, 8) ||
      !is_compact_host(scales, 2, kDLFloat, 16)) {
    return std::nullopt;
  }
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (cols % k_block != 0 || qs.shape[0] != rows || qs.shape[1] != cols || scales.shape[0] != rows ||
      scales.shape[1] != cols / k_block) {
    return std::nullopt;
  }
  return Q8{elements<const float>(x), elements<int8_t>(qs), elements<uint16_t>(scales), rows * (cols / k_block)};
}

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Q8> p = unpack(*call);
  if (!p) return 1;
  for (int64_t b = 0; b < p->blocks; ++b) quantize_block(p->x + b * k_block, p->qs + b * k_block, p->scales + b);
  return 0;
}
