// Replay detection: whether a call's output is the previous call's result rather than its own. Pure, so that what
// counts as a replay (and what must not) is tested on its own (tests/unit/replay_test.cpp).
#pragma once

#include "oracle/tolerance.h"
#include "util/dtype.h"

#include <cstddef>
#include <optional>
#include <span>

namespace kwb {

struct Replay {
  size_t replayed = 0;   // elements that reproduce the previous call's result
  size_t differing = 0;  // elements where this call's result must differ from the previous call's
};

// Where this call's result (`expected`) must differ from the previous call's (`previous_expected`), most of the
// output (`got`, elements of `dtype`) is what the previous call's inputs should have produced (within tolerance),
// not what this call's should. Counting only those elements matters for twins, whose result differs from their
// base's in a row or two: a precision error there must not pass for replay. Reproducing a constant (all zeros, say)
// cannot tell replay from a wrong constant, so that is no replay: judged on what the implementation wrote, within
// tolerance, previous results that differ only below atol (a softmax's underflowed tail) are one value to a reader
// of the output. Nor is an output that is also wrong where both results agree: a replay reproduces the previous
// result everywhere, and a kernel that reads the wrong row is wrong in rows the twin never changed (a
// numeric_mismatch, not a cheat's reason). The three may differ in length (the previous call was another case): the
// common prefix counts.
std::optional<Replay> detect_replay(std::span<const double> previous_expected, std::span<const double> expected,
                                    std::span<const unsigned char> got, DType dtype, const Tolerance& tol);

}  // namespace kwb
