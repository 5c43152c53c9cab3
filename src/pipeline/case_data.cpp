#include "pipeline/case_data.h"

#include "oracle/oracle.h"
#include "task/data.h"
#include "util/error.h"

#include <fmt/format.h>

#include <cstring>
#include <utility>

namespace kwb {

uint64_t fingerprint(std::span<const unsigned char> bytes) {
  // Four independent multiply-xorshift lanes over 8-byte words keep this near memory speed.
  uint64_t lanes[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
  const size_t words = bytes.size() / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + 8 * i, 8);
    uint64_t& l = lanes[i & 3];
    l = (l ^ w) * 0x100000001B3ull;
    l ^= l >> 29;
  }
  uint64_t h = bytes.size();
  for (size_t i = words * 8; i < bytes.size(); ++i) h = (h ^ bytes[i]) * 0x100000001B3ull;
  for (uint64_t l : lanes) h = mix_seed(h, l);
  return h;
}

InputSet make_input_set(const Task& task, const Case& c, uint64_t set_index, uint64_t nonce) {
  const OracleFn* oracle = find_oracle(task.oracle);
  if (oracle == nullptr) {
    throw DataError(fmt::format("{}: oracle '{}' is not known to kwb (known: {})", task.manifest.string(),
                                task.oracle, fmt::join(oracle_names(), ", ")));
  }
  InputSet set;
  set.case_ = &c;
  set.set_index = set_index;
  std::vector<TensorView> views;
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
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    views.push_back({std::as_const(set.inputs[i]).data().data(), task.signature.inputs[i].dtype, set.input_shapes[i].dims});
  }
  const std::vector<double> scalars = resolve_scalars(task.signature, c);
  set.expected = (*oracle)(views, scalars);
  for (size_t i = 0; i < task.signature.outputs.size(); ++i) {
    TensorShape shape = resolve_shape(task.signature.outputs[i], c);
    if (i >= set.expected.size() || set.expected[i].size() != shape.elements()) {
      throw InternalError(fmt::format("oracle '{}' produced the wrong number of elements for output '{}'",
                                      task.oracle, task.signature.outputs[i].name));
    }
    set.output_shapes.push_back(shape);
  }
  return set;
}

}  // namespace kwb
