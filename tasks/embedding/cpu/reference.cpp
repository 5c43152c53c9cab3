// Embedding lookup, reference optimized cpu implementation: for each id, its table row widened from f16 to float32
// with the compiler's _Float16 (F16C's vcvtph2ps, 8 or 16 values an instruction, under -march=native), touching
// only the rows the ids select.
#include <kwb/kernel.h>

#include <bit>
#include <cstdint>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

struct Lookup {
  const _Float16* table;
  const int32_t* ids;
  float* out;
  int64_t vocab;
  int64_t dim;
  int64_t n;
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

// table [vocab, dim] f16 and ids [n] i32 in, out [n, dim] f32; anything else is refused rather than guessed at.
std::optional<Lookup> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& table = call.inputs[0];
  const DLTensor& ids = call.inputs[1];
  const DLTensor& out = call.outputs[0];
  if (!is_compact_host(table, 2, kDLFloat, 16) || !is_compact_host(ids, 1, kDLInt, 32) ||
      !is_compact_host(out, 2, kDLFloat, 32)) {
    return std::nullopt;
  }
  if (out.shape[0] != ids.shape[0] || out.shape[1] != table.shape[1]) return std::nullopt;
  return Lookup{elements<const _Float16>(table), elements<const int32_t>(ids), elements<float>(out), table.shape[0],
                table.shape[1], ids.shape[0]};
}

}  // namespace

// Returns 1 when the call does not match the task signature, 2 for an id outside the table.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Lookup> p = unpack(*call);
  if (!p) return 1;
  const _Float16* table = p->table;
  const int32_t* ids = p->ids;
  const int64_t vocab = p->vocab, dim = p->dim, n = p->n;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = ids[i];
    if (row < 0 || row >= vocab) return 2;
    const _Float16* row_data = table + row * dim;
    float* out_row = p->out + i * dim;
    for (int64_t j = 0; j < dim; ++j) {
      out_row[j] = static_cast<float>(row_data[j]);
    }
  }
  return 0;
}
