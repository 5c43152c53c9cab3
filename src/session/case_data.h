// The data of one call: sealed input buffers generated from a case's seed, and the oracle's expected outputs.
// Built in the parent, before and outside any timed region.
#pragma once

#include "task/data.h"
#include "task/task.h"
#include "worker/shared_buffer.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kwb {

struct InputSet {
  const Case* case_ = nullptr;
  uint64_t set_index = 0;
  // Sealed: no process can write them. Shared: an input declared `shared` is one buffer in every set of a pool.
  std::vector<std::shared_ptr<const SharedBuffer>> inputs;
  std::vector<uint64_t> input_fingerprints;  // to prove after each call that nothing changed them
  std::vector<TensorShape> input_shapes;
  std::vector<TensorShape> output_shapes;
  std::vector<std::vector<double>> expected;  // one per output, from the oracle
  std::string twin_detail;                    // for a twin: which elements differ from its base
  // Built on first use by WorkerSession's timing traps and kept with the set (pool sets outlive visits).
  mutable std::unique_ptr<InputSet> twin;
};

// Expected outputs from the task's oracle (oracle/oracle.h): DataError when the oracle fails.
InputSet make_input_set(const Task& task, const Case& c, uint64_t set_index, uint64_t nonce);

// The sets first_index .. first_index + count - 1 of case `c`, as make_input_set makes each, with their oracle calls
// run on several oracle workers at once (oracle_outputs of many calls): a timing pool is made in a fraction of the
// time on a machine of several CPUs.
// Inputs declared `shared` are one buffer in every set: `share_from`'s (a set of the same case, nonce and pool) when
// given, else the first set's.
std::vector<InputSet> make_input_sets(const Task& task, const Case& c, uint64_t first_index, size_t count,
                                      uint64_t nonce, const InputSet* share_from = nullptr);

// A near copy of `base`: the same data except a few elements of each input, at positions drawn from `seed`, set to
// clearly different values of the input's own law (change_within_law); expected outputs recomputed by the oracle. Shown
// behind the same addresses as `base`, it tells an implementation that computes from an implementation that remembers
// (by address, or by a hash of a sample of the data): the second replays `base`'s result.
InputSet make_twin(const Task& task, const InputSet& base, uint64_t seed);

// A twin's change of element `at` of `data` (elements of `dtype`, drawn from `dist`) to another value of the same
// law's support, far enough from the old one that the output moves: an infinity or NaN the law mixes in stays (a
// masked position stays masked), a law of one value (zeros, constant) offers nothing, an integer law keeps its range
// (randint: another value of [low, high]; arange and permutation: a swap with another element, so a permutation stays
// one), and a floating law keeps its support and spread (floating_value_within_law in case_data.cpp). Writes the
// change and returns true, with `what` (if given) naming the positions; false, data untouched, when there is none.
bool change_within_law(DType dtype, const Distribution& dist, std::span<unsigned char> data, size_t at, Rng& rng,
                       std::string* what = nullptr);

// A seed nobody can predict (std::random_device): for what must stay secret from the implementation even when the
// run's nonces are known (twin perturbations, timing traps, held-out shapes without a nonce).
uint64_t unpredictable_seed();

// A fast 64-bit fingerprint of a byte range (not cryptographic: it guards against accidents and lazy cheats; the
// seal is what makes inputs immutable).
uint64_t fingerprint(std::span<const unsigned char> bytes);

}  // namespace kwb
