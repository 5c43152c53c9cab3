#include "session/case_data.h"

#include "oracle/oracle.h"
#include "task/data.h"
#include "util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

namespace kwb {

uint64_t unpredictable_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

uint64_t fingerprint(std::span<const unsigned char> bytes) {
  // Four independent multiply-xorshift lanes over 8-byte words, each its own variable so that their dependency
  // chains overlap: 75 us per MiB here, against 126 us when the lanes were an array indexed by i & 3.
  uint64_t lanes[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
  uint64_t l0 = lanes[0], l1 = lanes[1], l2 = lanes[2], l3 = lanes[3];
  auto step = [](uint64_t l, uint64_t w) {
    l = (l ^ w) * 0x100000001B3ull;
    return l ^ (l >> 29);
  };
  const size_t words = bytes.size() / 8;
  size_t i = 0;
  for (; i + 4 <= words; i += 4) {
    uint64_t w[4];
    std::memcpy(w, bytes.data() + 8 * i, sizeof w);
    l0 = step(l0, w[0]);
    l1 = step(l1, w[1]);
    l2 = step(l2, w[2]);
    l3 = step(l3, w[3]);
  }
  for (; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + 8 * i, 8);
    l0 = step(l0, w);
  }
  lanes[0] = l0, lanes[1] = l1, lanes[2] = l2, lanes[3] = l3;
  uint64_t h = bytes.size();
  for (size_t b = words * 8; b < bytes.size(); ++b) h = (h ^ bytes[b]) * 0x100000001B3ull;
  for (uint64_t l : lanes) h = mix_seed(h, l);
  return h;
}

namespace {

// The oracle's outputs for `set`'s inputs, and the output shapes they must have.
void compute_expected(const Task& task, InputSet& set) {
  const Case& c = *set.case_;
  OracleCall call;
  call.case_ = &c;
  for (const SharedBuffer& in : set.inputs) call.inputs.push_back(in.data());
  call.input_shapes = set.input_shapes;
  for (const TensorSpec& out : task.signature.outputs) call.output_shapes.push_back(resolve_shape(out, c));
  call.scalars = resolve_scalars(task.signature, c);
  set.expected = oracle_outputs(task, call);
  set.output_shapes = std::move(call.output_shapes);
}

}  // namespace

InputSet make_input_set(const Task& task, const Case& c, uint64_t set_index, uint64_t nonce) {
  InputSet set;
  set.case_ = &c;
  set.set_index = set_index;
  for (size_t i = 0; i < task.signature.inputs.size(); ++i) {
    const TensorSpec& spec = task.signature.inputs[i];
    TensorShape shape = resolve_shape(spec, c);
    SharedBuffer buf(fmt::format("kwb-in-{}", spec.name), shape.elements() * dtype_size(spec.dtype));
    const Distribution& dist = spec.distribution ? *spec.distribution : c.data;
    fill_tensor(dist, spec.dtype, buf.data(), input_seed(c, i, set_index, nonce));
    buf.seal();
    set.input_fingerprints.push_back(fingerprint(std::as_const(buf).data()));
    set.input_shapes.push_back(shape);
    set.inputs.push_back(std::move(buf));
  }
  compute_expected(task, set);
  return set;
}

InputSet make_twin(const Task& task, const InputSet& base, uint64_t seed) {
  InputSet twin;
  twin.case_ = base.case_;
  twin.set_index = base.set_index;
  twin.input_shapes = base.input_shapes;
  Rng rng(seed);
  std::vector<std::string> changed;
  for (size_t i = 0; i < base.inputs.size(); ++i) {
    const TensorSpec& spec = task.signature.inputs[i];
    const size_t width = dtype_size(spec.dtype);
    const auto from = base.inputs[i].data();
    SharedBuffer buf(fmt::format("kwb-twin-{}", spec.name), from.size());
    auto to = buf.data();
    std::memcpy(to.data(), from.data(), from.size());
    // One element per 64 Ki, at least one and at most four: enough that a replayed output is wrong somewhere,
    // few enough that a sample of the data almost surely misses every change.
    const size_t n = from.size() / width;
    const size_t count = n == 0 ? 0 : std::min<size_t>(4, 1 + n / 65536);
    for (size_t k = 0; k < count; ++k) {
      const size_t at = static_cast<size_t>(rng.next() % n);
      // -2x (or 1 for a zero) is far from x at any scale and keeps the magnitude of the data; -x/2 where -2x would
      // overflow the dtype (a 16-bit one, near its largest values), so that the twin stays finite.
      const double v = load_element(spec.dtype, to.data(), at);
      store_element(spec.dtype, to.data(), at, v == 0.0 ? 1.0 : -2.0 * v);
      if (std::isinf(load_element(spec.dtype, to.data(), at))) store_element(spec.dtype, to.data(), at, -0.5 * v);
      changed.push_back(fmt::format("{}[{}]", spec.name, at));
    }
    buf.seal();
    twin.input_fingerprints.push_back(fingerprint(std::as_const(buf).data()));
    twin.inputs.push_back(std::move(buf));
  }
  twin.twin_detail = fmt::format("a twin of input set {} with {} changed", base.set_index, fmt::join(changed, ", "));
  compute_expected(task, twin);
  return twin;
}

}  // namespace kwb
