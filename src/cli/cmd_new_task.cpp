// kwb new-task DIR [--name NAME]: writes a task skeleton that passes `kwb check` as generated, so that a user
// starts from green and changes one thing at a time: task.toml (every field commented), the oracle, a naive
// baseline, a fused reference and one control. The operator is deliberately small (y = a * x + z, float32): the
// point is the layout of a task, which docs/task-format.md walks through; tests/integration/new_task_test.cpp runs
// check, compare and validate on what this writes.
#include "cli/commands.h"
#include "util/error.h"
#include "util/fs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kwb::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_task_toml =
    R"kwb(# @NAME@: y = a * x + z, element-wise, float32. Written by `kwb new-task` as a starting point that passes
# `kwb check` as generated: replace the operator, its oracle, the implementations and the control with your own,
# one at a time, checking as you go. docs/task-format.md explains every field below.
name = "@NAME@"
description = "y = a * x + z, element-wise, float32"
# The task's reference implementation (include/kwb/oracle.h): every output is compared with what it computes. kwb
# builds it for accuracy (no fast-math, no FMA contraction) and runs it in a sandboxed worker of its own.
oracle = "oracle.cpp"
# Threads a candidate may use (kwb_context.max_threads).
threads = 1

# The call's tensors, in order: kwb generates the inputs, hands them (and the outputs) to every implementation as
# DLPack tensors, and passes the scalars by name.
[signature]
inputs = [
  { name = "x", dtype = "f32", shape = ["n"] },
  { name = "z", dtype = "f32", shape = ["n"] },
]
outputs = [{ name = "y", dtype = "f32", shape = ["n"] }]
scalars = [{ name = "a", default = 1.5 }]

# Element-wise: |y - y_oracle| <= atol + rtol * |y_oracle|. An honest float32 implementation rounds a * x once and
# the sum once (or both at once, in an FMA): |error| <= u |a x| + u |y|, u = 2^-24 = 5.96e-8. The u |y| part is
# relative: rtol = 1e-6 (about 17 u, margin for either order). The u |a x| part is not relative to y where a x and z
# nearly cancel, so it needs atol: the largest |a x| below is 0.25 * 100 = 25 (case other_scale), u * 25 = 1.5e-6,
# so atol = 4e-6. Forgetting a, or z, errs by about |x| or |z|: far outside both.
[tolerance]
rtol = 1e-6
atol = 4e-6

# Timing cases are the workloads compare and validate time; every case is checked.
[[cases]]
name = "large"
role = "timing"
# 4 MiB per tensor: beyond most L2 caches.
dims = { n = 1048576 }
distribution = "normal"
scale = 1.0
seed = 1

[[cases]]
name = "small"
role = "timing"
dims = { n = 4096 }
distribution = "normal"
scale = 1.0
seed = 2

[[cases]]
name = "odd_length"
role = "correctness"
# A length no vector width divides: remainders must be handled.
dims = { n = 1001 }
distribution = "normal"
scale = 1.0
seed = 3

[[cases]]
name = "other_scale"
role = "correctness"
# Another value of the scalar, and wider data.
dims = { n = 4096 }
distribution = "uniform"
low = -100.0
high = 100.0
seed = 4
scalars = { a = -0.25 }

[backends.cpu]
baseline = "cpu/baseline.cpp"
reference = "cpu/reference.cpp"

# An error control: a wrong implementation that must be rejected for the named reason. validate checks every
# control; one that passes, or fails for another reason, makes its decision INVALID. This one is a change of the
# reference (base, replace, with): the scalar a forgotten, y = x + z. Every case has a != 1, so it errs by
# |(a - 1) x| on nearly every element. A mistake that changes the code's structure gets a file of its own instead:
# source = "cpu/controls/NAME.cpp".
[[backends.cpu.controls]]
name = "forgets_a"
base = "cpu/reference.cpp"
replace = "c.y[i] = c.a * c.x[i] + c.z[i];"
with = "c.y[i] = c.x[i] + c.z[i];"
expect = "numeric_mismatch"
)kwb";

constexpr const char* k_oracle =
    R"kwb(// The @NAME@ task's oracle (include/kwb/oracle.h): y = a * x + z, written from the definition and shared with no
// implementation. Inputs arrive as double (exactly the values the candidates see); long double keeps the product
// and the sum exact enough that the only rounding that matters is the final one, to double.
#include "kwb/oracle.h"

#include <cstdio>

extern "C" int kwb_oracle(const kwb_oracle_args* args) {
  if (args->num_inputs != 2 || args->num_outputs != 1 || args->num_scalars != 1) {
    std::snprintf(args->error, args->error_capacity, "@NAME@ expects inputs (x, z), output (y) and scalar (a)");
    return 1;
  }
  const kwb_oracle_tensor& x = args->inputs[0];
  const kwb_oracle_tensor& z = args->inputs[1];
  const kwb_oracle_tensor& y = args->outputs[0];
  if (z.elements != x.elements || y.elements != x.elements) {
    std::snprintf(args->error, args->error_capacity, "@NAME@: x, z and y must have the same number of elements");
    return 1;
  }
  const long double a = args->scalars[0];
  for (int64_t i = 0; i < x.elements; ++i) {
    y.data[i] = static_cast<double>(a * static_cast<long double>(x.data[i]) + static_cast<long double>(z.data[i]));
  }
  return 0;
}
)kwb";

// What every implementation below needs: the call's tensors, checked against the signature.
constexpr const char* k_unpack =
    R"kwb(// The call's tensors, checked against the task signature: x [n] and z [n] in, y [n] out, all f32, compact, host
// memory. Anything else is refused (kwb_run returns 1) rather than guessed at.
struct Call {
  const float* x;
  const float* z;
  float* y;
  int64_t n;
  float a;
};

