#include "session/case_data.h"

#include "oracle/oracle.h"
#include "task/data.h"
#include "util/error.h"
#include "util/parallel.h"
#include "worker/worker_process.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
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

// The oracle call that gives `set`'s expected outputs.
OracleCall oracle_call_for(const Task& task, const InputSet& set, bool cacheable) {
  const Case& c = *set.case_;
  OracleCall call;
  call.case_ = &c;
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    call.inputs.push_back(set.inputs[i]->data());
    // A shared input is the same buffer in every set of its pool: the oracle's runner converts it once.
    call.input_owners.push_back(task.signature.inputs[i].shared ? std::shared_ptr<const void>(set.inputs[i]) : nullptr);
  }
  call.input_shapes = set.input_shapes;
  for (const TensorSpec& out : task.signature.outputs) call.output_shapes.push_back(resolve_shape(out, c));
  call.scalars = resolve_scalars(task.signature, c);
  call.cacheable = cacheable;
  return call;
}

// The oracle's outputs for `set`'s inputs, and the output shapes they must have.
void compute_expected(const Task& task, InputSet& set, bool cacheable) {
  OracleCall call = oracle_call_for(task, set, cacheable);
  set.expected = oracle_outputs(task, call);
  set.output_shapes = std::move(call.output_shapes);
}

// Whether `v` is the law's special value (a mask's -inf, a NaN to propagate): a twin leaves such a position alone.
bool is_special(const Distribution& dist, double v) {
  if (dist.special_fraction <= 0.0) return false;
  return std::isnan(dist.special_value) ? std::isnan(v) : v == dist.special_value;
}

// Another value of a floating law's support for an element holding `v`, far enough from it that the output moves
// and no farther from the law's centre than `v` or one scale: normal mirrors about its mean (the same density; a
// value within half a scale of the mean moves by one scale instead), uniform moves by half its width, wrapping
// inside [low, high], log_uniform flips the sign (its magnitudes are the law's, both signs are drawn). None for a
// law of one value (zeros, constant).
std::optional<double> floating_value_within_law(const Distribution& dist, double v) {
  switch (dist.kind) {
    case DistributionKind::normal: {
      const double d = v - dist.mean;
      if (std::abs(d) >= 0.5 * dist.scale) return dist.mean - d;
      return v + (d >= 0.0 ? -dist.scale : dist.scale);
    }
    case DistributionKind::uniform: {
      const double half = 0.5 * (dist.high - dist.low);
      if (!(half > 0.0)) return std::nullopt;
      return v < dist.low + half ? v + half : v - half;
    }
    case DistributionKind::log_uniform:
      return -v;
    default:
      return std::nullopt;  // zeros, constant: one value; the integer laws are change_within_law's
  }
}

}  // namespace

bool change_within_law(DType dtype, const Distribution& dist, std::span<unsigned char> data, size_t at, Rng& rng,
                       std::string* what) {
  const DTypeInfo& t = dtype_info(dtype);
  const size_t n = data.size() / dtype_size(dtype);
  if (at >= n) return false;
  const double v = load_element(dtype, data.data(), at);
  if (is_special(dist, v)) return false;  // a masked position stays masked
  auto describe = [&](std::string text) {
    if (what != nullptr) *what = std::move(text);
    return true;
  };
  if (dist.kind == DistributionKind::arange || dist.kind == DistributionKind::permutation) {
    // A swap keeps the multiset: a permutation stays a permutation, an arange keeps its values.
    if (n < 2) return false;
    const size_t other = (at + 1 + static_cast<size_t>(rng.next() % (n - 1))) % n;
    const double w = load_element(dtype, data.data(), other);
    if (w == v || is_special(dist, w)) return false;
    store_element(dtype, data.data(), at, w);
    store_element(dtype, data.data(), other, v);
    return describe(fmt::format("[{}] and [{}] (swapped)", at, other));
  }
  std::optional<double> w;
  if (dist.kind == DistributionKind::randint) {
    const uint64_t span = static_cast<uint64_t>(dist.high - dist.low) + 1;
    if (span < 2 || v < dist.low || v > dist.high) return false;  // a one-value range
    const uint64_t offset = static_cast<uint64_t>(v - dist.low);
    w = dist.low + static_cast<double>((offset + 1 + rng.next() % (span - 1)) % span);
  } else if (t.kind == DTypeKind::floating) {
    w = floating_value_within_law(dist, v);
  }
  // Integer or boolean data under zeros or constant: one value, nothing to change it to.
  if (!w) return false;
  store_element(dtype, data.data(), at, *w);
  // What the dtype made of it: a value it rounds back to `v`, or out of its range, is no change.
  const double stored = load_element(dtype, data.data(), at);
  if (stored == v || !std::isfinite(stored)) {
    store_element(dtype, data.data(), at, v);
    return false;
  }
  return describe(fmt::format("[{}]", at));
}

