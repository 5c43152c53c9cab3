// `kwb new-task` (src/cli/cmd_new_task.cpp) writes a task outside the repository, and a stock kwb runs the whole
// workflow on it: check (baseline and reference PASS, the control rejected for its named reason), compare and
// validate, whose bundle verifies. This is issue 13's "a new operator folder written outside the repository runs
// check, compare and validate". Refusals: a folder that holds something, and a name that is not one.
#include "cli_helpers.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

class NewTask : public ::testing::Test {
protected:
  const test::TempDir m_tmp{"kwb-new-task"};
  const fs::path m_root = m_tmp.path();
};

TEST_F(NewTask, the_skeleton_passes_check_and_runs_compare_and_validate_outside_the_repository) {
  const fs::path task = m_root / "axpy";
  KwbRun made = run_kwb({"new-task", task.string()});
  ASSERT_EQ(made.exit_code, 0) << made.output << made.errors;
  EXPECT_NE(made.output.find("kwb check " + task.string()), std::string::npos) << made.output;
  for (const char* f : {"task.toml", "oracle.cpp", "cpu/baseline.cpp", "cpu/reference.cpp"}) {
    EXPECT_TRUE(fs::is_regular_file(task / f)) << f;
  }
  // The control is a change of the reference, written in task.toml: no copy of the reference.
  EXPECT_FALSE(fs::exists(task / "cpu" / "controls"));

  for (const char* impl : {"cpu/baseline.cpp", "cpu/reference.cpp"}) {
    KwbRun r = run_kwb({"check", task.string(), "--impl", (task / impl).string(), "--json"});
    ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
    EXPECT_EQ(r.exit_code, 0) << impl << ": " << r.json["failures"].dump();
    EXPECT_EQ(r.json["verdict"], "PASS") << impl;
    EXPECT_EQ(r.json["cases"].size(), 4u) << impl;
  }
  KwbRun control = run_kwb({"check", task.string(), "--control", "forgets_a", "--json"});
  ASSERT_FALSE(control.json.is_discarded()) << control.output << control.errors;
  EXPECT_EQ(control.exit_code, 1);
  EXPECT_EQ(reasons(control.json), std::set<std::string>{"numeric_mismatch"}) << control.json["failures"].dump();
  EXPECT_EQ(control.json["control"]["expected_reason_seen"], true) << control.json["control"].dump();

  // compare: a decided or undecided comparison, never an error, on the generated workload.
  KwbRun cmp = run_kwb({"compare", task.string(), "--candidate", (task / "cpu/reference.cpp").string(), "--workload",
                        "small", "--max-minutes", "0.05", "--layouts", "2", "--json"});
  ASSERT_FALSE(cmp.json.is_discarded()) << cmp.output << cmp.errors;
  EXPECT_LE(cmp.exit_code, 2) << cmp.errors;
  ASSERT_EQ(cmp.json["workloads"].size(), 1u);
  EXPECT_EQ(cmp.json["workloads"][0]["name"], "small");
  EXPECT_GE(cmp.json["workloads"][0]["blocks"].get<int>(), 10);

  // validate: the whole workflow into a bundle (its controls included), which verify then re-derives. Two layouts
  // and a wide A/A bound: every stage runs, and none waits out its budget on a verdict this test does not judge.
  const fs::path bundle = m_root / "bundle";
  KwbRun v = run_kwb({"validate", task.string(), "--candidate", (task / "cpu/reference.cpp").string(), "--output-dir",
                      bundle.string(), "--workload", "small", "--max-minutes", "0.1", "--layouts", "2",
                      "--max-aa-difference-pct", "25"});
  EXPECT_LE(v.exit_code, 2) << v.output << v.errors;
  std::ifstream decision(bundle / "decision.json");
  const nlohmann::json d = nlohmann::json::parse(decision, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << v.errors;
  EXPECT_NE(d["decision"], "INVALID") << d.dump();
  std::ifstream controls(bundle / "controls.json");
  const nlohmann::json c = nlohmann::json::parse(controls, nullptr, false);
  ASSERT_FALSE(c.is_discarded());
  EXPECT_NE(c.dump().find("forgets_a"), std::string::npos) << c.dump();
  KwbRun verified = run_kwb({"verify", bundle.string()});
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
}

TEST_F(NewTask, a_folder_that_holds_something_is_never_written_over) {
  const fs::path task = m_root / "mine";
  fs::create_directories(task);
  { std::ofstream(task / "task.toml") << "name = \"mine\"\n"; }
  KwbRun r = run_kwb({"new-task", task.string()});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.errors.find("already exists and is not an empty folder"), std::string::npos) << r.errors;
  std::ifstream in(task / "task.toml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "name = \"mine\"\n");
  EXPECT_FALSE(fs::exists(task / "oracle.cpp"));
}

TEST_F(NewTask, a_name_that_is_not_one_is_refused_with_the_rule) {
  KwbRun r = run_kwb({"new-task", (m_root / "9lives").string()});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.errors.find("is not a task name"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("--name"), std::string::npos) << r.errors;
  EXPECT_FALSE(fs::exists(m_root / "9lives"));
  KwbRun named = run_kwb({"new-task", (m_root / "9lives").string(), "--name", "lives"});
  EXPECT_EQ(named.exit_code, 0) << named.errors;
}

}  // namespace
}  // namespace kwb::test
