// End-to-end `kwb check` on the operator tasks added without touching kwb (issue 13): tasks/softmax,
// tasks/softmax_bf16 and tasks/gemm, written only against docs/task-format.md and docs/candidate-abi.md. Each
// task's baseline and reference must pass every case, and every control its task.toml declares must fail with the
// reason code it declares; a control added to a task without a test here, or a test left for a control that is
// gone, fails too.
#include "cli_helpers.h"
#include "task/task.h"

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <set>
#include <string>

namespace kwb::test {
namespace {

KwbRun check(const std::filesystem::path& task, const std::filesystem::path& impl) {
  return run_kwb({"check", task.string(), "--impl", impl.string(), "--json"});
}

// The controls each task must ship (and this file tests), by name.
const std::map<std::string, std::set<std::string>> k_controls = {
    {"softmax",
     {"no_max_subtraction", "sum_off_by_one", "online_no_rescale", "wrong_axis", "zeros", "mutate_input",
      "stale_output_replay", "online_mask_nan"}},
    {"softmax_bf16", {"bf16_sum", "no_max_subtraction"}},
    {"gemm", {"transposed_b", "k_off_by_one", "bf16_accumulator", "edge_tiles_forgotten", "zeros", "mutate_input"}},
};

const std::map<std::string, std::filesystem::path> k_task_dirs = {
    {"softmax", k_softmax}, {"softmax_bf16", k_softmax_bf16}, {"gemm", k_gemm}};

std::filesystem::path task_dir(const std::string& name) { return k_task_dirs.at(name); }

// ---- baseline and reference pass -------------------------------------------------------------------------------

struct Implementation {
  const char* task;
  const char* role;  // "baseline" or "reference"
};

void PrintTo(const Implementation& i, std::ostream* os) { *os << i.task << "/" << i.role; }

class OperatorTaskImplementationTest : public ::testing::TestWithParam<Implementation> {};

TEST_P(OperatorTaskImplementationTest, passes_every_case) {
  const std::filesystem::path dir = task_dir(GetParam().task);
  const kwb::Task task = kwb::load_task(dir);
  const kwb::BackendImpls& cpu = task.backends.at(BackendKind::cpu);
  const std::filesystem::path impl = std::string(GetParam().role) == "baseline" ? cpu.baseline : cpu.reference;
  KwbRun r = check(dir, impl);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json["verdict"], "PASS") << r.json["failures"].dump();
  EXPECT_EQ(r.json["assertions"]["failed"].get<int>(), 0);
  EXPECT_TRUE(r.json["failures"].empty()) << r.json["failures"].dump();
  // Every case ran, each with its calls: a pass on a subset proves nothing about the rest.
  ASSERT_EQ(r.json["cases"].size(), task.cases.size());
  EXPECT_TRUE(r.json["not_run"].empty());
  // 11 assertions per call at the least (docs/checking.md), 4 calls per case.
  EXPECT_GE(r.json["assertions"]["passed"].get<size_t>(), task.cases.size() * 4 * 11);
}

INSTANTIATE_TEST_SUITE_P(OperatorTasks, OperatorTaskImplementationTest,
                         ::testing::Values(Implementation{"softmax", "baseline"},
                                           Implementation{"softmax", "reference"},
                                           Implementation{"softmax_bf16", "baseline"},
                                           Implementation{"softmax_bf16", "reference"},
                                           Implementation{"gemm", "baseline"}, Implementation{"gemm", "reference"}),
                         [](const auto& p) { return std::string(p.param.task) + "_" + p.param.role; });

// The reference also passes what final validation runs on a candidate: every case again at a held-out shape, with
// fresh data, and a rehearsed timing visit. A tolerance derived for the published shapes only would reject an
// honest kernel there (gemm's signed k = 1 cases did, at k = 3); held-out shapes are drawn afresh every run.
class OperatorTaskReferenceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(OperatorTaskReferenceTest, passes_the_final_check_with_held_out_shapes) {
  const std::filesystem::path dir = task_dir(GetParam());
  const kwb::Task task = kwb::load_task(dir);
  const std::string reference = task.backends.at(BackendKind::cpu).reference.string();
  KwbRun r = run_kwb({"check", dir.string(), "--impl", reference, "--held-out", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.json["failures"].dump();
  EXPECT_EQ(r.json["verdict"], "PASS") << r.json["failures"].dump();
  size_t held_out = 0;
  for (const auto& c : r.json["cases"]) held_out += c["name"].get<std::string>().ends_with("~held_out");
  EXPECT_EQ(held_out, task.cases.size()) << r.output;
}

INSTANTIATE_TEST_SUITE_P(OperatorTasks, OperatorTaskReferenceTest, ::testing::Values("softmax", "softmax_bf16", "gemm"));

// ---- every control is rejected for its named reason ------------------------------------------------------------

struct Control {
  const char* task;
  const char* name;
};

void PrintTo(const Control& c, std::ostream* os) { *os << c.task << "/" << c.name; }

class OperatorTaskControlTest : public ::testing::TestWithParam<Control> {};

TEST_P(OperatorTaskControlTest, is_rejected_for_its_named_reason) {
  const kwb::Task task = kwb::load_task(task_dir(GetParam().task));
  const kwb::ControlSpec* spec = nullptr;
  for (const auto& c : task.backends.at(BackendKind::cpu).controls) {
    if (c.name == GetParam().name) spec = &c;
  }
  ASSERT_NE(spec, nullptr) << GetParam().task << " declares no control " << GetParam().name;
  KwbRun r = check(task_dir(GetParam().task), spec->source);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  const std::string expect(to_string(spec->expect));
  EXPECT_TRUE(reasons(r.json).contains(expect)) << "expected " << expect << ", got " << r.json["failures"].dump();
}

std::vector<Control> all_controls() {
  std::vector<Control> out;
  for (const auto& [task, names] : k_controls) {
    for (const std::string& name : names) out.push_back({task.c_str(), name.c_str()});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(OperatorTasks, OperatorTaskControlTest, ::testing::ValuesIn(all_controls()),
                         [](const auto& p) { return std::string(p.param.task) + "_" + p.param.name; });

TEST(OperatorTaskControls, each_task_ships_exactly_the_controls_tested) {
  for (const auto& [name, expected] : k_controls) {
    const kwb::Task task = kwb::load_task(task_dir(name));
    std::set<std::string> names;
    for (const auto& c : task.backends.at(BackendKind::cpu).controls) names.insert(c.name);
    EXPECT_EQ(names, expected) << name;
  }
}

// A constant wrong output is a wrong value, not a replay, even where the previous case's results differ from each
// other only below atol (softmax's underflowed tails are all ~0): the replay detector judges variation on what the
// implementation wrote, within tolerance. Before, zeros.cpp on softmax was reported stale_output on two cases. (It
// may also be nan_mismatch: a twin of the masked case turns a -inf logit into +inf, whose row is NaN.)
TEST(OperatorTaskControls, an_all_zeros_output_is_a_numeric_mismatch_never_a_replay) {
  KwbRun r = check(k_softmax, k_softmax / "cpu/controls/zeros.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::set<std::string> found = reasons(r.json);
  EXPECT_TRUE(found.contains("numeric_mismatch")) << r.json["failures"].dump();
  EXPECT_FALSE(found.contains("stale_output")) << r.json["failures"].dump();
}

// `kwb check --control NAME` checks one of the task's controls by name and says whether its reason was seen; an
// unknown name is a usage error listing the ones the task has.
TEST(OperatorTaskControls, check_control_by_name_reports_whether_its_reason_was_seen) {
  KwbRun r = run_kwb({"check", k_softmax.string(), "--control", "online_mask_nan", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.json["control"]["name"], "online_mask_nan");
  EXPECT_EQ(r.json["control"]["expect"], "nan_mismatch");
  EXPECT_EQ(r.json["control"]["expected_reason_seen"], true) << r.json["failures"].dump();
  // On the terminal a control written as a change is named as the task names it, not by its file in kwb's cache.
  KwbRun human = run_kwb({"check", k_softmax.string(), "--control", "online_mask_nan"});
  EXPECT_NE(human.output.find("implementation control online_mask_nan ("), std::string::npos) << human.output;
  EXPECT_NE(human.output.find("online.cpp with one change)"), std::string::npos) << human.output;
  KwbRun unknown = run_kwb({"check", k_softmax.string(), "--control", "no_such_control"});
  EXPECT_EQ(unknown.exit_code, 64);
  EXPECT_NE(unknown.errors.find("online_mask_nan"), std::string::npos) << unknown.errors;
}

}  // namespace
}  // namespace kwb::test
