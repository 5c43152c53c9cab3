// End-to-end `kwb check` on the task bank (tasks/, docs/task-format.md): every operator task kwb ships besides
// rmsnorm (whose own tests are elsewhere), written only against docs/task-format.md and docs/candidate-abi.md. On
// each backend a task runs here (cpu, and opencl on PoCL), its baseline and reference must pass every case, its
// reference must pass at held-out shapes, and every control its task.toml declares must fail with the reason code it
// declares; a control added to a task without a test here, or a test left for a control that is gone, fails too.
// The tasks' cuda sources are compiled by backend_build_test; they run where a GPU is (tests/gpu/run.sh).
#include "cli_helpers.h"
#include "support/build_paths.h"
#include "task/task.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace kwb::test {
namespace {

KwbRun check(const std::filesystem::path& task, const std::filesystem::path& impl, BackendKind backend) {
  return run_kwb(
      {"check", task.string(), "--impl", impl.string(), "--backend", std::string(to_string(backend)), "--json"});
}

// The controls each task must ship on each backend it has (cuda's are compiled, not run, here), by name.
using Controls = std::map<BackendKind, std::set<std::string>>;
const std::map<std::string, Controls> k_controls = {
    {"softmax",
     {{BackendKind::cpu,
       {"no_max_subtraction", "sum_off_by_one", "online_no_rescale", "wrong_axis", "zeros", "mutate_input",
        "stale_output_replay", "online_mask_nan"}},
      {BackendKind::opencl,
       {"no_max_subtraction", "online_mask_nan", "sum_off_by_one", "tree_no_rescale", "zeros", "mutate_input"}},
      {BackendKind::cuda,
       {"no_max_subtraction", "online_mask_nan", "sum_off_by_one", "tree_no_rescale", "zeros", "mutate_input"}}}},
    {"softmax_bf16", {{BackendKind::cpu, {"bf16_sum", "no_max_subtraction", "online_no_rescale", "online_mask_nan"}}}},
    {"gemm",
     {{BackendKind::cpu,
       {"transposed_b", "k_off_by_one", "bf16_accumulator", "edge_tiles_forgotten", "zeros", "mutate_input"}},
      {BackendKind::opencl, {"k_off_by_one", "transposed_b", "edge_tiles_forgotten", "zeros", "mutate_input"}},
      {BackendKind::cuda, {"k_off_by_one", "transposed_b", "edge_tiles_forgotten", "zeros", "mutate_input"}}}},
    {"layernorm",
     {{BackendKind::cpu,
       {"one_pass_variance", "no_eps", "eps_ignored", "unbiased_variance", "no_mean_subtraction", "no_weight",
        "no_bias", "zeros", "mutate_input", "wrong_axis", "stale_output_replay"}},
      {BackendKind::opencl,
       {"one_pass_variance", "no_eps", "eps_ignored", "unbiased_variance", "no_mean_subtraction", "no_weight",
        "no_bias", "zeros", "mutate_input"}},
      {BackendKind::cuda,
       {"one_pass_variance", "no_eps", "eps_ignored", "unbiased_variance", "no_mean_subtraction", "no_weight",
        "no_bias", "zeros", "mutate_input"}}}},
    {"swiglu",
     {{BackendKind::cpu,
       {"gate_up_swapped", "sigmoid_not_silu", "overflow_prone_form", "bf16_intermediate", "zeros", "mutate_input"}},
      {BackendKind::opencl,
       {"gate_up_swapped", "sigmoid_not_silu", "overflow_prone_form", "bf16_intermediate", "zeros", "mutate_input"}},
      {BackendKind::cuda,
       {"gate_up_swapped", "sigmoid_not_silu", "overflow_prone_form", "bf16_intermediate", "zeros", "mutate_input"}}}},
    {"attention_decode",
     {{BackendKind::cpu,
       {"no_max_subtraction", "online_no_rescale", "scale_forgotten", "scale_from_head_dim", "transposed_cache",
        "gqa_round_robin", "nan_dropped", "zeros", "mutate_input"}},
      {BackendKind::opencl,
       {"no_max_subtraction", "online_no_rescale", "scale_forgotten", "scale_from_head_dim", "transposed_cache",
        "gqa_round_robin", "nan_dropped", "zeros", "mutate_input"}},
      {BackendKind::cuda,
       {"no_max_subtraction", "online_no_rescale", "scale_forgotten", "scale_from_head_dim", "transposed_cache",
        "gqa_round_robin", "nan_dropped", "zeros", "mutate_input"}}}},
    {"attention_decode_bf16",
     {{BackendKind::cpu,
       {"no_max_subtraction", "bf16_accumulator", "online_no_rescale", "scale_forgotten", "scale_from_head_dim",
        "transposed_cache", "gqa_round_robin", "nan_dropped", "zeros", "mutate_input"}}}},
    {"rope",
     {{BackendKind::cpu,
       {"wrong_layout", "position_off_by_one", "base_ignored", "sin_sign_flipped", "only_q_rotated", "angles_in_half",
        "zeros", "mutate_input"}},
      {BackendKind::opencl,
       {"wrong_layout", "position_off_by_one", "base_ignored", "sin_sign_flipped", "only_q_rotated", "angles_in_half",
        "zeros", "mutate_input"}},
      {BackendKind::cuda,
       {"wrong_layout", "position_off_by_one", "base_ignored", "sin_sign_flipped", "only_q_rotated", "angles_in_half",
        "zeros", "mutate_input"}}}},
    {"rope_neox",
     {{BackendKind::cpu,
       {"wrong_layout", "position_off_by_one", "base_ignored", "sin_sign_flipped", "only_q_rotated", "angles_in_half",
        "zeros", "mutate_input"}},
      {BackendKind::opencl,
       {"wrong_layout", "position_off_by_one", "base_ignored", "sin_sign_flipped", "only_q_rotated", "angles_in_half",
        "zeros", "mutate_input"}},
      {BackendKind::cuda,
       {"wrong_layout", "position_off_by_one", "base_ignored", "sin_sign_flipped", "only_q_rotated", "angles_in_half",
        "zeros", "mutate_input"}}}},
    {"topk",
     {{BackendKind::cpu,
       {"ties_descending_index", "ascending_order", "last_unwritten", "flat_indices", "neg_inf_sentinel", "zeros",
        "mutate_input"}},
      {BackendKind::opencl,
       {"ties_descending_index", "ascending_order", "last_unwritten", "flat_indices", "negative_order", "zeros",
        "mutate_input"}},
      {BackendKind::cuda,
       {"ties_descending_index", "ascending_order", "last_unwritten", "flat_indices", "negative_order", "zeros",
        "mutate_input"}}}},
    {"embedding",
     {{BackendKind::cpu, {"next_row", "last_row_unwritten", "through_bf16", "zeros", "mutate_input"}},
      {BackendKind::opencl, {"next_row", "last_row_unwritten", "through_bf16", "zeros", "mutate_input"}}}},
    {"cross_entropy",
     {{BackendKind::cpu,
       {"no_max_subtraction", "wrong_target", "zeros", "mutate_input", "log_of_softmax", "tail_dropped"}},
      {BackendKind::opencl,
       {"no_max_subtraction", "wrong_target", "zeros", "mutate_input", "log_of_softmax", "sum_off_by_one"}}}},
    {"q8_0_quantize",
     {{BackendKind::cpu,
       {"ties_to_even", "divide_by_128", "f16_rounded_d", "signed_max", "truncation", "last_scale_not_written", "zeros",
        "mutate_input"}},
      {BackendKind::opencl,
       {"ties_to_even", "divide_by_128", "f16_rounded_d", "signed_max", "truncation", "last_scale_not_written", "zeros",
        "mutate_input"}},
      {BackendKind::cuda,
       {"ties_to_even", "divide_by_128", "f16_rounded_d", "signed_max", "truncation", "last_scale_not_written", "zeros",
        "mutate_input"}}}},
};

// embedding's bank copy leaves out its 250 MiB case (tests/CMakeLists.txt, KWB_EMBEDDING_LITE): the same code,
// oracle, controls and every other case.
std::filesystem::path task_dir(const std::string& name) {
  return name == "embedding" ? std::filesystem::path(KWB_EMBEDDING_LITE) : k_source_dir / "tasks" / name;
}

// The backends this machine runs the bank on: cuda needs a GPU, which CI has not.
bool runs_here(BackendKind b) { return b != BackendKind::cuda; }

// The test command's tier (README, "Tests"): by default the bank runs on cpu (every task's baseline, reference,
// held-out reference and controls); its opencl implementations and controls, each a PoCL build and several seconds,
// are the full tier's, KWB_TEST_BANK=all. rmsnorm's opencl versions are tested in every tier (opencl_test.cpp).
bool full_bank() {
  const char* tier = std::getenv("KWB_TEST_BANK");
  return tier != nullptr && std::string(tier) == "all";
}

// ---- baseline and reference pass -------------------------------------------------------------------------------

struct Implementation {
  std::string task;
  BackendKind backend;
  std::string role;  // "baseline" or "reference"
};

void PrintTo(const Implementation& i, std::ostream* os) {
  *os << i.task << "/" << to_string(i.backend) << "/" << i.role;
}

// The cpu reference is not listed here: OperatorTaskReferenceTest runs it through the final check, which checks every
// published case as this test does, and then the held-out ones (one check instead of two: 50 s of the bank's time).
std::vector<Implementation> all_implementations() {
  std::vector<Implementation> out;
  for (const auto& [task, backends] : k_controls) {
    for (const auto& [backend, names] : backends) {
      if (!runs_here(backend)) continue;
      for (const char* role : {"baseline", "reference"}) {
        if (backend != BackendKind::cpu || std::string(role) != "reference") out.push_back({task, backend, role});
      }
    }
  }
  return out;
}

// What a check of every published case must show: PASS with no failure, every case run with its calls (a pass on a
// subset proves nothing about the rest), and every output's errors reported within its tolerance. A held-out check
// also has each case at a held-out shape and the rehearsal, named apart ("~held_out", "~rehearsal").
void expect_every_published_case_passed(const KwbRun& r, const kwb::Task& task) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json["verdict"], "PASS") << r.json["failures"].dump();
  EXPECT_EQ(r.json["assertions"]["failed"].get<int>(), 0);
  EXPECT_TRUE(r.json["failures"].empty()) << r.json["failures"].dump();
  EXPECT_TRUE(r.json["not_run"].empty());
  std::set<std::string> published;
  for (const auto& c : r.json["cases"]) {
    const std::string name = c["name"];
    if (name.find('~') == std::string::npos) published.insert(name);
    ASSERT_EQ(c["outputs"].size(), task.signature.outputs.size()) << c.dump();
    for (const auto& o : c["outputs"]) EXPECT_LE(o["tolerance_used"].get<double>(), 1.0) << c.dump();
  }
  std::set<std::string> expected;
  for (const auto& c : task.cases) expected.insert(c.name);
  EXPECT_EQ(published, expected);
  // 11 assertions per call at the least (docs/checking.md), 4 calls per case.
  EXPECT_GE(r.json["assertions"]["passed"].get<size_t>(), task.cases.size() * 4 * 11);
}

