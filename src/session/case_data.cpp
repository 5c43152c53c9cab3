#include "session/case_data.h"

#include "oracle/oracle.h"
#include "task/data.h"
#include "util/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

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

// A twin's change of integer data (an integer or boolean dtype, or an integer law on any dtype): it stays where the
// input's law puts its values, since such data is often an index or a position the operator requires to be valid
// (a permutation stays a permutation, a randint value stays in [low, high]): the change is a swap of two elements
// (arange, permutation), another value of the range (randint), or another value of the dtype (a constant or
// zeros: -2x, 1 for a zero, -x or 0, the first the dtype holds; a boolean flips). False for floating data, whose
// change is the caller's.
bool change_within_support(DType dtype, const Distribution& dist, std::span<unsigned char> data, size_t n, size_t at,
                           Rng& rng, std::vector<std::string>& changed, const std::string& name) {
  const DTypeInfo& t = dtype_info(dtype);
  const bool law_of_integers = dist.kind == DistributionKind::randint || dist.kind == DistributionKind::arange ||
                               dist.kind == DistributionKind::permutation;
  if (t.kind == DTypeKind::floating && !law_of_integers) return false;
  const double v = load_element(dtype, data.data(), at);
  if (dist.kind == DistributionKind::arange || dist.kind == DistributionKind::permutation) {
    if (n < 2) return true;  // nothing to swap with: no change
    const size_t other = (at + 1 + static_cast<size_t>(rng.next() % (n - 1))) % n;
    store_element(dtype, data.data(), at, load_element(dtype, data.data(), other));
    store_element(dtype, data.data(), other, v);
    changed.push_back(fmt::format("{}[{}] and {}[{}] (swapped)", name, at, name, other));
    return true;
  }
  if (dist.kind == DistributionKind::randint) {
    const uint64_t span = static_cast<uint64_t>(dist.high - dist.low) + 1;
    if (span < 2 || v < dist.low || v > dist.high) return true;  // a one-value range, or a special value: keep it
    const uint64_t offset = static_cast<uint64_t>(v - dist.low);
    store_element(dtype, data.data(), at,
                  dist.low + static_cast<double>((offset + 1 + rng.next() % (span - 1)) % span));
  } else if (t.kind == DTypeKind::boolean) {
    store_element(dtype, data.data(), at, v == 0.0 ? 1.0 : 0.0);
  } else {
    for (double w : {-2.0 * v, v == 0.0 ? 1.0 : -v, 0.0}) {
      if (w != v && w >= t.lowest && w <= t.highest) {
        store_element(dtype, data.data(), at, w);
        break;
      }
    }
  }
  changed.push_back(fmt::format("{}[{}]", name, at));
  return true;
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
    const Distribution& dist = input_law(spec, c);
    // Published shapes were checked when the task loaded; a shape kwb made up (held out) is checked here.
    if (const std::string why = distribution_misfit(dist, spec.dtype, shape.elements()); !why.empty()) {
      std::vector<std::string> dims;
      for (const auto& [name, value] : c.dims) dims.push_back(fmt::format("{} = {}", name, value));
      throw DataError(fmt::format("{}: case '{}', input '{}' at {}: {}; change the case's distribution or "
                                  "constrain the dims ([dims])",
                                  task.manifest.string(), c.name, spec.name, fmt::join(dims, ", "), why));
    }
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
    const Distribution& dist = input_law(spec, *base.case_);
    for (size_t k = 0; k < count; ++k) {
      const size_t at = static_cast<size_t>(rng.next() % n);
      if (change_within_support(spec.dtype, dist, to, n, at, rng, changed, spec.name)) continue;
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
