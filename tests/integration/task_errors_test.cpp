// Issue 13: a bad task or candidate is exit 65 through the real kwb, with the file, the line, the field and the fix
// on stderr, before anything is built or run.
#include "../valid_task.h"
#include "cli_helpers.h"
#include "support/temp_dir.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

struct BadTask {
  const char* name;
  const char* from;
  const char* to;
  int line;
  const char* message;
};

class TaskErrorTest : public ::testing::TestWithParam<BadTask> {};

TEST_P(TaskErrorTest, exits_65_with_file_line_field_and_fix) {
  const BadTask& p = GetParam();
  const TempDir dir("kwb-task-error-" + std::string(p.name));
  std::ofstream(dir / "impl.cpp") << "// never built\n";
  std::ofstream(dir / "oracle.cpp") << "// never built\n";
  std::string text = k_valid_manifest;
  ASSERT_NE(text.find(p.from), std::string::npos) << p.from;
  text.replace(text.find(p.from), std::string(p.from).size(), p.to);
  std::ofstream(dir / "task.toml") << text;
  KwbRun r = run_kwb({"check", dir.string(), "--impl", (k_rmsnorm_lite / "cpu" / "fused.cpp").string()});
  EXPECT_EQ(r.exit_code, 65) << r.errors;
  EXPECT_NE(r.errors.find(fmt::format("{}:{}: ", (fs::canonical(dir) / "task.toml").string(), p.line)),
            std::string::npos)
      << r.errors;
  EXPECT_NE(r.errors.find(p.message), std::string::npos) << r.errors;
}

INSTANTIATE_TEST_SUITE_P(
    issue13, TaskErrorTest,
    ::testing::Values(
        BadTask{"huge_dims", "dims = { rows = 2, cols = 8 }", "dims = { rows = 4000000000000, cols = 4000000000000 }",
                20, "field 'cases[0].dims': tensor 'x'"},
        BadTask{"too_large", "dims = { rows = 2, cols = 8 }", "dims = { rows = 1000000, cols = 1000000 }", 20,
                "8000004000000 bytes"},
        BadTask{"rtol_inf", "rtol = 1e-4", "rtol = inf", 14, "field 'tolerance.rtol': must be a finite number >= 0"},
        BadTask{"atol_nan", "atol = 0.0", "atol = nan", 15, "field 'tolerance.atol': must be a finite number >= 0"},
        BadTask{"tolerence", "[tolerance]", "[tolerence]", 13, "did you mean 'tolerance'?"},
        BadTask{"cpux", "[backends.cpu]", "[backends.cpux]", 25, "unknown backend 'cpux'"}),
    [](const auto& p) { return std::string(p.param.name); });

// A source without KWB_CANDIDATE_ABI is a bad candidate source, like one that does not compile: 65, naming the file
// and the macro, with no case run.
TEST(task_errors_test, candidate_without_the_abi_marker_exits_65_naming_the_file) {
  const fs::path src = k_source_dir / "tests" / "candidates" / "no_abi.cpp";
  KwbRun r = run_kwb({"check", k_rmsnorm_lite.string(), "--impl", src.string(), "--json"});
  EXPECT_EQ(r.exit_code, 65) << r.output << r.errors;
  ASSERT_FALSE(r.json.is_discarded()) << r.output;
  ASSERT_EQ(r.json["failures"].size(), 1u) << r.json["failures"].dump();
  const std::string detail = r.json["failures"][0]["detail"];
  EXPECT_NE(detail.find(src.string()), std::string::npos) << detail;
  EXPECT_NE(detail.find("KWB_CANDIDATE_ABI"), std::string::npos) << detail;
  EXPECT_TRUE(r.json["cases"].empty()) << r.output;
}

// A signature and an oracle that disagree on the tensors (here a third input the rmsnorm oracle does not take) is a
// task error: 65, naming the oracle's file and quoting the oracle's own message, never kwb's internal error.
TEST(task_errors_test, a_signature_the_oracle_does_not_take_exits_65_naming_the_oracle) {
  const TempDir dir("kwb-task-error-arity");
  fs::copy_file(k_rmsnorm_lite / "oracle.cpp", dir / "oracle.cpp", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "impl.cpp") << "// never built\n";
  std::string text = k_valid_manifest;
  const std::string weight =
      R"(  { name = "weight", dtype = "f32", shape = ["cols"], distribution = "uniform", low = 0.5, high = 1.5 },)";
  ASSERT_NE(text.find(weight), std::string::npos);
  text.insert(text.find(weight) + weight.size(), "\n  { name = \"bias\", dtype = \"f32\", shape = [\"cols\"] },");
  std::ofstream(dir / "task.toml") << text;
  KwbRun r = run_kwb({"check", dir.string(), "--impl", (k_rmsnorm_lite / "cpu" / "fused.cpp").string()});
  EXPECT_EQ(r.exit_code, 65) << r.errors;
  EXPECT_NE(r.errors.find((fs::canonical(dir) / "oracle.cpp").string()), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("rmsnorm expects inputs (x, weight)"), std::string::npos) << r.errors;
}

// Numbers at the edges (issue 24, class 6): a timeout of 1e308, nan or 1e10 once exited 70 or overflowed a deadline.
// Every verb that takes one refuses it while parsing, before anything is built or run: exit 64, naming the option
// and its range.
TEST(task_errors_test, numeric_options_out_of_range_exit_64_naming_the_option_and_the_range) {
  const std::string fused = (k_rmsnorm_lite / "cpu" / "fused.cpp").string();
  const std::vector<std::vector<std::string>> verbs = {
      {"check", k_rmsnorm_lite.string(), "--impl", fused},
      {"compare", k_rmsnorm_lite.string(), "--candidate", fused},
      {"validate", k_rmsnorm_lite.string(), "--candidate", fused, "--output-dir",
       (fs::temp_directory_path() / fmt::format("kwb-never-{}", ::getpid())).string()},
      {"profile", k_rmsnorm_lite.string(), "--impl", fused},
  };
  for (const auto& verb : verbs) {
    for (const char* v : {"1e308", "nan", "inf", "1e10", "-1", "0"}) {
      std::vector<std::string> args = verb;
      args.insert(args.end(), {"--timeout-seconds", v});
      KwbRun r = run_kwb(args, std::chrono::seconds(30));
      EXPECT_EQ(r.exit_code, 64) << verb[0] << " --timeout-seconds " << v << ": " << r.errors;
      EXPECT_NE(
          r.errors.find("--timeout-seconds: must be a finite number from 0.001 to 86400 (got " + std::string(v) + ")"),
          std::string::npos)
          << r.errors;
    }
  }
  KwbRun calls = run_kwb({"check", k_rmsnorm_lite.string(), "--impl", fused, "--calls", "1e10"});
  EXPECT_EQ(calls.exit_code, 64) << calls.errors;
  EXPECT_NE(calls.errors.find("--calls: must be an integer from 1 to 1000 (got 1e10)"), std::string::npos)
      << calls.errors;
}

}  // namespace
}  // namespace kwb::test
