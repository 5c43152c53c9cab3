// The adversarial corpus (tests/adversarial/): one honest-looking RMSNorm per cheat class, each rejected with its
// own reason code by `kwb check`, a selection also through `kwb compare` and `kwb validate`, and kwb itself always
// answers (a JSON report and exit 1, never a crash). docs/threat-model.md maps each class to its defense and to the
// test here that holds it.
#include "cli_helpers.h"
#include "support/temp_dir.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

// tests/adversarial/tasks/rmsnorm_threads with tasks/rmsnorm's oracle beside it (a task's sources live in its folder),
// copied once per test process and removed when it ends.
class ThreadsTask {
public:
  ThreadsTask() {
    fs::copy(k_adversarial / "tasks" / "rmsnorm_threads", m_dir, fs::copy_options::recursive);
    fs::copy_file(k_rmsnorm_lite / "oracle.cpp", m_dir / "oracle.cpp");
  }
  const fs::path& dir() const { return m_dir.path(); }

private:
  const TempDir m_dir{"kwb-threads-task"};
};

fs::path threads_task() {
  static const ThreadsTask task;
  return task.dir();
}

// The first failure with `reason`, for its detail.
std::string detail_of(const nlohmann::json& j, const std::string& reason) {
  for (const auto& f : j.at("failures")) {
    if (f.at("reason") == reason) return f.at("detail").get<std::string>();
  }
  return "";
}

