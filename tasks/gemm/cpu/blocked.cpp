// GEMM, reference optimized cpu implementation: C = A B, cache-blocked and register-tiled, single-threaded.
//
// The loop nest is the i-k-j ("outer product") order, blocked three ways:
//
//   for each column block jc of k_nc columns       (a k_kc x k_nc block of B, 1 MiB, stays in L2)
//     for each depth block pc of k_kc               (B's rows pc..pc+k_kc)
//       for each row tile i of k_mr rows            (k_mr x k_kc of A, a few KiB, in L1)
//         for each column tile j of k_nr columns    (k_nr = two SIMD vectors)
//           micro-kernel: a k_mr x k_nr tile of C held in 2 k_mr vector registers; each step p loads two vectors
//           of B's row p, broadcasts a[i + r, p] and does 2 k_mr multiply-adds
//
// Every B vector loaded feeds k_mr multiply-adds and every broadcast of A feeds two, so the kernel is bound by the
// vector units rather than by loads; the naive baseline does one scalar multiply-add per strided load. B's rows
// are contiguous in row-major storage, so no packing is needed for the vector loads.
//
// Each c[i, j] is still the sum over k in order, in one float accumulator (kept in a register within a depth
// block, stored and reloaded in C between blocks), so its rounding error obeys the same recursive-summation
// bound as the baseline's. Edges: the last rows (fewer than k_mr) take a micro-kernel with fewer rows, the last
// columns (fewer than k_nr) a scalar loop; C is never read before the first depth block has written it.
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

// The same for the last columns of a block, fewer than k_nr of them, one scalar accumulator per element.
void edge_columns(const Gemm& g, int64_t i, int64_t rows, int64_t j0, int64_t j1, int64_t p0, int64_t kc,
                  bool first) {
  for (int64_t r = i; r < i + rows; ++r) {
    for (int64_t j = j0; j < j1; ++j) {
      float sum = first ? 0.0f : g.c[r * g.n + j];
      for (int64_t p = p0; p < p0 + kc; ++p) sum += g.a[r * g.k + p] * g.b[p * g.n + j];
      g.c[r * g.n + j] = sum;
    }
  }
}

void row_tile(const Gemm& g, int64_t i, int64_t rows, int64_t j, int64_t p0, int64_t kc, bool first) {
  switch (rows) {
    case 6: micro_kernel<6>(g, i, j, p0, kc, first); break;
    case 5: micro_kernel<5>(g, i, j, p0, kc, first); break;
    case 4: micro_kernel<4>(g, i, j, p0, kc, first); break;
    case 3: micro_kernel<3>(g, i, j, p0, kc, first); break;
    case 2: micro_kernel<2>(g, i, j, p0, kc, first); break;
    default: micro_kernel<1>(g, i, j, p0, kc, first); break;
  }
}

void gemm_blocked(const Gemm& g) {
  static_assert(k_mr == 6, "row_tile dispatches 1..6 rows");
  if (g.k == 0) {  // an empty sum: C = 0 (the task's dims are >= 1, but the ABI does not promise it)
    std::fill_n(g.c, g.m * g.n, 0.0f);
    return;
  }
  for (int64_t jc = 0; jc < g.n; jc += k_nc) {
    const int64_t j_end = std::min(jc + k_nc, g.n);
    for (int64_t p0 = 0; p0 < g.k; p0 += k_kc) {
      const int64_t kc = std::min(k_kc, g.k - p0);
      const bool first = p0 == 0;
      for (int64_t i = 0; i < g.m; i += k_mr) {
        const int64_t rows = std::min<int64_t>(k_mr, g.m - i);
        int64_t j = jc;
        for (; j + k_nr <= j_end; j += k_nr) row_tile(g, i, rows, j, p0, kc, first);
        if (j < j_end) edge_columns(g, i, rows, j, j_end, p0, kc, first);
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
