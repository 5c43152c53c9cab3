// Embedding lookup, baseline cpu implementation: the straightforward gather a first version would be, each f16
// value widened by hand from its bits (sign, exponent, mantissa; subnormals normalized; infinities and NaN kept),
// one element at a time. Correct for every value, and slow: a branchy scalar conversion per element.
#include <kwb/kernel.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

struct Lookup {
  const uint16_t* table;
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
  return Lookup{elements<const uint16_t>(table), elements<const int32_t>(ids), elements<float>(out), table.shape[0],
                table.shape[1], ids.shape[0]};
}

// IEEE binary16 bits to the float32 of the same value (exact: every f16 value is a float32 value).
float widen(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits = 0;
  if (exponent == 0x1Fu) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // normal: rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    int e = -1;  // subnormal: shift the leading 1 into the implicit bit
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    bits = sign | ((112u - static_cast<uint32_t>(e)) << 23) | ((mantissa & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

}  // namespace

// Returns 1 when the call does not match the task signature, 2 for an id outside the table.
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Lookup> p = unpack(*call);
  if (!p) return 1;
  for (int64_t i = 0; i < p->n; ++i) {
    const int64_t row = p->ids[i];
    if (row < 0 || row >= p->vocab) return 2;
    for (int64_t j = 0; j < p->dim; ++j) {
      uint16_t h = 0;
      std::memcpy(&h, p->table + row * p->dim + j, sizeof h);
      p->out[i * p->dim + j] = widen(h);
    }
  }
  return 0;
}