class OperatorTaskImplementationTest : public ::testing::TestWithParam<Implementation> {};

TEST_P(OperatorTaskImplementationTest, passes_every_case) {
  if (GetParam().backend != BackendKind::cpu && !full_bank()) {
    GTEST_SKIP() << "the bank's device implementations run in the full tier: KWB_TEST_BANK=all";
  }
  const std::filesystem::path dir = task_dir(GetParam().task);
  const kwb::Task task = kwb::load_task(dir);
  const kwb::BackendImpls& impls = task.backends.at(GetParam().backend);
  const std::filesystem::path impl = GetParam().role == "baseline" ? impls.baseline : impls.reference;
  KwbRun r = check(dir, impl, GetParam().backend);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  ASSERT_EQ(r.json["cases"].size(), task.cases.size());
  expect_every_published_case_passed(r, task);
}

INSTANTIATE_TEST_SUITE_P(OperatorTasks, OperatorTaskImplementationTest, ::testing::ValuesIn(all_implementations()),
                         [](const auto& p) {
                           return p.param.task + "_" + std::string(to_string(p.param.backend)) + "_" + p.param.role;
                         });

// The cpu reference passes every published case and what final validation runs on a candidate, in one check: every
// case again at a held-out shape, with fresh data, and a rehearsed timing visit. A tolerance derived for the
// published shapes only would reject an honest kernel there (gemm's signed k = 1 cases did, at k = 3); held-out
// shapes are drawn afresh every run, and they keep each task's [dims] (an even head_dim, whole quantization blocks).
class OperatorTaskReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OperatorTaskReferenceTest, passes_the_final_check_with_held_out_shapes) {
  const std::filesystem::path dir = task_dir(GetParam());
  const kwb::Task task = kwb::load_task(dir);
  const std::string reference = task.backends.at(BackendKind::cpu).reference.string();
  KwbRun r = run_kwb({"check", dir.string(), "--impl", reference, "--held-out", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  expect_every_published_case_passed(r, task);
  size_t held_out = 0;
  for (const auto& c : r.json["cases"]) held_out += c["name"].get<std::string>().ends_with("~held_out");
  EXPECT_EQ(held_out, task.cases.size()) << r.output;
}

std::vector<std::string> all_tasks() {
  std::vector<std::string> out;
  for (const auto& [task, backends] : k_controls) out.push_back(task);
  return out;
}

INSTANTIATE_TEST_SUITE_P(OperatorTasks, OperatorTaskReferenceTest, ::testing::ValuesIn(all_tasks()),
                         [](const auto& p) { return p.param; });

// ---- every control is rejected for its named reason ------------------------------------------------------------

struct Control {
  std::string task;
  BackendKind backend;
  std::string name;
};

void PrintTo(const Control& c, std::ostream* os) { *os << c.task << "/" << to_string(c.backend) << "/" << c.name; }

class OperatorTaskControlTest : public ::testing::TestWithParam<Control> {};

TEST_P(OperatorTaskControlTest, is_rejected_for_its_named_reason) {
  if (GetParam().backend != BackendKind::cpu && !full_bank()) {
    GTEST_SKIP() << "the bank's device controls run in the full tier: KWB_TEST_BANK=all";
  }
  const kwb::Task task = kwb::load_task(task_dir(GetParam().task));
  const kwb::ControlSpec* spec = nullptr;
  for (const auto& c : task.backends.at(GetParam().backend).controls) {
    if (c.name == GetParam().name) spec = &c;
  }
  ASSERT_NE(spec, nullptr) << GetParam().task << " declares no control " << GetParam().name;
  // Stopped once the reason is established, as validate's control stage stops: the rest of the cases cost time and
  // prove nothing more about this control.
  KwbRun r = run_kwb({"check", task_dir(GetParam().task).string(), "--control", GetParam().name, "--backend",
                      std::string(to_string(GetParam().backend)), "--until-rejected", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  const std::string expect(to_string(spec->expect));
  EXPECT_TRUE(reasons(r.json).contains(expect)) << "expected " << expect << ", got " << r.json["failures"].dump();
  EXPECT_EQ(r.json["control"]["expected_reason_seen"], true);
}

std::vector<Control> all_controls() {
  std::vector<Control> out;
  for (const auto& [task, backends] : k_controls) {
    for (const auto& [backend, names] : backends) {
      if (!runs_here(backend)) continue;
      for (const std::string& name : names) out.push_back({task, backend, name});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(OperatorTasks, OperatorTaskControlTest, ::testing::ValuesIn(all_controls()),
                         [](const auto& p) {
                           return p.param.task + "_" + std::string(to_string(p.param.backend)) + "_" + p.param.name;
                         });

TEST(OperatorTaskControls, each_task_ships_exactly_the_controls_tested) {
  for (const auto& [name, backends] : k_controls) {
    const kwb::Task task = kwb::load_task(task_dir(name));
    std::set<BackendKind> declared;
    for (const auto& [backend, impls] : task.backends) declared.insert(backend);
    std::set<BackendKind> tested;
    for (const auto& [backend, expected] : backends) {
      tested.insert(backend);
      ASSERT_TRUE(task.backends.contains(backend)) << name << " has no " << to_string(backend) << " section";
      std::set<std::string> names;
      for (const auto& c : task.backends.at(backend).controls) names.insert(c.name);
      EXPECT_EQ(names, expected) << name << " on " << to_string(backend);
      EXPECT_GE(names.size(), 4u) << name << " on " << to_string(backend)
                                  << ": a bank task ships at least four controls";
    }
    EXPECT_EQ(declared, tested) << name << ": a backend the task declares is not tested here";
  }
}

// Every task folder under tasks/ (rmsnorm has its own tests) is in the bank this file tests, and has the README
// docs/task-format.md promises.
TEST(OperatorTaskControls, every_shipped_task_is_tested_and_documented) {
  for (const auto& e : std::filesystem::directory_iterator(k_source_dir / "tasks")) {
    const std::string name = e.path().filename().string();
    if (!std::filesystem::exists(e.path() / "task.toml") || name == "rmsnorm") continue;
    EXPECT_TRUE(k_controls.contains(name)) << "tasks/" << name << " is not in operator_tasks_test.cpp's bank";
    EXPECT_TRUE(std::filesystem::exists(e.path() / "README.md")) << "tasks/" << name << " has no README.md";
  }
}

// A constant wrong output is a wrong value, not a replay, even where the previous case's results differ from each
// other only below atol (softmax's underflowed tails are all ~0): the replay detector judges variation on what the
// implementation wrote, within tolerance. Before, zeros.cpp on softmax was reported stale_output on two cases. (It
// may also be nan_mismatch: a twin of the masked case turns a -inf logit into +inf, whose row is NaN.)
TEST(OperatorTaskControls, an_all_zeros_output_is_a_numeric_mismatch_never_a_replay) {
  KwbRun r = check(k_softmax, k_softmax / "cpu/controls/zeros.cpp", BackendKind::cpu);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::set<std::string> found = reasons(r.json);
  EXPECT_TRUE(found.contains("numeric_mismatch")) << r.json["failures"].dump();
  EXPECT_FALSE(found.contains("stale_output")) << r.json["failures"].dump();
}

// --until-rejected stops a control's check at the first case that shows its expected reason and lists the rest as
// not run; without it every case runs (the per-case picture a task author reads to see which cases catch what).
TEST(OperatorTaskControls, until_rejected_stops_a_control_once_its_reason_is_seen) {
  KwbRun all = run_kwb({"check", k_softmax.string(), "--control", "zeros", "--json"});
  KwbRun early = run_kwb({"check", k_softmax.string(), "--control", "zeros", "--until-rejected", "--json"});
  ASSERT_FALSE(all.json.is_discarded() || early.json.is_discarded()) << all.errors << early.errors;
  EXPECT_EQ(early.exit_code, 1);
  EXPECT_EQ(early.json["control"]["expected_reason_seen"], true);
  EXPECT_EQ(early.json["stopped_early"], true);
  EXPECT_FALSE(early.json["not_run"].empty());
  EXPECT_LT(early.json["cases"].size(), all.json["cases"].size());
  EXPECT_TRUE(all.json["not_run"].empty());
  KwbRun no_control =
      run_kwb({"check", k_softmax.string(), "--impl", (k_softmax / "cpu/online.cpp").string(), "--until-rejected"});
  EXPECT_EQ(no_control.exit_code, 64) << no_control.errors;
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