namespace {

// A set's inputs, drawn and sealed; its expected outputs are still to come. An input declared `shared` is taken
// from `share_from` when given (the same buffer: one copy of it in a pool), else drawn as this set's own.
InputSet make_inputs(const Task& task, const Case& c, uint64_t set_index, uint64_t nonce,
                     const InputSet* share_from = nullptr) {
  InputSet set;
  set.case_ = &c;
  set.set_index = set_index;
  for (size_t i = 0; i < task.signature.inputs.size(); ++i) {
    const TensorSpec& spec = task.signature.inputs[i];
    if (spec.shared && share_from != nullptr) {
      set.input_fingerprints.push_back(share_from->input_fingerprints.at(i));
      set.input_shapes.push_back(share_from->input_shapes.at(i));
      set.inputs.push_back(share_from->inputs.at(i));
      continue;
    }
    TensorShape shape = resolve_shape(spec, c);
    SharedBuffer buf(fmt::format("kwb-in-{}", spec.name), shape.elements() * dtype_size(spec.dtype));
    const Distribution& dist = input_law(spec, c);
    // Published shapes were checked when the task loaded; a shape kwb made up (held out) is checked here.
    if (const std::string why = distribution_misfit(dist, spec.dtype, shape.elements()); !why.empty()) {
      std::vector<std::string> dims;
      for (const auto& [name, value] : c.dims) dims.push_back(fmt::format("{} = {}", name, value));
      throw DataError(
          fmt::format("{}: case '{}', input '{}' at {}: {}; change the case's distribution or "
                      "constrain the dims ([dims])",
                      task.manifest.string(), c.name, spec.name, fmt::join(dims, ", "), why));
    }
    fill_tensor(dist, spec.dtype, buf.data(), input_seed(c, i, set_index, nonce));
    buf.seal();
    set.input_fingerprints.push_back(fingerprint(std::as_const(buf).data()));
    set.input_shapes.push_back(shape);
    set.inputs.push_back(std::make_shared<const SharedBuffer>(std::move(buf)));
  }
  return set;
}

}  // namespace

InputSet make_input_set(const Task& task, const Case& c, uint64_t set_index, uint64_t nonce) {
  InputSet set = make_inputs(task, c, set_index, nonce);
  compute_expected(task, set, nonce == 0);  // the published seeds' data recurs; a fresh nonce's never does
  return set;
}

