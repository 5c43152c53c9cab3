// Error control for the gemm task. Must be rejected by the check with: output_not_written.
//
// Defect: the blocked reference (cpu/blocked.cpp) with its edge handling forgotten: the row loop runs only over
// full tiles of k_mr rows (`i + k_mr <= m`) and the column loop only over full tiles of k_nr columns, with no
// remainder path. Like the reference it never clears C (the first depth block writes every element it covers),
// so the last m % k_mr rows and the last columns of each column block are never written at all: on the poisoned
// output kwb finds them (output_not_written). Only shapes that are a multiple of the tiles pass (the 384 x 384
// `square`: 384 = 64 * 6 = 12 * 32); `ragged` (67 x 129 x 45), `ragged_blocks`, the k = 1 cases and `decode` (one
// row, less than a tile) do not.
#include <kwb/kernel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The widest vector the target has. -march=native picks it; the code below is the same for every width, and
// GCC/Clang lower the vector type to plain scalar code on a target with no SIMD at all.
#if defined(__AVX512F__)
constexpr int k_lanes = 16;
#elif defined(__AVX__)
constexpr int k_lanes = 8;
#else
constexpr int k_lanes = 4;
#endif
using Vec = float __attribute__((vector_size(k_lanes * sizeof(float))));

constexpr int k_mr = 6;                // rows of a C tile: 12 vector accumulators
constexpr int64_t k_nr = 2 * k_lanes;  // columns of a C tile
constexpr int64_t k_kc = 256;          // depth of a block
constexpr int64_t k_nc = 1024;         // columns of a block: k_kc x k_nc floats = 1 MiB of B

// Rows carry no alignment promise, so every vector load and store is an unaligned one; memcpy is how to say that
// without undefined behaviour, and it compiles to a single instruction.
Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// A scalar operand of a vector operation is broadcast to every lane; subtracting +0 leaves every value (-0, inf,
// NaN) as it is.
Vec splat(float v) { return v - Vec{}; }

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

// C[i..i+R, j..j+k_nr) (+)= A[i..i+R, p0..p0+kc) B[p0..p0+kc, j..j+k_nr); `first` when p0 == 0 (C holds poison).
template <int R>
void micro_kernel(const Gemm& g, int64_t i, int64_t j, int64_t p0, int64_t kc, bool first) {
  Vec acc0[R];
  Vec acc1[R];
  for (int r = 0; r < R; ++r) {
    float* c = g.c + (i + r) * g.n + j;
    acc0[r] = first ? Vec{} : load(c);
    acc1[r] = first ? Vec{} : load(c + k_lanes);
  }
  const float* a = g.a + i * g.k + p0;
  const float* b = g.b + p0 * g.n + j;
  for (int64_t p = 0; p < kc; ++p) {
    const Vec b0 = load(b + p * g.n);
    const Vec b1 = load(b + p * g.n + k_lanes);
    for (int r = 0; r < R; ++r) {
      const Vec av = splat(a[r * g.k + p]);
      acc0[r] += av * b0;
      acc1[r] += av * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    float* c = g.c + (i + r) * g.n + j;
    store(c, acc0[r]);
    store(c + k_lanes, acc1[r]);
  }
}

void gemm_blocked(const Gemm& g) {
  if (g.k == 0) {  // an empty sum: C = 0 (the task's dims are >= 1, but the ABI does not promise it)
    std::fill_n(g.c, g.m * g.n, 0.0f);
    return;
  }
  for (int64_t jc = 0; jc < g.n; jc += k_nc) {
    const int64_t j_end = std::min(jc + k_nc, g.n);
    for (int64_t p0 = 0; p0 < g.k; p0 += k_kc) {
      const int64_t kc = std::min(k_kc, g.k - p0);
      const bool first = p0 == 0;
      for (int64_t i = 0; i + k_mr <= g.m; i += k_mr) {           // the bug: no remainder rows
        for (int64_t j = jc; j + k_nr <= j_end; j += k_nr) {    // the bug: no remainder columns
          micro_kernel<k_mr>(g, i, j, p0, kc, first);
        }
      }
    }
  }
}

}  // namespace

// Returns 1 when the call does not match the task signature.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Gemm> p = unpack(*call);
  if (!p) return 1;
  gemm_blocked(*p);
  return 0;
}
