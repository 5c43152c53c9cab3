// Error control for the topk task. Must be rejected by the check with: input_modified.
//
// Defect: a repeated argmax, the simplest top-k for small k, that removes each winner from the row by overwriting it
// with -inf in x itself, so that the next scan finds the runner-up. Its outputs would be right wherever a row has k
// finite entries (the strict `>` keeps the first of equal values, the task's tie rule), but x is an input: on the cpu backend inputs are mapped read-only, so the first store faults
// (SIGSEGV) inside kwb_run and kwb reports input_modified; where inputs are writable, comparing x with its copy after
// the call finds it changed.
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

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
  return t.strides == nullptr;
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

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<TopK> p = unpack(*call);
  if (!p) return 1;
  float* x = const_cast<float*>(p->x);  // casting away the read-only promise the ABI makes
  for (int64_t r = 0; r < p->rows; ++r) {
    float* row = x + r * p->n;
    for (int64_t j = 0; j < p->k; ++j) {
      int64_t best = -1;
      for (int64_t c = 0; c < p->n; ++c) {
        if (best < 0 || row[c] > row[best]) best = c;
      }
      p->values[r * p->k + j] = row[best];
      p->indices[r * p->k + j] = best;
      row[best] = -INFINITY;  // the bug: x is an input
    }
  }
  return 0;
}