std::vector<InputSet> make_input_sets(const Task& task, const Case& c, uint64_t first_index, size_t count,
                                      uint64_t nonce, const InputSet* share_from) {
  // The inputs first, on as many threads as the oracle gets workers (drawing a large input is a pseudo-random
  // stream and a dtype conversion per element: 2-3 s a set for a 250 MiB f16 table here, one CPU idle when drawn
  // in turn). Each set comes from its own seeds, so the data are the same in any order; the earliest set's error
  // is the one thrown, as a loop would have thrown it.
  std::vector<InputSet> sets(count);
  // With a shared input and nothing to share it from, the first set draws it and the others take it from there.
  const bool shares = std::any_of(task.signature.inputs.begin(), task.signature.inputs.end(),
                                  [](const TensorSpec& s) { return s.shared; });
  size_t first = 0;
  if (shares && share_from == nullptr && count > 0) {
    sets[0] = make_inputs(task, c, first_index, nonce);
    share_from = &sets[0];
    first = 1;
  }
  const size_t threads = std::min<size_t>({count - first, static_cast<size_t>(std::max(1, cpus_kwb_may_use())), 8});
  for_each_index(count - first, threads, [&](size_t, size_t k) {
    sets[first + k] = make_inputs(task, c, first_index + first + k, nonce, share_from);
  });
  std::vector<OracleCall> calls;
  calls.reserve(sets.size());
  for (InputSet& set : sets) calls.push_back(oracle_call_for(task, set, nonce == 0));
  std::vector<std::vector<std::vector<double>>> expected = oracle_outputs(task, calls);
  for (size_t i = 0; i < count; ++i) {
    sets[i].expected = std::move(expected[i]);
    sets[i].output_shapes = std::move(calls[i].output_shapes);
  }
  return sets;
}

InputSet make_twin(const Task& task, const InputSet& base, uint64_t seed) {
  InputSet twin;
  twin.case_ = base.case_;
  twin.set_index = base.set_index;
  twin.input_shapes = base.input_shapes;
  twin.inputs.resize(base.inputs.size());
  twin.input_fingerprints.resize(base.inputs.size());
  Rng rng(seed);
  std::vector<std::string> changed;
  auto changed_copy = [&](size_t i) {
    const TensorSpec& spec = task.signature.inputs[i];
    const size_t width = dtype_size(spec.dtype);
    const auto from = base.inputs[i]->data();
    SharedBuffer buf(fmt::format("kwb-twin-{}", spec.name), from.size());
    auto to = buf.data();
    std::memcpy(to.data(), from.data(), from.size());
    // One element per 64 Ki, at least one and at most four: enough that a replayed output is wrong somewhere,
    // few enough that a sample of the data almost surely misses every change. Each change stays within the input's
    // law (change_within_law); a position it cannot change (a masked one) gives way to another, up to 16 tries.
    const size_t n = from.size() / width;
    const size_t count = n == 0 ? 0 : std::min<size_t>(4, 1 + n / 65536);
    const Distribution& dist = input_law(spec, *base.case_);
    for (size_t k = 0; k < count; ++k) {
      for (int attempt = 0; attempt < 16; ++attempt) {
        const size_t at = static_cast<size_t>(rng.next() % n);
        std::string what;
        if (change_within_law(spec.dtype, dist, to, at, rng, &what)) {
          changed.push_back(spec.name + what);
          break;
        }
      }
    }
    buf.seal();
    twin.input_fingerprints[i] = fingerprint(std::as_const(buf).data());
    twin.inputs[i] = std::make_shared<const SharedBuffer>(std::move(buf));
  };
  // The inputs a pool varies first. A `shared` input (the same in every call, a model's weights) stays the base's
  // own buffer when another input changed: a replayed output is wrong already, and the 250 MiB table is neither
  // copied nor converted again for the oracle. Only when nothing else could change does a shared input change.
  for (size_t i = 0; i < base.inputs.size(); ++i) {
    if (!task.signature.inputs[i].shared) changed_copy(i);
  }
  const bool varied = !changed.empty();
  for (size_t i = 0; i < base.inputs.size(); ++i) {
    if (!task.signature.inputs[i].shared) continue;
    if (varied) {
      twin.inputs[i] = base.inputs[i];
      twin.input_fingerprints[i] = base.input_fingerprints[i];
    } else {
      changed_copy(i);
    }
  }
  twin.twin_detail =
      changed.empty() ? fmt::format(
                            "a twin of input set {} identical to it (no input's law has another value "
                            "to offer at the positions drawn)",
                            base.set_index)
                      : fmt::format("a twin of input set {} with {} changed", base.set_index, fmt::join(changed, ", "));
  compute_expected(task, twin, false);  // drawn from a secret seed: never seen again
  return twin;
}

}  // namespace kwb
