// The task's oracle: a reference implementation written by the task's author against include/kwb/oracle.h, built
// for accuracy (builder.h, build_oracle) and run in a sandboxed kwb-worker of its own, never in this process
// and never in a worker that loads a candidate. Its outputs reach the parent only as data (doubles in a shared
// buffer the parent reads), and are cached by (oracle identity, input data) in kwb's cache folder.
//
// Every failure of the oracle (it does not compile, crashes, loops past its time limit, returns an error, is not
// loadable) is a task error: DataError (exit 65) naming the task's oracle file and what happened.
#pragma once

#include "builder/builder.h"
#include "task/task.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kwb {

// The task's oracle, built (or taken from the artifact cache) once per process and task. Throws DataError with the
// compiler's output when it does not build.
const Artifact& oracle_artifact(const Task& task);

// What plan.json records of the oracle: its path in the task folder, its source's SHA-256 and its build identity.
nlohmann::json oracle_record(const Task& task);

// The input of one oracle call: the input tensors as the candidate sees them (bytes of the task's dtypes), their
// shapes, the case's scalars, and the shapes the outputs must have.
struct OracleCall {
  const Case* case_ = nullptr;
  std::vector<std::span<const unsigned char>> inputs;
  std::vector<TensorShape> input_shapes;
  std::vector<TensorShape> output_shapes;
  std::vector<double> scalars;
  // Whether these inputs can come again: data from the task's published seeds (nonce 0) recurs in every check of the
  // task, so its outputs are cached; data from a fresh secret nonce (timing pools, held-out shapes, twins, validate's
  // checks) never recurs, and caching it would only cost a hash of every input, a write and a prune per call.
  bool cacheable = false;
  // For an input that stays the same across calls (a timing pool's `shared` input): the object that owns its bytes,
  // by which a runner knows it converted them to doubles before and maps that copy again instead of converting
  // 131 M elements of a 250 MiB table per call. Empty, or null for an input: converted every call.
  std::vector<std::shared_ptr<const void>> input_owners;
};

// The oracle's outputs (one vector of doubles per output): from the cache when the call is cacheable and this oracle
// has seen these inputs before, else from a run in the oracle's worker.
std::vector<std::vector<double>> oracle_outputs(const Task& task, const OracleCall& call);

// The outputs of many calls, in their order: those the cache does not answer run on several oracle workers at once
// (one per CPU kwb may use, at most eight, fewer where the calls are large), each a sandboxed worker of its own. The
// failure of the earliest failing call is thrown, as one call at a time would have thrown it.
std::vector<std::vector<std::vector<double>>> oracle_outputs(const Task& task, std::span<const OracleCall> calls);

// The time one oracle call may take: 10 s plus 1 us per element of the call's inputs and outputs.
std::chrono::milliseconds oracle_timeout(uint64_t elements);

// Where the outputs of a call are cached, and the key it is cached under: SHA-256 of the oracle's build key and
// object, the input data, shapes, scalars and output shapes.
std::string oracle_cache_key(const Artifact& oracle, const Task& task, const OracleCall& call);

}  // namespace kwb
