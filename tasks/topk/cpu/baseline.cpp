// Top-k, baseline cpu implementation: what an eager framework's fallback does, a full sort of every row followed by
// a slice, `order = argsort(x, descending, stable); values = x[order[:k]]; indices = order[:k]`:
//
//   1. pass_make_pairs     p = (x[r, c], c) for every element        (new rows*n temporary of pairs)
//   2. pass_sort_rows      sort each row of p: value descending, ties by ascending index (the task's order)
//   3. pass_copy_values    values[r, j]  = p[r, j].value, j < k
//   4. pass_copy_indices   indices[r, j] = p[r, j].index, j < k
//
// Deliberately wasteful: all n elements of a row are sorted (n log n comparisons, most of them deciding the order of
// entries that are then thrown away) where only k are wanted, each pass is its own non-inlined function with its own
// sweep, and the pair temporary (16 bytes per element) is allocated on every call. It is the "before" that the
// selection reference (cpu/reference.cpp) is measured against.
#include <kwb/kernel.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

struct Pair {
  float value;
  int64_t index;
};

__attribute__((noinline)) void pass_make_pairs(const float* x, Pair* p, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) p[r * n + c] = Pair{x[r * n + c], c};
  }
}

__attribute__((noinline)) void pass_sort_rows(Pair* p, int64_t rows, int64_t n) {
  // The task's total order: larger value first; equal values by ascending index (what a stable sort gives).
  const auto ranks_before = [](const Pair& a, const Pair& b) {
    return a.value > b.value || (a.value == b.value && a.index < b.index);
  };
  for (int64_t r = 0; r < rows; ++r) std::sort(p + r * n, p + (r + 1) * n, ranks_before);
}

__attribute__((noinline)) void pass_copy_values(const Pair* p, float* values, int64_t rows, int64_t n, int64_t k) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) values[r * k + j] = p[r * n + j].value;
  }
}

__attribute__((noinline)) void pass_copy_indices(const Pair* p, int64_t* indices, int64_t rows, int64_t n,
                                                 int64_t k) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) indices[r * k + j] = p[r * n + j].index;
  }
}

// The call's tensors, checked against the task signature: x [rows, n] f32 in; values [rows, k] f32 and indices
// [rows, k] i64 out, with 1 <= k <= n; compact row-major host memory. Anything else is refused rather than guessed at.
struct TopK {
  const float* x;
  float* values;
  int64_t* indices;
  int64_t rows;
  int64_t n;
  int64_t k;
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

std::optional<TopK> unpack(const kwb_call& call) {
  if (call.num_inputs != 1 || call.num_outputs != 2) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& v = call.outputs[0];
  const DLTensor& i = call.outputs[1];
  if (!is_compact_host(x, 2, kDLFloat, 32) || !is_compact_host(v, 2, kDLFloat, 32) ||
      !is_compact_host(i, 2, kDLInt, 64)) {
    return std::nullopt;
  }
  const int64_t rows = x.shape[0], n = x.shape[1], k = v.shape[1];
  if (v.shape[0] != rows || i.shape[0] != rows || i.shape[1] != k || k < 1 || k > n) return std::nullopt;
  return TopK{elements<const float>(x), elements<float>(v), elements<int64_t>(i), rows, n, k};
}

}  // namespace

// Returns 1 when the call does not match the task signature (or k is outside 1..n), 2 when the temporary cannot be
// allocated (an exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<TopK> p = unpack(*call);
  if (!p) return 1;
  try {
    // Uninitialized, like an eager framework's empty(): pass_make_pairs writes every element.
    const std::unique_ptr<Pair[]> pairs = std::make_unique_for_overwrite<Pair[]>(static_cast<size_t>(p->rows * p->n));
    pass_make_pairs(p->x, pairs.get(), p->rows, p->n);
    pass_sort_rows(pairs.get(), p->rows, p->n);
    pass_copy_values(pairs.get(), p->values, p->rows, p->n, p->k);
    pass_copy_indices(pairs.get(), p->indices, p->rows, p->n, p->k);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
