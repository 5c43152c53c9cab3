// Shared by the corpus candidates of the trusted-timing and build attacks (early_done.cpp, clock_rewrite.cpp,
// mapping_memo.cpp, forged_reply.cpp, signal_routing.cpp, profile_escape.cpp, uid_probe.cpp, build_*.cpp): the
// RMSNorm call unpacked from its tensors, and a plain two-pass RMSNorm, so each file holds only its cheat.
// Header-only, in the candidates' own folder, which declares it in kwb.files (a build reads only declared files).
#pragma once

#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <optional>

namespace corpus {

struct Rmsnorm {
  const float* x;
  const float* weight;
  float* y;
  int64_t rows;
  int64_t cols;
  float eps;
};

inline bool is_compact_host_f32(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim || t.strides != nullptr) return false;
  if (t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != 1) return false;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0) return false;
  }
  return true;
}

template <typename T>
T* elements(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

// x [rows, cols] and weight [cols] in, y [rows, cols] out, f32, compact, host memory; anything else: nullopt.
inline std::optional<Rmsnorm> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& x = call.inputs[0];
  const DLTensor& weight = call.inputs[1];
  const DLTensor& y = call.outputs[0];
  if (!is_compact_host_f32(x, 2) || !is_compact_host_f32(weight, 1) || !is_compact_host_f32(y, 2)) {
    return std::nullopt;
  }
  if (weight.shape[0] != x.shape[1] || y.shape[0] != x.shape[0] || y.shape[1] != x.shape[1]) return std::nullopt;
  return Rmsnorm{elements<const float>(x), elements<const float>(weight), elements<float>(y), x.shape[0],
                 x.shape[1], static_cast<float>(kwb_scalar_or(&call, "eps", 1e-6))};
}

// Plain two-pass RMSNorm of every row into `out` (laid out like y), in double accumulation.
inline void rmsnorm(const Rmsnorm& p, float* out) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* x = p.x + r * p.cols;
    float* y = out + r * p.cols;
    double sum = 0.0;
    for (int64_t c = 0; c < p.cols; ++c) sum += static_cast<double>(x[c]) * x[c];
    const double inv_rms = 1.0 / std::sqrt(sum / static_cast<double>(p.cols) + p.eps);
    for (int64_t c = 0; c < p.cols; ++c) y[c] = static_cast<float>(x[c] * inv_rms * p.weight[c]);
  }
}

}  // namespace corpus
