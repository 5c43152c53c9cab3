// RoPE (rotate-half pairs), baseline cpu implementation: written the way an eager framework runs it, one tensor
// operation at a time (HF transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb):
//
//   inv_freq = 1 / base^(2i / head_dim)                      [head_dim / 2]
//   angles   = pos (outer) inv_freq                          [n_tokens, head_dim / 2]
//   emb      = cat(angles, angles)                           [n_tokens, head_dim]: (t0 .. t_(h-1), t0 .. t_(h-1))
//   cos, sin = cos(emb), sin(emb)                            [n_tokens, head_dim] each: every angle twice
//   rot(x)   = cat(-x[h:], x[:h])                            "rotate_half"
//   out      = x * cos + rot(x) * sin                        broadcast over heads, three passes
//
// for q and then for k. Each step is its own pass (a noinline function) over a temporary allocated per call, like an
// eager framework's intermediate tensors; cos and sin are evaluated on the duplicated table (2 x 2 x n_tokens x
// head_dim / 2 libm calls where n_tokens x head_dim / 2 sincos would do). It is the "before" the fused reference
// (cpu/fused.cpp) is measured against. The arithmetic of each output is that of the definition: fl(fl(x_i c) +
// fl(-x_(i+h) s)), with a float32 angle (float)pos * inv_freq (task.toml derives what that costs at large positions).
#include <kwb/kernel.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

__attribute__((noinline)) void pass_inv_freq(float* inv_freq, int64_t half, int64_t head_dim, float base) {
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
}

__attribute__((noinline)) void pass_angles(const int32_t* pos, const float* inv_freq, float* angles, int64_t n_tokens,
                                           int64_t half) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) angles[t * half + i] = static_cast<float>(pos[t]) * inv_freq[i];
  }
}

// emb[t, :] = cat(angles[t, :], angles[t, :]).
__attribute__((noinline)) void pass_cat(const float* angles, float* emb, int64_t n_tokens, int64_t half) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      emb[t * 2 * half + i] = angles[t * half + i];
      emb[t * 2 * half + half + i] = angles[t * half + i];
    }
  }
}

__attribute__((noinline)) void pass_cos(const float* emb, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::cos(emb[i]);
}

__attribute__((noinline)) void pass_sin(const float* emb, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::sin(emb[i]);
}

// rot(x): every head (x1, x2) (halves) becomes (-x2, x1).
__attribute__((noinline)) void pass_rotate_half(const float* x, float* rot, int64_t rows, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < half; ++i) {
      rot[r * head_dim + i] = -x[r * head_dim + half + i];
      rot[r * head_dim + half + i] = x[r * head_dim + i];
    }
  }
}

// y[t, h, :] = x[t, h, :] * table[t, :]: the per-token table broadcast over the heads.
__attribute__((noinline)) void pass_mul_table(const float* x, const float* table, float* y, int64_t n_tokens,
                                              int64_t heads, int64_t head_dim) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t row = (t * heads + h) * head_dim;
      for (int64_t c = 0; c < head_dim; ++c) y[row + c] = x[row + c] * table[t * head_dim + c];
    }
  }
}

__attribute__((noinline)) void pass_add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// Uninitialized, like an eager framework's empty(): every element is written by the pass that produces it.
std::unique_ptr<float[]> temporary(int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
}

// out = x * cos + rot(x) * sin for one of q, k: three temporaries, four passes.
void apply(const float* x, const float* cos_t, const float* sin_t, float* out, int64_t n_tokens, int64_t heads,
           int64_t head_dim) {
  const int64_t n = n_tokens * heads * head_dim;
  const std::unique_ptr<float[]> rot = temporary(n);
  pass_rotate_half(x, rot.get(), n_tokens * heads, head_dim);
  const std::unique_ptr<float[]> x_cos = temporary(n);
  pass_mul_table(x, cos_t, x_cos.get(), n_tokens, heads, head_dim);
  const std::unique_ptr<float[]> rot_sin = temporary(n);
  pass_mul_table(rot.get(), sin_t, rot_sin.get(), n_tokens, heads, head_dim);
  pass_add(x_cos.get(), rot_sin.get(), out, n);
}

// The call's tensors, checked against the task signature: q [n_tokens, n_heads, head_dim], k [n_tokens,
// n_kv_heads, head_dim] f32, pos [n_tokens] i32; outputs shaped like q and k; compact row-major, host memory.
struct Rope {
  const float* q;
  const float* k;
  const int32_t* pos;
  float* q_out;
  float* k_out;
  int64_t n_tokens, n_heads, n_kv_heads, head_dim;
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

bool same_shape(const DLTensor& a, const DLTensor& b) {
  return a.shape[0] == b.shape[0] && a.shape[1] == b.shape[1] && a.shape[2] == b.shape[2];
}

std::optional<Rope> unpack(const kwb_call& call) {
  if (call.num_inputs != 3 || call.num_outputs != 2) return std::nullopt;
  const DLTensor& q = call.inputs[0];
  const DLTensor& k = call.inputs[1];
  const DLTensor& pos = call.inputs[2];
  const DLTensor& q_out = call.outputs[0];
  const DLTensor& k_out = call.outputs[1];
  if (!is_compact_host(q, 3, kDLFloat, 32) || !is_compact_host(k, 3, kDLFloat, 32) ||
      !is_compact_host(pos, 1, kDLInt, 32) || !is_compact_host(q_out, 3, kDLFloat, 32) ||
      !is_compact_host(k_out, 3, kDLFloat, 32)) {
    return std::nullopt;
  }
  if (!same_shape(q, q_out) || !same_shape(k, k_out) || k.shape[0] != q.shape[0] || pos.shape[0] != q.shape[0] ||
      k.shape[2] != q.shape[2] || q.shape[2] % 2 != 0) {
    return std::nullopt;
  }
  return Rope{elements<const float>(q), elements<const float>(k), elements<const int32_t>(pos),
              elements<float>(q_out), elements<float>(k_out), q.shape[0], q.shape[1], k.shape[1], q.shape[2]};
}

}  // namespace

// Returns 1 when the call does not match the task signature, 2 when a temporary cannot be allocated (an exception
// must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Rope> p = unpack(*call);
  if (!p) return 1;
  const float base = static_cast<float>(kwb_scalar_or(call, "base", 10000.0));
  const int64_t half = p->head_dim / 2;
  const int64_t table = p->n_tokens * p->head_dim;
  try {
    const std::unique_ptr<float[]> inv_freq = temporary(half);
    pass_inv_freq(inv_freq.get(), half, p->head_dim, base);

    const std::unique_ptr<float[]> angles = temporary(p->n_tokens * half);
    pass_angles(p->pos, inv_freq.get(), angles.get(), p->n_tokens, half);

    const std::unique_ptr<float[]> emb = temporary(table);
    pass_cat(angles.get(), emb.get(), p->n_tokens, half);

    const std::unique_ptr<float[]> cos_t = temporary(table);
    pass_cos(emb.get(), cos_t.get(), table);
    const std::unique_ptr<float[]> sin_t = temporary(table);
    pass_sin(emb.get(), sin_t.get(), table);

    apply(p->q, cos_t.get(), sin_t.get(), p->q_out, p->n_tokens, p->n_heads, p->head_dim);
    apply(p->k, cos_t.get(), sin_t.get(), p->k_out, p->n_tokens, p->n_kv_heads, p->head_dim);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
