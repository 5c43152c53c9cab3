// Decode attention on bfloat16, baseline cpu implementation: what an eager framework runs for bfloat16 tensors,
// the eight-kernel float32 composition of tasks/attention_decode/cpu/baseline.cpp between widening passes and a
// narrowing pass:
//
//   0. pass_widen      qf, kf, vf = float(q, k, v)              (three new float temporaries, the whole cache)
//   1. pass_qk         raw[h, t] = sum_i qf[h, i] * kf[t, g, i] (new n_heads*n_ctx temporary; g = h / group)
//   2. pass_scale      s = raw * scale                          (new n_heads*n_ctx temporary)
//   3. pass_row_max    m[h] = max_t s[h, t]                     (new n_heads temporary)
//   4. pass_sub_max    z = s - m, m broadcast                   (new n_heads*n_ctx temporary)
//   5. pass_exp        e = exp(z)                               (new n_heads*n_ctx temporary, libm expf per element)
//   6. pass_row_sum    l[h] = sum_t e[h, t]                     (new n_heads temporary, plain sequential float sum)
//   7. pass_normalize  p = e / l, l broadcast                   (new n_heads*n_ctx temporary)
//   8. pass_weighted   of[h, :] = sum_t p[h, t] * vf[t, g, :]   (new n_heads*head_dim float temporary)
//   9. pass_narrow     out = bf16(of)                           (into the output, rounded to nearest even)
//
// Each pass is its own non-inlined function with its own sweep over memory and every temporary is allocated on
// each call. All arithmetic is float32: bfloat16 is only the storage format, as in torch for bfloat16 tensors.
//
// Layout: q and out [n_heads, head_dim], k and v [n_ctx, n_kv_heads, head_dim] (token-major), bf16, compact
// row-major; n_heads = n_kv_heads * group.
#include <kwb/kernel.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

KWB_CANDIDATE_ABI

namespace {

// The float32 views the passes work on (widened copies; out is a float temporary).
struct Attention {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t n_heads;
  int64_t n_kv;
  int64_t n_ctx;
  int64_t d;
  float scale;
};

// bfloat16 is the upper half of a float32: widening is exact, a shift.
float from_bf16(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

// float32 to bfloat16, rounded to nearest, ties to even (as kwb's store_element and torch do); NaN stays NaN.
uint16_t to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if (f != f) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__attribute__((noinline)) void pass_widen(const uint16_t* x, float* xf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) xf[i] = from_bf16(x[i]);
}

__attribute__((noinline)) void pass_narrow(const float* xf, uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = to_bf16(xf[i]);
}

__attribute__((noinline)) void pass_qk(const Attention& a, float* raw) {
  const int64_t group = a.n_heads / a.n_kv;
  for (int64_t h = 0; h < a.n_heads; ++h) {
    const int64_t g = h / group;
    const float* qh = a.q + h * a.d;
    for (int64_t t = 0; t < a.n_ctx; ++t) {
      const float* kt = a.k + (t * a.n_kv + g) * a.d;
      float sum = 0.0f;
      for (int64_t i = 0; i < a.d; ++i) sum += qh[i] * kt[i];
      raw[h * a.n_ctx + t] = sum;
    }
  }
}

__attribute__((noinline)) void pass_scale(const float* raw, float scale, float* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) s[i] = raw[i] * scale;
}

__attribute__((noinline)) void pass_row_max(const float* s, float* m, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float v = s[r * cols];
    for (int64_t c = 1; c < cols; ++c) v = s[r * cols + c] > v ? s[r * cols + c] : v;
    m[r] = v;
  }
}

__attribute__((noinline)) void pass_sub_max(const float* s, const float* m, float* z, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) z[r * cols + c] = s[r * cols + c] - m[r];
  }
}

__attribute__((noinline)) void pass_exp(const float* z, float* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = std::exp(z[i]);
}

__attribute__((noinline)) void pass_row_sum(const float* e, float* l, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += e[r * cols + c];
    l[r] = sum;
  }
}

__attribute__((noinline)) void pass_normalize(const float* e, const float* l, float* p, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) p[r * cols + c] = e[r * cols + c] / l[r];
  }
}

__attribute__((noinline)) void pass_weighted(const Attention& a, const float* p) {
  const int64_t group = a.n_heads / a.n_kv;
  for (int64_t h = 0; h < a.n_heads; ++h) {
    const int64_t g = h / group;
    float* oh = a.out + h * a.d;
    for (int64_t i = 0; i < a.d; ++i) oh[i] = 0.0f;
    for (int64_t t = 0; t < a.n_ctx; ++t) {
      const float pt = p[h * a.n_ctx + t];
      const float* vt = a.v + (t * a.n_kv + g) * a.d;
      for (int64_t i = 0; i < a.d; ++i) oh[i] += pt * vt[i];
    }
  }
}