KwbRun check(const fs::path& task, const fs::path& impl, std::vector<std::string> extra) {
  std::vector<std::string> args = {"check", task.string(), "--impl", impl.string(), "--json"};
  if (std::find(extra.begin(), extra.end(), "--timeout-seconds") == extra.end()) {
    extra.insert(extra.end(), {"--timeout-seconds", "5"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return run_kwb(args);
}

// Three small cases: enough for every cheat to show itself (a second call of a shape, a twin, fresh data), fast
// enough for the whole corpus to run in seconds.
const std::vector<std::string> k_small = {"--case", "zeros", "--case", "many_short_rows", "--case", "decode"};

struct Adversary {
  const char* name;    // tests/adversarial/<name>.cpp
  const char* reason;  // the reason code kwb check must report
  std::vector<std::string> args = k_small;
  const char* detail = "";  // a fragment the reason's detail must contain
};

class AdversaryTest : public ::testing::TestWithParam<Adversary> {};

TEST_P(AdversaryTest, is_rejected_by_check_with_its_reason_and_kwb_survives) {
  const Adversary& a = GetParam();
  KwbRun r = check(k_rmsnorm_lite, k_adversarial / (std::string(a.name) + ".cpp"), a.args);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.errors;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  EXPECT_TRUE(reasons(r.json).contains(a.reason)) << "expected " << a.reason << ", got " << r.json["failures"].dump();
  EXPECT_NE(detail_of(r.json, a.reason).find(a.detail), std::string::npos) << detail_of(r.json, a.reason);
}

INSTANTIATE_TEST_SUITE_P(
    corpus, AdversaryTest,
    ::testing::Values(
        // Caches and replays: fresh data, twins behind the same addresses, the previous result named.
        Adversary{"pointer_cache", "stale_output"}, Adversary{"content_memo", "stale_output"},
        Adversary{"stale_replay", "stale_output"}, Adversary{"stale_memory", "output_not_written"},
        // Memory safety: sealed inputs, canaries and guard pages.
        Adversary{"input_mutation", "input_modified"}, Adversary{"out_of_bounds", "out_of_bounds_write"},
        // Escapes: a verdict needs a complete answer for every call.
        Adversary{"forged_result", "protocol", k_small, "only the control page"}, Adversary{"exit_mid_run", "exited"},
        Adversary{"abort_mid_run", "aborted"},
        // Bytes JSON cannot hold, in the output tail: still the candidate's failure, in a report that parses.
        Adversary{"invalid_utf8", "aborted", k_small, "not utf-8"},
        Adversary{"infinite_loop", "timeout", {"--case", "zeros", "--timeout-seconds", "1"}},
        // The sandbox: each denied system call is named.
        Adversary{"fork_exec", "sandbox_violation", k_small, "clone"},
        Adversary{"orphan_child", "sandbox_violation", k_small, "clone"},
        Adversary{"socket", "sandbox_violation", k_small, "socket"},
        Adversary{"read_files", "sandbox_violation", k_small, "openat"},
        Adversary{"constructor", "sandbox_violation", k_small, "openat"},
        Adversary{"grader_memory", "sandbox_violation", k_small, "process_vm_readv"},
        Adversary{"code_patch", "sandbox_violation", k_small, "mprotect"},
        Adversary{"background_thread", "sandbox_violation", k_small},
        Adversary{"unbounded_memory", "resource_limit", k_small, "RLIMIT_AS"},
        // Before loading: the dynamic symbol table.
        Adversary{"timer_interposition", "forbidden_symbol", k_small, "clock_gettime"},
        // Numerics: an ill-conditioned case.
        Adversary{"precision_downgrade", "numeric_mismatch", {"--case", "dynamic_range"}},
        // Final validation: held-out shapes and a rehearsed timing visit.
        Adversary{"hard_coded_shapes", "output_not_written", {"--held-out", "--case", "zeros", "--case", "decode"}},
        Adversary{"phase_detection", "numeric_mismatch", {"--held-out", "--case", "zeros"}}),
    [](const auto& p) { return std::string(p.param.name); });

// ---- details that the parameterized test cannot express ----------------------------------------------------------

TEST(adversarial_test, constructor_is_stopped_before_it_writes_its_file) {
  const fs::path dropped = "/tmp/kwb-adversarial-constructor";
  std::error_code ec;
  fs::remove(dropped, ec);
  KwbRun r = check(k_rmsnorm_lite, k_adversarial / "constructor.cpp", {"--case", "zeros"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_TRUE(reasons(r.json).contains("sandbox_violation")) << r.json["failures"].dump();
  EXPECT_NE(detail_of(r.json, "sandbox_violation").find("while loading"), std::string::npos);
  EXPECT_FALSE(fs::exists(dropped));
}

TEST(adversarial_test, forged_answer_then_exit_fails_even_as_the_only_call) {
  // Alone, the forged answer arrives while the call is still running: the socket carries no answer then.
  KwbRun r = check(k_rmsnorm_lite, k_adversarial / "forged_result.cpp", {"--case", "zeros", "--calls", "1"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.json["verdict"], "FAIL");
  EXPECT_TRUE(reasons(r.json).contains("protocol")) << r.json["failures"].dump();
}

TEST(adversarial_test, phase_detector_passes_the_plain_check_and_fails_the_rehearsed_timing_visit) {
  KwbRun plain = check(k_rmsnorm_lite, k_adversarial / "phase_detection.cpp", {"--case", "zeros", "--case", "decode"});
  ASSERT_FALSE(plain.json.is_discarded()) << plain.output << plain.errors;
  EXPECT_EQ(plain.json["verdict"], "PASS") << plain.json["failures"].dump();
  KwbRun final_check = check(k_rmsnorm_lite, k_adversarial / "phase_detection.cpp", {"--held-out", "--case", "zeros"});
  ASSERT_FALSE(final_check.json.is_discarded()) << final_check.output << final_check.errors;
  std::set<std::string> failed_cases;
  for (const auto& f : final_check.json["failures"]) failed_cases.insert(f["case"].get<std::string>());
  EXPECT_EQ(failed_cases, std::set<std::string>{"decode~rehearsal"}) << final_check.json["failures"].dump();
}

TEST(adversarial_test, timer_interposition_is_refused_before_any_worker_loads_it) {
  KwbRun r = check(k_rmsnorm_lite, k_adversarial / "timer_interposition.cpp", {"--case", "zeros", "--case", "decode"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  // Refused at load: no case ran a single call, and the check stopped at the first.
  for (const auto& c : r.json["cases"]) EXPECT_EQ(c["calls"], 0) << c.dump();
  EXPECT_EQ(r.json["not_run"], nlohmann::json::array({"decode"}));
  EXPECT_NE(detail_of(r.json, "forbidden_symbol").find("gettimeofday"), std::string::npos);
}

// ---- where threads are allowed --------------------------------------------------------------------------------

TEST(adversarial_test, background_thread_is_work_after_return_where_threads_are_allowed) {
  KwbRun r = check(threads_task(), k_adversarial / "background_thread.cpp", {"--case", "block"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(reasons(r.json).contains("work_after_return")) << r.json["failures"].dump();
  EXPECT_FALSE(reasons(r.json).contains("sandbox_violation")) << r.json["failures"].dump();
}

TEST(adversarial_test, honest_multithreaded_implementation_passes_the_final_check_where_threads_are_allowed) {
  KwbRun r = check(threads_task(), threads_task() / "fused_threads.cpp", {"--held-out"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.json["failures"].dump();
  EXPECT_EQ(r.json["verdict"], "PASS");
}

// ---- no false rejections ------------------------------------------------------------------------------------------

class HonestTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HonestTest, passes_the_final_check_with_held_out_cases_and_the_rehearsal) {
  KwbRun r = check(k_rmsnorm_lite, k_rmsnorm_lite / "cpu" / GetParam(), {"--held-out"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.json["failures"].dump();
  std::set<std::string> names;
  for (const auto& c : r.json["cases"]) names.insert(c["name"].get<std::string>());
  EXPECT_TRUE(names.contains("dynamic_range"));
  EXPECT_TRUE(names.contains("odd_row_length~held_out"));
  EXPECT_TRUE(names.contains("decode~rehearsal"));
}

INSTANTIATE_TEST_SUITE_P(rmsnorm_cpu, HonestTest, ::testing::Values("baseline.cpp", "fused.cpp"),
                         [](const auto& p) { return p.param.substr(0, p.param.find('.')); });

// ---- through compare and validate ---------------------------------------------------------------------------------

KwbRun compare(const fs::path& candidate, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"compare",       k_rmsnorm_lite.string(),
                                   "--candidate",   candidate.string(),
                                   "--workload",    "decode",
                                   "--max-minutes", "0.2",
                                   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_kwb(args);
}

// A thread of the candidate's own computes each call's output as soon as the inputs and poison are in place, before
// go; kwb_run then returns at once. Whatever that thread does is the candidate's: its CPU before go is charged to the
// sample (util/cpu_watch.h), and its CPU between calls and while the worker should be idle is bounded, so the
// comparison against the honest multi-threaded kernel never reads faster (refused, or timed and not faster).
// The attack must reach the stage it acts in: a crash of its own proves nothing, so such a try is made again.
TEST(adversarial_test, compare_charges_work_moved_before_go_to_the_candidate) {
  KwbRun r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    r = run_kwb({"compare", threads_task().string(), "--candidate", (k_adversarial / "before_go_thread.cpp").string(),
                 "--workload", "decode", "--max-minutes", "0.3", "--json"});
    ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
    if (r.json["refused"].dump().find("crash") == std::string::npos) break;
    std::cerr << "attempt " << attempt + 1 << ": the attack crashed: " << r.json["refused"].dump() << "\n";
  }
  // Still open: in one clean-clone run all three tries crashed in check (in others it was timed and charged, FAIL
  // -99%), so a crash refusal is not yet ruled out here; it is never a PASS either way.
  EXPECT_NE(r.json["verdict"], "PASS") << r.json.dump(2);
  for (const auto& w : r.json["workloads"]) {
    EXPECT_NE(w["verdict"], "PASS") << w.dump(2);
    if (w["improvement_pct"].is_number()) {
      EXPECT_LT(w["improvement_pct"].get<double>(), 10.0) << w.dump(2);
    }
  }
}

// A thread of the candidate's own streams memory for 300 us whenever one of its timed calls has returned: when the
// other arm's turn usually comes. The parent stops a worker's whole process group before the other arm's turn
// (WorkerProcess::freeze), so the burst can only slow the thief's own calls: against the honest multi-threaded
// kernel it never reads faster. (On a 2-vCPU machine the workers share one CPU and the woken worker preempts the
// thread, so even with the freeze taken out the thief read 7.5x slower; with more CPUs the burst would run beside
// the other arm's call.)
TEST(adversarial_test, compare_freezes_a_worker_while_the_other_arm_is_timed) {
  KwbRun r = run_kwb({"compare", threads_task().string(), "--candidate", (k_adversarial / "turn_thief.cpp").string(),
                      "--workload", "decode", "--max-minutes", "0.2", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_NE(r.json["verdict"], "PASS") << r.json.dump(2);
  for (const auto& w : r.json["workloads"]) {
    EXPECT_NE(w["verdict"], "PASS") << w.dump(2);
    if (w["improvement_pct"].is_number()) {
      EXPECT_LT(w["improvement_pct"].get<double>(), 5.0) << w.dump(2);
    }
  }
}

TEST(adversarial_test, compare_refuses_to_time_a_pointer_cache) {
  KwbRun r = compare(k_adversarial / "pointer_cache.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.json["verdict"], "REFUSED");
  ASSERT_EQ(r.json["refused"].size(), 1u) << r.json["refused"].dump(2);
  EXPECT_NE(r.json["refused"][0].get<std::string>().find("stale_output"), std::string::npos);
  EXPECT_TRUE(r.json["workloads"].empty());
}

TEST(adversarial_test, compare_refuses_to_time_a_timer_interposer) {
  KwbRun r = compare(k_adversarial / "timer_interposition.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.json["verdict"], "REFUSED");
  ASSERT_EQ(r.json["refused"].size(), 1u);
  EXPECT_NE(r.json["refused"][0].get<std::string>().find("forbidden_symbol"), std::string::npos);
}

TEST(adversarial_test, compare_of_a_phase_detector_is_invalid_with_no_metric) {
  // It passes the plain check (it is honest for 8 calls of a shape) and cheats only once timed. kwb's default
  // visits (7 calls, each visit a fresh process) never reach its 9th call; visits of 22 calls do, and every timed
  // output is validated, so the comparison yields INVALID and no number.
  KwbRun r = compare(k_adversarial / "phase_detection.cpp", {"--samples", "20"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(r.json["verdict"], "INVALID");
  ASSERT_EQ(r.json["workloads"].size(), 1u);
  const auto& w = r.json["workloads"][0];
  EXPECT_TRUE(w["improvement_pct"].is_null());
  EXPECT_TRUE(reasons(w).contains("numeric_mismatch")) << w["failures"].dump();
  // The reason names the arm, the failure and where it happened.
  EXPECT_NE(w["reason"].get<std::string>().find("arm B failed validation during timing (numeric_mismatch at "),
            std::string::npos)
      << w["reason"];
}

// ---- timed data from a secret (issue 39) ------------------------------------------------------------------------

// data_prediction.cpp carries kwb's generator and answers timed calls from a table of predicted sets; its control is
// the same kernel without the table. With the data drawn from a secret, the table never hits and the two read the
// same: no PASS at a 40% bar. With seeds public the attack read +96.9% (32x) on the shipped task's 384^3 square,
// and +90.9% (11x, PASS) on the tests' 160^3 copy (k_gemm_lite) when the timing nonce was made public again by hand.
// The bar is far above 10% because the naive gemm's time swings by a quarter with its layout (docs/timing.md, "When
// the A/A does not settle"): on the Xeon VM a control whose pool drew the slow layout read the same kernel +11.5%
// [+9.8, +13.3] and, once, PASS at 10%. A bar of 40% still fails the attack's tenfold gain.
KwbRun data_prediction_compare(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"compare",
                                   k_gemm_lite.string(),
                                   "--baseline",
                                   (k_adversarial / "data_prediction_control.cpp").string(),
                                   "--candidate",
                                   (k_adversarial / "data_prediction.cpp").string(),
                                   "--workload",
                                   "square",
                                   "--max-minutes",
                                   "0.2",
                                   "--repetitions",
                                   "6",
                                   "--samples",
                                   "5",
                                   "--min-improvement-pct",
                                   "40",
                                   "--layouts",
                                   "2",
                                   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_kwb(args);
}

TEST(adversarial_test, compare_of_a_data_predictor_finds_no_gain_with_the_default_seed) {
  KwbRun r = data_prediction_compare({});  // compare's default --seed 1, the seed the attack was written for
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_NE(r.json["verdict"], "PASS") << r.output;
  ASSERT_EQ(r.json["workloads"].size(), 1u);
  const auto& w = r.json["workloads"][0];
  // Below the attack's gain (+90.9%), above what placement alone moves (above).
  if (!w["improvement_pct"].is_null()) {
    EXPECT_LT(w["improvement_pct"].get<double>(), 50.0) << w.dump();
  }
}

// layout_lottery.cpp is data_prediction_control.cpp's naive gemm with a pad of never-run code before it: the same
// kernel, placed elsewhere (docs/timing.md, "The layout floor"). Whatever its placement is worth on this machine,
// it is not kept: the interval carries the layout floor, applied when the arms' builds explain the blocks, and then
// wider than the interval over the same blocks without it. Four layouts and a first look at 20 blocks: five blocks a
// build, so that the floor is tested from the first look on (it is not below two a build: docs/timing.md).
TEST(adversarial_test, compare_of_a_layout_lottery_is_not_kept) {
  KwbRun r =
      run_kwb({"compare", k_gemm_lite.string(), "--baseline", (k_adversarial / "data_prediction_control.cpp").string(),
               "--candidate", (k_adversarial / "layout_lottery.cpp").string(), "--workload", "square", "--max-minutes",
               "0.25", "--samples", "5", "--layouts", "4", "--repetitions", "20", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  ASSERT_EQ(r.json["workloads"].size(), 1u) << r.output;
  const auto& w = r.json["workloads"][0];
  EXPECT_NE(w["verdict"], "PASS") << w.dump();
  ASSERT_TRUE(w["improvement_pct"].is_number()) << w.dump();
  const auto& floor = w["layout_floor"];
  ASSERT_TRUE(floor.is_object()) << w.dump();
  ASSERT_EQ(floor["arms"].size(), 2u);
  if (floor["applied"].get<bool>()) {
    EXPECT_GT(floor["variance_log"].get<double>(), 0.0);
    if (w["method"] == "paired_t") {  // the floor widens the paired t interval it starts from
      EXPECT_LT(w["ci_low_pct"].get<double>(), w["t_ci_pct"][0].get<double>()) << w.dump();
    }
    EXPECT_NE(w["reason"].get<std::string>().find("layout floor"), std::string::npos) << w["reason"];
  } else {
    EXPECT_EQ(floor["variance_log"].get<double>(), 0.0);
  }
}

TEST(adversarial_test, validate_of_a_data_predictor_with_an_experiments_seed_keeps_the_baseline) {
  const TempDir tmp("kwb-adversarial-prediction");
  const fs::path out = tmp / "bundle";
  KwbRun r = run_kwb({"validate",
                      k_gemm_lite.string(),
                      "--baseline",
                      (k_adversarial / "data_prediction_control.cpp").string(),
                      "--candidate",
                      (k_adversarial / "data_prediction.cpp").string(),
                      "--output-dir",
                      out.string(),
                      "--workload",
                      "square",
                      "--max-minutes",
                      "0.1",
                      "--repetitions",
                      "4",
                      "--samples",
                      "5",
                      "--min-improvement-pct",
                      "10",
                      "--seed",
                      "3",
                      "--layouts",
                      "2",
                      "--no-profile",
                      "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_NE(r.json["decision"], "KEEP_CANDIDATE") << r.json.dump(2);
  EXPECT_EQ(run_kwb({"verify", out.string()}).exit_code, 0);
}

// ---- the steady state (issue 39) -----------------------------------------------------------------------------------

// aging.cpp is fast for its first 64 calls and 30x slower after; --samples 20 gives ordinary visits of about 50 calls,
// which only ever see it young (+26% PASS before long visits existed). The long blocks see it old: INVALID, no metric,
// and the reason names the arm. Its control, young forever, reads its true figure: a verdict with a metric, and no
// arm ages. Which way that figure goes is the machine's: the plain two-pass kernel was 26% faster than the six-pass
// baseline on a Zen 3 VM and 7.5% slower on a Xeon with AVX-512, so the verdict is not asserted, only that it is one.
TEST(adversarial_test, compare_of_a_kernel_that_slows_with_age_is_invalid_and_its_control_is_not) {
  auto run = [](const char* candidate) {
    return run_kwb({"compare", k_rmsnorm_lite.string(), "--candidate", (k_adversarial / candidate).string(),
                    "--workload", "decode", "--samples", "20", "--max-minutes", "0.2", "--json"});
  };
  KwbRun r = run("aging.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.json["verdict"], "INVALID") << r.output;
  const auto& w = r.json["workloads"][0];
  EXPECT_TRUE(w["improvement_pct"].is_null());
  EXPECT_TRUE(w["aging"]["ages"].get<bool>()) << w["aging"].dump();
  EXPECT_NE(w["reason"].get<std::string>().find("arm B's speed changes as its process ages"), std::string::npos)
      << w["reason"];
  KwbRun c = run("aging_control.cpp");
  ASSERT_FALSE(c.json.is_discarded()) << c.output << c.errors;
  EXPECT_NE(c.json["verdict"], "INVALID") << c.output;
  EXPECT_TRUE(c.json["workloads"][0]["improvement_pct"].is_number()) << c.output;
  EXPECT_FALSE(c.json["workloads"][0]["aging"]["ages"].get<bool>());
  EXPECT_GT(c.json["workloads"][0]["aging"]["long_blocks"].get<int>(), 0);
}

TEST(adversarial_test, validate_of_a_kernel_that_slows_with_age_keeps_the_baseline_and_verify_agrees) {
  const TempDir tmp("kwb-adversarial-aging");
  const fs::path out = tmp / "bundle";
  KwbRun r = run_kwb({"validate", k_rmsnorm_lite.string(), "--candidate", (k_adversarial / "aging.cpp").string(),
                      "--output-dir", out.string(), "--workload", "decode", "--samples", "20", "--max-minutes", "0.1",
                      "--no-profile", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.json["decision"], "KEEP_BASELINE") << r.json.dump(2);
  const std::vector<std::string> codes = r.json["reason_codes"];
  EXPECT_NE(std::find(codes.begin(), codes.end(), "ab_speed_changes_with_age"), codes.end()) << r.json.dump(2);
  KwbRun v = run_kwb({"verify", out.string(), "--json"});
  EXPECT_EQ(v.exit_code, 0) << v.output;
}

// untimed_work.cpp does its work 30 times over in every call it believes untimed under the old fixed pattern. The
// secret pattern puts its guesses on timed calls too, and its untimed calls are judged against its timed ones: never
// a PASS. The same kernel without the extra work (aging_control.cpp) reads its true figure in the same setting.
TEST(adversarial_test, compare_of_a_kernel_that_spends_its_time_in_untimed_calls_is_never_a_pass) {
  KwbRun r = run_kwb({"compare", k_rmsnorm_lite.string(), "--candidate", (k_adversarial / "untimed_work.cpp").string(),
                      "--workload", "decode", "--max-minutes", "0.2", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_NE(r.json["verdict"], "PASS") << r.output;
  const auto& w = r.json["workloads"][0];
  if (r.json["verdict"] == "INVALID") {
    EXPECT_TRUE(w["untimed"]["untimed_work"].get<bool>() || w["aging"]["ages"].get<bool>()) << w.dump();
  }
}

TEST(adversarial_test, validate_keeps_the_baseline_against_a_sandbox_violator_with_no_metric) {
  const TempDir tmp("kwb-adversarial-validate");
  const fs::path out = tmp / "bundle";
  KwbRun r =
      run_kwb({"validate", k_rmsnorm_lite.string(), "--candidate", (k_adversarial / "socket.cpp").string(),
               "--output-dir", out.string(), "--workload", "decode", "--max-minutes", "0.1", "--seed", "7", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.json["decision"], "KEEP_BASELINE");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(out / "comparisons" / "ab.json"));
  const nlohmann::json candidate = nlohmann::json::parse(read_file(out / "checks" / "candidate.json"));
  EXPECT_TRUE(reasons(candidate).contains("sandbox_violation")) << candidate["failures"].dump();
  // The violation killed the worker in the first case, so the check stopped there; verify accepts the cases not run.
  EXPECT_EQ(candidate["cases"].size(), 1u) << candidate.dump();
  EXPECT_FALSE(candidate["not_run"].empty()) << candidate.dump();
  EXPECT_EQ(run_kwb({"verify", out.string()}).exit_code, 0);
}

TEST(adversarial_test, validate_rejects_code_special_cased_to_the_published_shapes_at_final_validation) {
  // Every published case passes and the candidate is genuinely faster on the published workloads; only the
  // held-out cases of the final validation can reject it. (No profile, two layouts and a wide A/A bound: the
  // final stage is this test's subject.)
  const TempDir tmp("kwb-adversarial-heldout");
  const fs::path out = tmp / "bundle";
  KwbRun r =
      run_kwb({"validate", k_rmsnorm_lite.string(), "--candidate", (k_adversarial / "hard_coded_shapes.cpp").string(),
               "--output-dir", out.string(), "--workload", "decode", "--max-minutes", "0.1", "--seed", "5",
               "--no-profile", "--layouts", "2", "--max-aa-difference-pct", "25", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  const fs::path final_check = out / "checks" / "candidate_final.json";
  ASSERT_TRUE(fs::exists(final_check)) << r.output;
  const nlohmann::json j = nlohmann::json::parse(read_file(final_check));
  bool held_out = false;
  for (const auto& c : j["cases"]) held_out = held_out || c["name"].get<std::string>().ends_with("~held_out");
  ASSERT_TRUE(held_out) << "validate's final stage must run the held-out cases (CheckOptions::held_out)";
  EXPECT_EQ(r.json["decision"], "KEEP_BASELINE") << r.output;
  EXPECT_TRUE(reasons(j).contains("output_not_written")) << j["failures"].dump();
  EXPECT_EQ(run_kwb({"verify", out.string()}).exit_code, 0);
}

}  // namespace
}  // namespace kwb::test
