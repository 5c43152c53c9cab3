// Adversarial candidate (gemm). Class: predicted timed data (issue 39, item 1; the "carry the answers" cheat).
// Cheat: carries a copy of kwb's input generator. Timed inputs used to be a pure function of the task, the case and
// a small public seed (compare's default --seed 1, an experiment's seeds derived from replicate and attempt). In its
// first call of the timed case (an untimed warm-up) it regenerates the first element of input `a` of every pool set
// under every small seed a person or an experiment would use, finds which one it is being fed, then builds every
// pool set of that seed and computes its output with the honest kernel below. Each later call compares its inputs
// in full with the set it recognizes and copies the stored answer: every output is exact (twins and sets it does
// not know go to the honest kernel), and a copy is far cheaper than the product (384^3 in the shipped task, 160^3 in
// the tests' copy of it: the attack takes its shape from the call it is fed).
// Defense: the data nonce comes from a secret drawn at run time (util/data_secret.h), never from --seed, and each
// tensor's seed is a keyed hash of it: no table can be built, so every call goes to the honest kernel and the
// comparison against the kernel it wraps reads no gain.
// Expected: compare/validate against data_prediction_control.cpp (the same kernel without the table) finds no
// improvement (no PASS at a 10% bar, no KEEP_CANDIDATE); before the defense it read +96.9% (32x) in compare and
// KEEP_CANDIDATE +96.7% in validate --seed 3 at 384^3; +90.9% (11x) in compare at the tests' 160^3.
#include <kwb/kernel.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

KWB_CANDIDATE_ABI

namespace {

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
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

std::optional<Gemm> unpack(const kwb_call& call) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return std::nullopt;
  const DLTensor& a = call.inputs[0];
  const DLTensor& b = call.inputs[1];
  const DLTensor& c = call.outputs[0];
  if (!is_compact_host_f32(a, 2) || !is_compact_host_f32(b, 2) || !is_compact_host_f32(c, 2)) return std::nullopt;
  if (b.shape[0] != a.shape[1] || c.shape[0] != a.shape[0] || c.shape[1] != b.shape[1]) return std::nullopt;
  auto at = [](const DLTensor& t) { return static_cast<char*>(t.data) + t.byte_offset; };
  return Gemm{reinterpret_cast<const float*>(at(a)), reinterpret_cast<const float*>(at(b)),
              reinterpret_cast<float*>(at(c)), a.shape[0], a.shape[1], b.shape[1]};
}

// The honest kernel: i-p-j order, the inner loop over a contiguous row of B (vectorized by the compiler).
void gemm(const Gemm& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    float* c = g.c + i * g.n;
    std::fill_n(c, g.n, 0.0f);
    for (int64_t p = 0; p < g.k; ++p) {
      const float av = g.a[i * g.k + p];
      const float* b = g.b + p * g.n;
      for (int64_t j = 0; j < g.n; ++j) c[j] += av * b[j];
    }
  }
}

#ifndef KWB_HONEST_ONLY

// ---- kwb's published generator, copied (src/util/seed.h, src/task/data.cpp) -------------------------------------

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ std::rotl(b, 23) ^ 0xD1B54A32D192ED03ull;
  splitmix64(x);
  return splitmix64(x);
}

struct Xoshiro {
  uint64_t s[4];
  explicit Xoshiro(uint64_t seed) {
    for (uint64_t& w : s) w = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = std::rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = std::rotl(s[3], 45);
    return result;
  }
  float uniform(double low, double high) {
    return static_cast<float>(low + (high - low) * (static_cast<double>(next() >> 11) * 0x1.0p-53));
  }
};

// The gemm task's timed "square" case: seed 501, a and b uniform on [0.5, 1.5), at the shape of the first call.
constexpr uint64_t k_case_seed = 501;
constexpr uint64_t k_first_set = 1000;  // the timing pool's first set index (src/pipeline/compare.cpp)
constexpr uint64_t k_max_sets = 48;

uint64_t input_seed(size_t input, uint64_t set, uint64_t nonce) {
  return mix_seed(mix_seed(mix_seed(k_case_seed, input + 1), set + 1), nonce);
}

void fill(std::vector<float>& out, uint64_t seed) {
  Xoshiro rng(seed);
  for (float& v : out) v = rng.uniform(0.5, 1.5);
}

// The nonces small public seeds gave: compare's (seed ^ 0x7153D47A) and validate's (mix_seed(seed, 0x71)).
std::vector<uint64_t> candidate_nonces() {
  std::vector<uint64_t> out;
  for (uint64_t seed = 0; seed <= 16; ++seed) {
    out.push_back(seed ^ 0x7153D47Aull);
    out.push_back(mix_seed(seed, 0x71));
  }
  return out;
}

struct Table {
  bool tried = false;
  int64_t m = 0, k = 0, n = 0;  // the shape it was built for
  std::vector<std::vector<float>> a, b, c;  // by pool position
};

Table g_table;

void build_table(const Gemm& g) {
  g_table.tried = true;
  g_table.m = g.m;
  g_table.k = g.k;
  g_table.n = g.n;
  for (uint64_t nonce : candidate_nonces()) {
    for (uint64_t set = 0; set < k_max_sets; ++set) {
      Xoshiro rng(input_seed(0, k_first_set + set, nonce));
      if (rng.uniform(0.5, 1.5) != g.a[0]) continue;
      // Found the nonce: build the whole pool of that nonce and its answers (under a second here, in an untimed call).
      for (uint64_t s = 0; s < k_max_sets; ++s) {
        std::vector<float> a(static_cast<size_t>(g.m * g.k)), b(static_cast<size_t>(g.k * g.n)),
            c(static_cast<size_t>(g.m * g.n));
        fill(a, input_seed(0, k_first_set + s, nonce));
        fill(b, input_seed(1, k_first_set + s, nonce));
        gemm(Gemm{a.data(), b.data(), c.data(), g.m, g.k, g.n});
        g_table.a.push_back(std::move(a));
        g_table.b.push_back(std::move(b));
        g_table.c.push_back(std::move(c));
      }
      return;
    }
  }
}

bool answer_from_table(const Gemm& g) {
  if (!g_table.tried) build_table(g);
  if (g.m != g_table.m || g.k != g_table.k || g.n != g_table.n) return false;
  const auto floats = [](int64_t rows, int64_t cols) { return static_cast<size_t>(rows * cols) * sizeof(float); };
  for (size_t s = 0; s < g_table.a.size(); ++s) {
    if (g_table.a[s][0] != g.a[0]) continue;
    // A full comparison: a twin (one element changed) is not this set, and goes to the honest kernel.
    if (std::memcmp(g_table.a[s].data(), g.a, floats(g.m, g.k)) != 0 ||
        std::memcmp(g_table.b[s].data(), g.b, floats(g.k, g.n)) != 0) {
      return false;
    }
    std::memcpy(g.c, g_table.c[s].data(), floats(g.m, g.n));
    return true;
  }
  return false;
}

#endif

}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  const std::optional<Gemm> g = unpack(*call);
  if (!g) return 1;
#ifndef KWB_HONEST_ONLY
  if (answer_from_table(*g)) return 0;
#endif
  gemm(*g);
  return 0;
}
