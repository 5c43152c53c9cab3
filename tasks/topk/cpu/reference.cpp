// Top-k, reference cpu implementation: a selection, not a sort. Each row is read once, keeping the k best entries
// seen so far in a binary heap whose root is the one that ranks last; only the k survivors are sorted at the end.
//
// The task's order (task.toml): a larger value ranks first; equal values rank by ascending index. Entries are scanned
// in ascending index order, so an entry met later has a larger index than every entry already kept: it ranks before
// the heap's root only when its value is strictly greater, and the scan's test is one float compare against a
// threshold (the root's value). For n >> k almost every entry fails it, so the scan tests 16 entries at a time with
// a compare the compiler vectorizes and looks closer only at a block that holds a candidate: about n/16 branches per
// row instead of the baseline's n log n comparisons, no per-call allocation (the heap's storage is kept between
// calls: it holds no data between them), and no pass over a temporary. Cost: O(n + m log k) for m heap updates
// (m ~ k log(n/k) on random data).
#include <kwb/kernel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <new>
#include <optional>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif

KWB_CANDIDATE_ABI

namespace {

struct Entry {
  float v;
  int64_t i;
};

// a ranks before b in the task's order: larger value first, then ascending index.
inline bool before(const Entry& a, const Entry& b) {
  return a.v > b.v || (a.v == b.v && a.i < b.i);
}

// The heap is std's max-heap with `before` as its "less": heap[0] is the kept entry that ranks last. Replace it by
// e (which ranks before it) and sift e down to its place.
inline void replace_top(Entry* heap, int64_t k, Entry e) {
  int64_t hole = 0;
  for (;;) {
    int64_t child = 2 * hole + 1;
    if (child >= k) break;
    if (child + 1 < k && before(heap[child], heap[child + 1])) ++child;  // the child that ranks later
    if (!before(e, heap[child])) break;
    heap[hole] = heap[child];
    hole = child;
  }
  heap[hole] = e;
}

constexpr int k_block = 16;

// Whether any of the k_block entries at p is > threshold: one vector compare on AVX-512, two on AVX2 (kwb builds
// with -march=native), a branch-free scalar loop elsewhere. _CMP_GT_OQ is the scalar `>`: false for equal values.
inline bool block_has_candidate(const float* p, float threshold) {
#if defined(__AVX512F__)
  return _mm512_cmp_ps_mask(_mm512_loadu_ps(p), _mm512_set1_ps(threshold), _CMP_GT_OQ) != 0;
#elif defined(__AVX__)
  const __m256 t = _mm256_set1_ps(threshold);
  const __m256 gt = _mm256_or_ps(_mm256_cmp_ps(_mm256_loadu_ps(p), t, _CMP_GT_OQ),
                                 _mm256_cmp_ps(_mm256_loadu_ps(p + 8), t, _CMP_GT_OQ));
  return _mm256_movemask_ps(gt) != 0;
#else
  int any = 0;
  for (int j = 0; j < k_block; ++j) any |= p[j] > threshold;
  return any != 0;
#endif
}

// The first block start from c on (in steps of k_block) whose block holds a candidate, or the first start without
// a whole block left before n.
inline int64_t skip_blocks(const float* row, int64_t c, int64_t n, float threshold) {
  for (; c + k_block <= n; c += k_block) {
    if (block_has_candidate(row + c, threshold)) break;
  }
  return c;
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

void top_k_rows(const TopK& p, Entry* heap) {
  const int64_t n = p.n, k = p.k;
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* row = p.x + r * n;
    for (int64_t c = 0; c < k; ++c) heap[c] = Entry{row[c], c};
    std::make_heap(heap, heap + k, before);
    int64_t c = k;
    float threshold = heap[0].v;
    for (;;) {
      c = skip_blocks(row, c, n, threshold);
      if (c + k_block > n) break;
      for (int64_t j = c; j < c + k_block; ++j) {
        if (row[j] > threshold) {
          replace_top(heap, k, Entry{row[j], j});
          threshold = heap[0].v;
        }
      }
      c += k_block;
    }
    for (; c < n; ++c) {
      if (row[c] > threshold) {
        replace_top(heap, k, Entry{row[c], c});
        threshold = heap[0].v;
      }
    }
    std::sort_heap(heap, heap + k, before);  // best first
    float* vals = p.values + r * k;
    int64_t* idxs = p.indices + r * k;
    for (int64_t j = 0; j < k; ++j) {
      vals[j] = heap[j].v;
      idxs[j] = heap[j].i;
    }
  }
}

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

// The heap's storage: sized once per k seen (data-independent state; a call never reads what an earlier one left).
std::vector<Entry>* g_heap = nullptr;

}  // namespace

extern "C" KWB_EXPORT int kwb_setup(const kwb_context*) {
  try {
    g_heap = new std::vector<Entry>();
    g_heap->reserve(1024);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}

// Returns 1 when the call does not match the task signature (or k is outside 1..n), 2 when the heap's storage
// cannot be allocated (an exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<TopK> p = unpack(*call);
  if (!p || g_heap == nullptr) return 1;
  try {
    if (g_heap->size() < static_cast<size_t>(p->k)) g_heap->resize(static_cast<size_t>(p->k));
  } catch (const std::bad_alloc&) {
    return 2;
  }
  top_k_rows(*p, g_heap->data());
  return 0;
}

extern "C" KWB_EXPORT void kwb_teardown(void) {
  delete g_heap;
  g_heap = nullptr;
}