bool is_host_f32_vector(const DLTensor& t) {
  return t.device.device_type == kDLCPU && t.ndim == 1 && t.dtype.code == kDLFloat && t.dtype.bits == 32 &&
         t.dtype.lanes == 1 && (t.strides == nullptr || t.strides[0] == 1);
}

bool unpack(const kwb_call& call, Call& out) {
  if (call.num_inputs != 2 || call.num_outputs != 1) return false;
  const DLTensor& x = call.inputs[0];
  const DLTensor& z = call.inputs[1];
  const DLTensor& y = call.outputs[0];
  if (!is_host_f32_vector(x) || !is_host_f32_vector(z) || !is_host_f32_vector(y)) return false;
  if (z.shape[0] != x.shape[0] || y.shape[0] != x.shape[0]) return false;
  auto at = [](const DLTensor& t) { return static_cast<char*>(t.data) + t.byte_offset; };
  out = {reinterpret_cast<const float*>(at(x)), reinterpret_cast<const float*>(at(z)), reinterpret_cast<float*>(at(y)),
         x.shape[0], static_cast<float>(kwb_scalar_or(&call, "a", 1.5))};
  return true;
}
)kwb";

constexpr const char* k_baseline =
    R"kwb(// @NAME@, baseline: the way an eager framework runs `a * x + z`: two element-wise kernels, each its own sweep over
// memory, with the product in a temporary allocated per call. The "before" the reference is measured against.
#include <kwb/kernel.h>

#include <cstdint>
#include <memory>
#include <new>

KWB_CANDIDATE_ABI

namespace {

@UNPACK@
__attribute__((noinline)) void scale(const float* x, float a, float* t, int64_t n) {
  for (int64_t i = 0; i < n; ++i) t[i] = a * x[i];
}

__attribute__((noinline)) void add(const float* t, const float* z, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = t[i] + z[i];
}

}  // namespace

// Returns 1 when the call does not match the signature, 2 when the temporary cannot be allocated (an exception
// must not cross the C ABI).
extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  Call c;
  if (!unpack(*call, c)) return 1;
  try {
    const std::unique_ptr<float[]> t = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(c.n));
    scale(c.x, c.a, t.get(), c.n);
    add(t.get(), c.z, c.y, c.n);
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 0;
}
)kwb";

constexpr const char* k_reference =
    R"kwb(// @NAME@, reference: one fused sweep, no temporary; the compiler vectorizes the loop (and may fuse the multiply
// and the add into an FMA, which the tolerance allows).
#include <kwb/kernel.h>

#include <cstdint>

KWB_CANDIDATE_ABI

namespace {

@UNPACK@
}  // namespace

extern "C" KWB_EXPORT int kwb_run(const kwb_call* call) {
  Call c;
  if (!unpack(*call, c)) return 1;
  for (int64_t i = 0; i < c.n; ++i) c.y[i] = c.a * c.x[i] + c.z[i];
  return 0;
}
)kwb";

std::string fill(std::string text, const std::string& name) {
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  };
  replace_all("@UNPACK@", k_unpack);
  replace_all("@NAME@", name);
  return text;
}

bool valid_task_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && (std::isalpha(static_cast<unsigned char>(name[0])) != 0) &&
         std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-'; });
}

}  // namespace

Action add_new_task(CLI::App& root) {
  auto dir = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand(
      "new-task", "Write a task skeleton (task.toml, oracle, baseline, reference, one control) that passes check");
  app->add_option("task_dir", *dir, "Folder to create (must not exist, or be empty)")->required();
  app->add_option("--name", *name, "Task name (default: the folder's name)");
  return [dir, name]() {
    const fs::path root_dir = fs::path(*dir).lexically_normal();
    const std::string task_name = name->empty() ? root_dir.filename().string() : *name;
    if (!valid_task_name(task_name)) {
      throw UsageError(fmt::format(
          "new-task: '{}' is not a task name: use a letter, then letters, digits, '_' or '-' (at most 64); pass "
          "--name NAME to choose one other than the folder's",
          task_name));
    }
    std::error_code ec;
    if (fs::exists(fs::symlink_status(root_dir, ec)) &&
        (!fs::is_directory(fs::symlink_status(root_dir, ec)) || !fs::is_empty(root_dir, ec))) {
      throw UsageError(
          fmt::format("new-task: {} already exists and is not an empty folder; name a new folder, kwb "
                      "never writes over a task",
                      root_dir.string()));
    }
    const std::vector<std::pair<std::string, const char*>> files = {
        {"task.toml", k_task_toml},
        {"oracle.cpp", k_oracle},
        {"cpu/baseline.cpp", k_baseline},
        {"cpu/reference.cpp", k_reference},
    };
    for (const auto& [relative, text] : files) {
      const fs::path path = root_dir / relative;
      fs::create_directories(path.parent_path(), ec);
      if (ec)
        throw Error(ExitCode::io_error,
                    fmt::format("new-task: cannot create {}: {}", path.parent_path().string(), ec.message()));
      write_file_atomic(path, fill(text, task_name));
    }
    const std::string d = root_dir.string();
    std::cout << fmt::format(
        "wrote task '{1}' in {0}/: task.toml (with the control forgets_a, a change of the "
        "reference), oracle.cpp, cpu/baseline.cpp, cpu/reference.cpp\n\nnext:\n"
        "  kwb check {0} --impl {0}/cpu/baseline.cpp\n"
        "  kwb check {0} --control forgets_a     # must FAIL: numeric_mismatch\n"
        "  kwb validate {0} --candidate {0}/cpu/reference.cpp --output-dir bundles/{1}\n"
        "then make it yours: docs/task-format.md\n",
        d, task_name);
    return 0;
  };
}

}  // namespace kwb::cli
