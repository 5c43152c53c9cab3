// The data of one call: sealed input buffers generated from a case's seed, and the oracle's expected outputs.
// Built in the parent, before and outside any timed region.
#pragma once

#include "task/task.h"
#include "worker/shared_buffer.h"

#include <cstdint>
#include <vector>

namespace kwb {

struct InputSet {
  const Case* case_ = nullptr;
  uint64_t set_index = 0;
  std::vector<SharedBuffer> inputs;               // sealed: no process can write them
  std::vector<uint64_t> input_fingerprints;       // to prove after each call that nothing changed them
  std::vector<TensorShape> input_shapes;
  std::vector<TensorShape> output_shapes;
  std::vector<std::vector<double>> expected;      // one per output, from the oracle
};

// Throws DataError when the task names an oracle kwb does not have.
InputSet make_input_set(const Task& task, const Case& c, uint64_t set_index, uint64_t nonce);

// A fast 64-bit fingerprint of a byte range (not cryptographic: it guards against accidents and lazy cheats; the
// seal is what makes inputs immutable).
uint64_t fingerprint(std::span<const unsigned char> bytes);

}  // namespace kwb
