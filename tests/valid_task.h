// A minimal valid task.toml (the shape of tasks/rmsnorm, sources all "impl.cpp"), for tests that break one thing at
// a time: the parser's unit tests and the exit-code tests through kwb share it, and with it the lines their
// messages name (tolerance at 13, rtol 14, atol 15, the case's dims 20, seed 23, [backends.cpu] 25).
#pragma once

namespace kwb::test {

inline constexpr const char* k_valid_manifest = R"(name = "t"
description = "d"
oracle = "oracle.cpp"

[signature]
inputs = [
  { name = "x", dtype = "f32", shape = ["rows", "cols"] },
  { name = "weight", dtype = "f32", shape = ["cols"], distribution = "uniform", low = 0.5, high = 1.5 },
]
outputs = [{ name = "y", dtype = "f32", shape = ["rows", "cols"] }]
scalars = [{ name = "eps", default = 1e-6 }]

[tolerance]
rtol = 1e-4
atol = 0.0

[[cases]]
name = "a"
role = "timing"
dims = { rows = 2, cols = 8 }
distribution = "normal"
scale = 2.0
seed = 1

[backends.cpu]
baseline = "impl.cpp"
reference = "impl.cpp"

[[backends.cpu.controls]]
name = "c"
source = "impl.cpp"
expect = "numeric_mismatch"
)";

}  // namespace kwb::test
