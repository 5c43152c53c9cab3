// Issue 28: a task whose operator cannot take held-out shapes (every dim moves to a fresh odd value; here the
// baseline refuses an odd row length, as an operator needing an even head_dim does) used to run all of validate's
// timing and end INVALID in the final check. validate now tries the final check's held-out shapes on the baseline
// right after the baseline's own check: exit 65 before anything is timed, naming the held-out case and the [dims]
// fix. With the constraint declared, held-out shapes keep it and the same baseline takes them.
#include "cli_helpers.h"
#include "support/temp_dir.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <regex>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

// The lite RMSNorm task, with cases whose row length is even, a baseline that refuses an odd one, and `dims` (a
// [dims] table, or "") before the cases.
fs::path even_only_task(const fs::path& root, const std::string& dims) {
  const fs::path dir = root / "task";
  fs::copy(k_rmsnorm_lite, dir, fs::copy_options::recursive);
  std::string toml = read_file(dir / "task.toml");
  const size_t cases = toml.find("[[cases]]"), backends = toml.find("[backends.cpu]");
  toml.replace(cases, backends - cases, dims + R"(
[[cases]]
name = "decode"
role = "timing"
dims = { rows = 1, cols = 512 }
distribution = "normal"
scale = 1.0
seed = 1

[[cases]]
name = "zeros"
role = "correctness"
dims = { rows = 4, cols = 256 }
distribution = "zeros"
seed = 2

[[cases]]
name = "wide"
role = "correctness"
dims = { rows = 8, cols = 1024 }
distribution = "normal"
scale = 3.0
seed = 3

)");
  // Controls stay as the task has them: they are checked after the baseline, which is where this test stops.
  write_file_atomic(dir / "task.toml", toml);
  std::string baseline = read_file(dir / "cpu" / "baseline.cpp");
  const std::string entry = "  if (!p) return 1;\n";
  const size_t at = baseline.find(entry);
  EXPECT_NE(at, std::string::npos);
  baseline.insert(at + entry.size(), "  if (p->cols % 2 != 0) return 3;  // this operator pairs its columns\n");
  write_file_atomic(dir / "cpu" / "baseline.cpp", baseline);
  return dir;
}

std::vector<std::string> validate_args(const fs::path& task, const fs::path& out) {
  return {"validate",
          task.string(),
          "--candidate",
          (k_rmsnorm / "cpu" / "fused.cpp").string(),
          "--output-dir",
          out.string(),
          "--workload",
          "decode",
          "--max-minutes",
          "0.05",
          "--max-aa-difference-pct",
          "50",
          "--layouts",
          "2",
          "--no-profile",
          "--seed",
          "5",
          "--json"};
}

TEST(held_out_probe_test, a_task_that_cannot_take_held_out_shapes_fails_with_65_before_any_timing) {
  const TempDir root("kwb-probe");
  const fs::path task = even_only_task(root.path(), "");
  const KwbRun r = run_kwb(validate_args(task, root.path() / "bundle"));
  EXPECT_EQ(r.exit_code, 65) << r.output << r.errors;
  EXPECT_NE(r.errors.find("cannot take the held-out shapes"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("~held_out"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("[dims]"), std::string::npos) << r.errors;
  // Nothing was timed: no comparison in the bundle, and its decision is INVALID with the stage error.
  EXPECT_FALSE(fs::exists(root.path() / "bundle" / "comparisons" / "aa.json"));
  EXPECT_FALSE(fs::exists(root.path() / "bundle" / "comparisons" / "ab.json"));
  const nlohmann::json decision = nlohmann::json::parse(read_file(root.path() / "bundle" / "decision.json"));
  EXPECT_EQ(decision["decision"], "INVALID");
}

TEST(held_out_probe_test, with_the_constraint_declared_the_held_out_shapes_keep_it) {
  const TempDir root("kwb-probe");
  const fs::path task = even_only_task(root.path(), "[dims]\ncols = { multiple_of = 2 }\n");
  // The final check's held-out shapes, on the baseline that refuses odd rows: every one passes.
  const KwbRun check =
      run_kwb({"check", task.string(), "--impl", (task / "cpu" / "baseline.cpp").string(), "--held-out", "--json"});
  EXPECT_EQ(check.exit_code, 0) << check.output << check.errors;
  size_t held_out = 0;
  for (const nlohmann::json& c : check.json.value("cases", nlohmann::json::array())) {
    if (!c.value("name", "").ends_with("~held_out")) continue;
    ++held_out;
    std::smatch m;
    const std::string dims = c.value("dims", "");
    ASSERT_TRUE(std::regex_search(dims, m, std::regex(R"(\[(\d+), (\d+)\])"))) << dims;
    EXPECT_EQ(std::stoll(m[2]) % 2, 0) << dims;
  }
  EXPECT_EQ(held_out, 3u) << check.output;
}

// When it is the oracle that cannot take a held-out shape (here it refuses an odd row length, as an oracle with an
// index bound to a fixed number refuses a vocab that moved down), the message blames the oracle first, not the
// baseline.
TEST(held_out_probe_test, an_oracle_that_fails_at_a_held_out_shape_is_named_as_the_one_to_fix) {
  const TempDir root("kwb-probe-oracle");
  const fs::path task = even_only_task(root.path(), "");
  // The baseline takes every shape again; the oracle does not.
  std::string baseline = read_file(task / "cpu" / "baseline.cpp");
  baseline.replace(baseline.find("  if (p->cols % 2 != 0) return 3;"),
                   std::string("  if (p->cols % 2 != 0) return 3;").size(), "");
  write_file_atomic(task / "cpu" / "baseline.cpp", baseline);
  std::string oracle = read_file(task / "oracle.cpp");
  const std::string at = "  const int64_t cols = w.shape[0];\n";
  ASSERT_NE(oracle.find(at), std::string::npos);
  oracle.insert(oracle.find(at) + at.size(),
                "  if (cols % 2 != 0) return fail(args, \"odd cols: no such row here\");\n");
  write_file_atomic(task / "oracle.cpp", oracle);
  const KwbRun r = run_kwb(validate_args(task, root.path() / "bundle"));
  EXPECT_EQ(r.exit_code, 65) << r.output << r.errors;
  EXPECT_NE(r.errors.find("the task's oracle fails at a held-out shape"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("odd cols: no such row here"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("Fix the oracle"), std::string::npos) << r.errors;
  EXPECT_EQ(r.errors.find("fix the baseline"), std::string::npos) << r.errors;
  EXPECT_FALSE(fs::exists(root.path() / "bundle" / "comparisons" / "aa.json"));
}

}  // namespace
}  // namespace kwb::test
