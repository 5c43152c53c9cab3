// End-to-end `kwb check` on the built-in RMSNorm task: the real binaries, the real candidates.
#include "cli_helpers.h"
#include "task/task.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <set>

namespace kwb::test {
namespace {

const std::filesystem::path k_candidates = k_source_dir / "tests" / "candidates";

std::set<std::string> reasons(const nlohmann::json& j) {
  std::set<std::string> out;
  for (const auto& f : j.at("failures")) out.insert(f.at("reason").get<std::string>());
  return out;
}

KwbRun check(const std::filesystem::path& impl, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"check", k_rmsnorm.string(), "--impl", impl.string(), "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_kwb(args);
}

TEST(check_test, fused_reference_passes_with_at_least_300_assertions) {
  KwbRun r = check(k_rmsnorm / "cpu" / "fused.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json["schema"], "kwb.check");
  EXPECT_EQ(r.json["verdict"], "PASS");
  EXPECT_GE(r.json["assertions"]["passed"].get<int>(), 300);
  EXPECT_EQ(r.json["assertions"]["failed"].get<int>(), 0);
  EXPECT_TRUE(r.json["failures"].empty());
  EXPECT_EQ(r.json["implementation"]["identity"]["artifact_sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(r.json["cases"].size(), kwb::load_task(k_rmsnorm).cases.size());
}

TEST(check_test, multipass_baseline_passes_with_at_least_300_assertions) {
  KwbRun r = check(k_rmsnorm / "cpu" / "baseline.cpp");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json["verdict"], "PASS");
  EXPECT_GE(r.json["assertions"]["passed"].get<int>(), 300);
}

TEST(check_test, human_output_ends_with_the_assertion_summary) {
  KwbRun r = run_kwb({"check", k_rmsnorm.string(), "--impl", (k_rmsnorm / "cpu" / "fused.cpp").string(), "--case",
                      "odd_row_length"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // 4 calls x 12 assertions (completed, returned_zero, descriptors_intact, 2 x input_unchanged, no_write_outside,
  // all_written, nonfinite_agree, within_tolerance, timing_plausible, work_inside_timer, settled_at_return) + the
  // worker's goodbye.
  EXPECT_NE(r.output.find("49 assertions passed, 0 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("verdict: PASS"), std::string::npos) << r.output;
}

// Every control the task ships is rejected, with the reason the manifest says it must provoke.
class ControlTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ControlTest, control_is_rejected_for_its_named_reason) {
  kwb::Task task = kwb::load_task(k_rmsnorm);
  const kwb::ControlSpec* spec = nullptr;
  for (const auto& c : task.backends.at("cpu").controls) {
    if (c.name == GetParam()) spec = &c;
  }
  ASSERT_NE(spec, nullptr);
  KwbRun r = check(spec->source);
  ASSERT_FALSE(r.json.is_discarded()) << r.output;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.json["verdict"], "FAIL");
  EXPECT_TRUE(reasons(r.json).contains(spec->expect)) << "expected " << spec->expect << ", got " << r.json["failures"].dump();
}

INSTANTIATE_TEST_SUITE_P(rmsnorm_cpu, ControlTest,
                         ::testing::Values("no_eps", "no_weight", "wrong_axis", "zeros", "mutate_input",
                                           "stale_output_replay"));

TEST(check_test, task_ships_every_control_the_tests_cover) {
  std::set<std::string> names;
  const kwb::Task task = kwb::load_task(k_rmsnorm);
  for (const auto& c : task.backends.at("cpu").controls) names.insert(c.name);
  EXPECT_EQ(names, (std::set<std::string>{"no_eps", "no_weight", "wrong_axis", "zeros", "mutate_input",
                                          "stale_output_replay"}));
}

// Misbehaving candidates: each is a FAIL with a reason, in bounded time, and kwb itself exits 1.
struct Misbehaviour {
  const char* file;
  const char* reason;
};

// Names the candidate in test output instead of the struct's bytes.
void PrintTo(const Misbehaviour& m, std::ostream* os) { *os << m.file << " -> " << m.reason; }

class MisbehaviourTest : public ::testing::TestWithParam<Misbehaviour> {};

TEST_P(MisbehaviourTest, yields_fail_with_reason_and_kwb_survives) {
  const auto t0 = std::chrono::steady_clock::now();
  KwbRun r = check(k_candidates / GetParam().file,
                   {"--timeout-seconds", "1", "--case", "decode", "--case", "zeros", "--case", "many_short_rows"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.json.is_discarded()) << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  EXPECT_TRUE(reasons(r.json).contains(GetParam().reason)) << r.json["failures"].dump();
  // Every case the candidate could be tried on is reported, not just the first failure.
  EXPECT_EQ(r.json["cases"].size(), 3u);
  EXPECT_LT(seconds, 60.0);
}

INSTANTIATE_TEST_SUITE_P(
    candidates, MisbehaviourTest,
    ::testing::Values(Misbehaviour{"crash.cpp", "crashed"}, Misbehaviour{"abort.cpp", "aborted"},
                      Misbehaviour{"exit.cpp", "exited"}, Misbehaviour{"hang.cpp", "timeout"},
                      Misbehaviour{"out_of_bounds.cpp", "out_of_bounds_write"},
                      Misbehaviour{"write_before.cpp", "out_of_bounds_write"},
                      Misbehaviour{"run_fails.cpp", "run_failed"}, Misbehaviour{"setup_fails.cpp", "setup_failed"},
                      Misbehaviour{"no_abi.cpp", "missing_symbol"}),
    [](const auto& info) {
      std::string n = info.param.file;
      return n.substr(0, n.find('.'));
    });

TEST(check_test, each_crashed_case_is_followed_by_a_fresh_worker) {
  // The crash in one case does not stop the others: each is tried and fails on its own.
  KwbRun r = check(k_candidates / "crash.cpp", {"--case", "decode", "--case", "zeros"});
  size_t crashed = 0;
  for (const auto& f : r.json["failures"]) crashed += f["reason"] == "crashed";
  EXPECT_EQ(crashed, 2u) << r.output;
}

TEST(check_test, compile_error_is_bad_input_with_file_and_line) {
  KwbRun r = check(k_candidates / "compile_error.cpp");
  EXPECT_EQ(r.exit_code, 65) << r.output;
  ASSERT_FALSE(r.json.is_discarded()) << r.output;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  ASSERT_EQ(r.json["failures"].size(), 1u);
  EXPECT_EQ(r.json["failures"][0]["reason"], "build_failed");
  EXPECT_NE(r.json["failures"][0]["detail"].get<std::string>().find("compile_error.cpp:"), std::string::npos);
}

TEST(check_test, malformed_manifest_exits_65_with_file_and_line) {
  auto dir = std::filesystem::temp_directory_path() / ("kwb-bad-task-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "task.toml") << "name = \"x\"\ndescription = \"y\"\noracle = 3\n";
  KwbRun r = run_kwb({"check", dir.string(), "--impl", (k_rmsnorm / "cpu" / "fused.cpp").string()});
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_NE(r.errors.find("task.toml:3: field 'oracle': expected a string, got an integer"), std::string::npos)
      << r.errors;
  std::filesystem::remove_all(dir);
}

TEST(check_test, usage_errors_exit_64) {
  EXPECT_EQ(run_kwb({"check", k_rmsnorm.string()}).exit_code, 64);  // --impl missing
  EXPECT_EQ(run_kwb({"frobnicate"}).exit_code, 64);
  KwbRun r = run_kwb({"check", k_rmsnorm.string(), "--impl", (k_rmsnorm / "cpu" / "fused.cpp").string(), "--case",
                      "nope"});
  EXPECT_EQ(r.exit_code, 64);
}

TEST(check_test, missing_implementation_source_is_bad_input) {
  KwbRun r = check(k_rmsnorm / "cpu" / "does_not_exist.cpp");
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_NE(r.errors.find("does_not_exist.cpp"), std::string::npos) << r.errors;
}

TEST(check_test, unavailable_backend_exits_69_before_anything_is_built) {
  // No CUDA device is visible (CUDA_VISIBLE_DEVICES reaches the worker), whether or not this machine has a GPU:
  // the verb stops with 69 and says why, and never crashes or reports a check.
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  KwbRun r = check(k_rmsnorm / "cuda" / "fused.cu", {"--backend", "cuda"});
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(r.exit_code, 69) << r.output << r.errors;
  EXPECT_NE(r.errors.find("CUDA"), std::string::npos) << r.errors;
  EXPECT_TRUE(r.output.empty()) << r.output;
}

}  // namespace
}  // namespace kwb::test