// Uninitialized, like an eager framework's empty(): every element is written by the pass that produces it.
std::unique_ptr<float[]> temporary(int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
}

// The call's bfloat16 tensors.
struct Call {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  uint16_t* out;
  int64_t n_heads;
  int64_t n_kv;
  int64_t n_ctx;
  int64_t d;
  float scale;
};

bool is_compact_host_bf16(const DLTensor& t, int32_t ndim) {
  if (t.device.device_type != kDLCPU || t.ndim != ndim) return false;
  if (t.dtype.code != kDLBfloat || t.dtype.bits != 16 || t.dtype.lanes != 1) return false;
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

// The call's tensors, checked against the task signature: q [n_heads, d], k and v [n_ctx, n_kv, d] in, out
// [n_heads, d] out, bf16, compact row-major, host memory; n_heads a multiple of n_kv. Anything else is refused.
std::optional<Call> unpack(const kwb_call& call) {
  if (call.num_inputs != 3 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& q = call.inputs[0];
  const DLTensor& k = call.inputs[1];
  const DLTensor& v = call.inputs[2];
  const DLTensor& out = call.outputs[0];
  if (!is_compact_host_bf16(q, 2) || !is_compact_host_bf16(k, 3) || !is_compact_host_bf16(v, 3) ||
      !is_compact_host_bf16(out, 2)) {
    return std::nullopt;
  }
  const int64_t n_heads = q.shape[0], d = q.shape[1], n_ctx = k.shape[0], n_kv = k.shape[1];
  if (k.shape[2] != d || v.shape[0] != n_ctx || v.shape[1] != n_kv || v.shape[2] != d || out.shape[0] != n_heads ||
      out.shape[1] != d) {
    return std::nullopt;
  }
  if (n_ctx < 1 || n_kv < 1 || n_heads % n_kv != 0) return std::nullopt;
  const float scale = static_cast<float>(kwb_scalar_or(&call, "scale", 0.08838834764831845));
  return Call{elements<const uint16_t>(q), elements<const uint16_t>(k), elements<const uint16_t>(v),
              elements<uint16_t>(out), n_heads, n_kv, n_ctx, d, scale};
}

}  // namespace

// Returns 1 when the call does not match the task signature (or the context is empty), 2 when a temporary cannot be
// allocated (an exception must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Call> c = unpack(*call);
  if (!c) return 1;
  const int64_t n = c->n_heads * c->n_ctx;
  const int64_t nq = c->n_heads * c->d;
  const int64_t nkv = c->n_ctx * c->n_kv * c->d;
  try {
    const std::unique_ptr<float[]> qf = temporary(nq);
    pass_widen(c->q, qf.get(), nq);
    const std::unique_ptr<float[]> kf = temporary(nkv);
    pass_widen(c->k, kf.get(), nkv);
    const std::unique_ptr<float[]> vf = temporary(nkv);
    pass_widen(c->v, vf.get(), nkv);
    const std::unique_ptr<float[]> of = temporary(nq);
    const Attention a{qf.get(), kf.get(), vf.get(), of.get(), c->n_heads, c->n_kv, c->n_ctx, c->d, c->scale};

    const std::unique_ptr<float[]> raw = temporary(n);
    pass_qk(a, raw.get());

    const std::unique_ptr<float[]> s = temporary(n);
    pass_scale(raw.get(), a.scale, s.get(), n);

    const std::unique_ptr<float[]> m = temporary(a.n_heads);
    pass_row_max(s.get(), m.get(), a.n_heads, a.n_ctx);

    const std::unique_ptr<float[]> z = temporary(n);
    pass_sub_max(s.get(), m.get(), z.get(), a.n_heads, a.n_ctx);

    const std::unique_ptr<float[]> e = temporary(n);
    pass_exp(z.get(), e.get(), n);

    const std::unique_ptr<float[]> l = temporary(a.n_heads);
    pass_row_sum(e.get(), l.get(), a.n_heads, a.n_ctx);

    const std::unique_ptr<float[]> p = temporary(n);
    pass_normalize(e.get(), l.get(), p.get(), a.n_heads, a.n_ctx);

    pass_weighted(a, p.get());
    pass_narrow(of.get(), c->out, nq);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
