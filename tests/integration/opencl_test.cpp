// The OpenCL backend end to end on whatever OpenCL device the machine has (PoCL's CPU device in CI): RMSNorm's
// six-kernel baseline and fused reference pass, every control is rejected for its named reason, work put on a
// private queue is caught, the kernel trace tells six launches from one, and compare runs. docs/backends.md.
#include "cli_helpers.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "util/fs.h"
#include "worker/worker_process.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

namespace kwb::test {
namespace {

const std::filesystem::path k_opencl = k_rmsnorm_lite / "opencl";

std::vector<std::string> check_args(const std::filesystem::path& impl, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"check",  k_rmsnorm_lite.string(), "--backend", "opencl",
                                "--impl", impl.string(),           "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::set<std::string> reasons_of(const nlohmann::json& check) {
  std::set<std::string> out;
  for (const auto& f : check["failures"]) out.insert(f["reason"].get<std::string>());
  return out;
}

// The kernels the first case's first call launched, from the check's trace.
std::vector<std::string> first_trace(const nlohmann::json& check) {
  for (const auto& c : check["cases"]) {
    if (c.contains("kernels")) return c["kernels"].get<std::vector<std::string>>();
  }
  return {};
}

TEST(opencl_test, baseline_passes_and_its_trace_shows_six_kernels_on_the_call_queue) {
  KwbRun r = run_kwb(check_args(k_opencl / "baseline.cpp"));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json["verdict"], "PASS");
  EXPECT_EQ(r.json["backend"], "opencl");
  EXPECT_FALSE(r.json["device"].get<std::string>().empty());
  EXPECT_EQ(r.json["failures"].size(), 0u);
  const std::vector<std::string> expected = {"rms_square", "rms_row_mean", "rms_add_eps",
                                             "rms_rsqrt",  "rms_scale",    "rms_weight"};
  EXPECT_EQ(first_trace(r.json), expected);
  // Every case ran (none skipped) and every case carries its trace.
  for (const auto& c : r.json["cases"]) {
    EXPECT_GT(c["calls"].get<int>(), 0) << c["name"];
    EXPECT_EQ(c["kernels"].size(), 6u) << c["name"];
  }
}

TEST(opencl_test, fused_passes_with_one_kernel) {
  KwbRun r = run_kwb(check_args(k_opencl / "fused.cpp"));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json["verdict"], "PASS");
  EXPECT_EQ(first_trace(r.json), std::vector<std::string>{"rmsnorm_fused"});
}

// Each control is the fused kernel with one bug (no_eps and no_weight written in task.toml as a change of
// opencl/fused.cpp, the others as files); three small cases are enough to expose every one of them. Checked by
// name, `kwb check --control`, whichever way the task gives it.
TEST(opencl_test, every_control_is_rejected_for_its_named_reason) {
  const std::vector<std::pair<std::string, std::string>> controls = {
      {"no_eps", "numeric_mismatch"}, {"no_weight", "numeric_mismatch"},  {"wrong_axis", "numeric_mismatch"},
      {"zeros", "numeric_mismatch"},  {"mutate_input", "input_modified"}, {"stale_output_replay", "stale_output"}};
  for (const auto& [name, reason] : controls) {
    KwbRun r = run_kwb({"check", k_rmsnorm_lite.string(), "--backend", "opencl", "--control", name, "--json", "--case",
                        "zeros", "--case", "tiny_magnitude", "--case", "odd_row_length"});
    ASSERT_FALSE(r.json.is_discarded()) << name << ": " << r.output << r.errors;
    EXPECT_EQ(r.exit_code, 1) << name;
    EXPECT_EQ(r.json["verdict"], "FAIL") << name;
    EXPECT_TRUE(reasons_of(r.json).contains(reason)) << name << " expected " << reason << ": " << r.output;
    EXPECT_EQ(r.json["control"]["expected_reason_seen"], true) << name;
  }
}

// The classic cheat: the kernel goes on a queue of the implementation's own, so that a harness which synchronizes
// only the queue it handed out stops its timer before the work is done. kwb finishes every queue inside the timer
// (the outputs are therefore complete and correct) and rejects the implementation for trying, whether or not it
// waited for its queue itself.
TEST(opencl_test, work_on_a_private_queue_is_caught_and_still_finished_inside_the_timer) {
  for (const char* name : {"other_queue.cpp", "other_queue_finished.cpp"}) {
    KwbRun r = run_kwb(check_args(k_source_dir / "tests" / "adversarial" / "opencl" / name,
                                  {"--case", "odd_row_length", "--case", "prefill"}));
    ASSERT_FALSE(r.json.is_discarded()) << name << ": " << r.output << r.errors;
    EXPECT_EQ(r.exit_code, 1) << name;
    EXPECT_EQ(reasons_of(r.json), std::set<std::string>{"work_off_queue"}) << name << ": " << r.output;
    for (const auto& f : r.json["failures"]) {
      EXPECT_NE(f["detail"].get<std::string>().find("rmsnorm_fused"), std::string::npos) << f.dump();
    }
  }
}

// A write just past y in device memory: the guard regions around every device tensor catch it.
TEST(opencl_test, a_write_past_a_device_tensor_is_caught_by_its_guards) {
  KwbRun r = run_kwb(check_args(k_source_dir / "tests" / "adversarial" / "opencl" / "out_of_bounds.cpp",
                                {"--case", "zeros", "--case", "prefill"}));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(reasons_of(r.json), std::set<std::string>{"out_of_bounds_write"}) << r.output;
  for (const auto& f : r.json["failures"]) EXPECT_EQ(f["assertion"], "no_write_outside_on_device:y") << f.dump();
}

// A read just past x on the device (issue 42): on PoCL's CPU device an input's buffer is the worker's fenced,
// read-only mapping, so the read faults; check names the input, and compare refuses the candidate before timing.
TEST(opencl_test, a_read_past_a_device_input_is_out_of_bounds_read_in_check_and_compare) {
  const std::filesystem::path candidate = k_source_dir / "tests" / "adversarial" / "opencl" / "read_past_input.cpp";
  KwbRun r = run_kwb(check_args(candidate, {"--case", "prefill", "--case", "odd_row_length"}));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(reasons_of(r.json), std::set<std::string>{"out_of_bounds_read"}) << r.output;
  for (const auto& f : r.json["failures"]) {
    EXPECT_NE(f["detail"].get<std::string>().find("past the end of input 'x'"), std::string::npos) << f.dump();
  }
  KwbRun c = run_kwb({"compare", k_rmsnorm_lite.string(), "--backend", "opencl", "--candidate", candidate.string(),
                      "--workload", "decode", "--json"});
  ASSERT_FALSE(c.json.is_discarded()) << c.output << c.errors;
  EXPECT_EQ(c.json["verdict"], "REFUSED") << c.output;
  ASSERT_EQ(c.json["refused"].size(), 1u) << c.output;
  EXPECT_NE(c.json["refused"][0].get<std::string>().find("out_of_bounds_read"), std::string::npos) << c.output;
}

// PoCL's threads start with the context, before the sandbox: the implementation itself is held to the task's
// thread limit (one), and a thread it starts to enqueue work after kwb_run returns is a sandbox violation.
TEST(opencl_test, the_task_thread_limit_holds_for_opencl_implementations) {
  KwbRun r =
      run_kwb(check_args(k_source_dir / "tests" / "adversarial" / "opencl" / "late_enqueue.cpp", {"--case", "zeros"}));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(reasons_of(r.json), std::set<std::string>{"sandbox_violation"}) << r.output;
}

// Overwriting the worker's table of OpenCL functions (clFinish made a no-op) would stop the timer before the kernel
// ran; the table is read-only and sealed before the implementation loads, so the write kills the worker.
TEST(opencl_test, a_candidate_cannot_patch_the_workers_opencl_table) {
  KwbRun r = run_kwb(
      check_args(k_source_dir / "tests" / "adversarial" / "opencl" / "patch_sync_table.cpp", {"--case", "zeros"}));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(reasons_of(r.json).contains("crashed")) << r.output;
  EXPECT_EQ(r.json["assertions"]["passed"].get<int>(), 0) << r.output;
}

// PoCL with one thread (the setting docs/backends.md recommends), where work on a queue nobody finishes still runs
// before kwb's read-back and so leaves correct outputs: the setting in which such work once passed check.
class OneDriverThread {
public:
  OneDriverThread() { ::setenv("POCL_MAX_PTHREAD_COUNT", "1", 1); }
  ~OneDriverThread() { ::unsetenv("POCL_MAX_PTHREAD_COUNT"); }
  OneDriverThread(const OneDriverThread&) = delete;
  OneDriverThread& operator=(const OneDriverThread&) = delete;
};

// A queue created through the driver's ICD dispatch table (the first word of every cl_* object) instead of an
// exported name, with the kernel on it ordered behind a legal fill on the call's queue. The worker points the
// table's queue and enqueue entries at its wrappers before the implementation loads, so the queue is seen (and
// finished inside the timer) and the enqueue on it is reported.
TEST(opencl_test, a_queue_created_through_the_icd_dispatch_table_is_seen_and_its_work_reported) {
  OneDriverThread one_thread;
  KwbRun r = run_kwb(check_args(k_source_dir / "tests" / "adversarial" / "opencl" / "icd_dispatch_queue.cpp",
                                {"--case", "odd_row_length", "--case", "prefill"}));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(reasons_of(r.json), std::set<std::string>{"work_off_queue"}) << r.output;
  for (const auto& f : r.json["failures"]) {
    EXPECT_NE(f["detail"].get<std::string>().find("rmsnorm_fused"), std::string::npos) << f.dump();
  }
}

// Rewriting the driver's dispatch table (clFinish that waits for nothing, timestamps that read 0) reached kwb's own
// synchronization through the loader. kwb now calls the driver's functions it took from the table before the
// implementation loaded, and compares the table with what it left there around every call: the rewrite is a
// sandbox violation, and compare refuses the candidate instead of timing it.
TEST(opencl_test, a_rewrite_of_the_drivers_dispatch_table_is_a_sandbox_violation_and_is_never_timed) {
  OneDriverThread one_thread;
  const auto attack = k_source_dir / "tests" / "adversarial" / "opencl" / "icd_patch_finish.cpp";
  KwbRun r = run_kwb(check_args(attack, {"--case", "zeros"}));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(reasons_of(r.json), std::set<std::string>{"sandbox_violation"}) << r.output;
  for (const auto& f : r.json["failures"]) {
    const std::string detail = f["detail"].get<std::string>();
    EXPECT_NE(detail.find("clFinish"), std::string::npos) << detail;
    EXPECT_NE(detail.find("clGetEventProfilingInfo"), std::string::npos) << detail;
  }
  KwbRun c = run_kwb({"compare", k_rmsnorm_lite.string(), "--backend", "opencl", "--baseline",
                      (k_opencl / "fused.cpp").string(), "--candidate", attack.string(), "--workload", "decode",
                      "--max-minutes", "0.1", "--json"});
  ASSERT_FALSE(c.json.is_discarded()) << c.output << c.errors;
  EXPECT_EQ(c.exit_code, 1) << c.output;
  ASSERT_EQ(c.json["refused"].size(), 1u) << c.output;
  EXPECT_NE(c.json["refused"][0].get<std::string>().find("sandbox_violation"), std::string::npos) << c.output;
  EXPECT_TRUE(c.json["workloads"].empty()) << c.output;
}

// Work moved into kwb's own uploads (issue 39, item 3): the candidate points PoCL's driver `write` entry at a hook
// that computes y on the host while kwb uploads y's poison, and launches nothing. Every output is exact, the window
// holds nothing, and the work shows as B's wall time outside the window over A's: INVALID, no metric, in compare and
// in validate (KEEP_BASELINE ab_work_outside_window, and verify re-derives it). The same kernel without the hook,
// fused.cpp against itself in validate's A/A, reads its true figure: no difference.
TEST(opencl_test, work_moved_into_the_uploads_through_the_drivers_ops_table_is_invalid) {
  const auto attack = k_source_dir / "tests" / "adversarial" / "opencl" / "driver_ops_upload.cpp";
  KwbRun check = run_kwb(check_args(attack, {"--case", "zeros", "--case", "prefill"}));
  ASSERT_FALSE(check.json.is_discarded()) << check.output << check.errors;
  EXPECT_EQ(check.json["verdict"], "PASS") << check.output;  // correct: the cheat is in the time, not the values
  auto compare = [&](const std::filesystem::path& candidate) {
    return run_kwb({"compare", k_rmsnorm_lite.string(), "--backend", "opencl", "--baseline",
                    (k_opencl / "fused.cpp").string(), "--candidate", candidate.string(), "--workload", "prefill",
                    "--max-minutes", "0.2", "--json"});
  };
  // The signal is the hook's host loop, ~400 us a call on prefill against uploads of ~250 us. On a host that takes
  // the vCPUs away (a CPU hog beside the test, or a VM's steal), the uploads' time turns bimodal, +2 ms on a share
  // of the calls in both arms, and that buries the loop: the check then finds nothing and the gain reads as PASS
  // (docs/threat-model.md, "Work moved outside the window", the limit). The defence is for a quiet machine; a
  // disturbed spell gets up to two more tries, and one of three must see the work moved.
  // The attack itself is not robust: it writes into device memory it learnt from earlier uploads and now and then
  // crashes in its check (SIGSEGV), which says nothing about the defence; such a try is made again too.
  KwbRun c;
  for (int attempt = 0; attempt < 3; ++attempt) {
    c = compare(attack);
    ASSERT_FALSE(c.json.is_discarded()) << c.output << c.errors;
    if (c.json["workloads"].empty() && c.json.dump().find("crashed") != std::string::npos) {
      std::cerr << "attempt " << attempt + 1 << ": the attack crashed in its check\n";
      continue;
    }
    ASSERT_EQ(c.json["workloads"].size(), 1u) << c.output;
    if (c.json["workloads"][0]["verdict"] == "INVALID") break;
    std::cerr << "attempt " << attempt + 1
              << " did not see the work moved (a disturbed spell?): " << c.json["workloads"][0]["outside_window"].dump()
              << "\n";
  }
  const auto& w = c.json["workloads"][0];
  EXPECT_EQ(w["verdict"], "INVALID") << w.dump();
  EXPECT_TRUE(w["improvement_pct"].is_null()) << w.dump();
  EXPECT_TRUE(w["outside_window"]["moved"].get<bool>()) << w["outside_window"].dump();
  EXPECT_NE(w["reason"].get<std::string>().find("outside"), std::string::npos) << w["reason"];
  const TempDir tmp("kwb-opencl-ops-upload");
  const auto out = tmp / "bundle";
  KwbRun v;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::filesystem::remove_all(out);
    v = run_kwb({"validate", k_rmsnorm_lite.string(), "--backend", "opencl", "--candidate", attack.string(),
                 "--baseline", (k_opencl / "fused.cpp").string(), "--output-dir", out.string(), "--workload", "prefill",
                 "--max-minutes", "0.2", "--layouts", "2", "--no-profile", "--json"});
    ASSERT_FALSE(v.json.is_discarded()) << v.output << v.errors;
    if (v.json.dump().find("(crashed)") == std::string::npos) break;
    std::cerr << "validate attempt " << attempt + 1 << ": the attack crashed in a check\n";
  }
  EXPECT_EQ(v.json["decision"], "KEEP_BASELINE") << v.json.dump(2);
  const std::vector<std::string> codes = v.json["reason_codes"];
  EXPECT_NE(std::find(codes.begin(), codes.end(), "ab_work_outside_window"), codes.end()) << v.json.dump(2);
  EXPECT_EQ(run_kwb({"verify", out.string()}).exit_code, 0);
  // The control: validate's A/A is the same kernel without the hook, fused.cpp against itself, and it reads its
  // true figure, no difference and nothing moved outside the window.
  const nlohmann::json aa = nlohmann::json::parse(read_file(out / "comparisons" / "aa.json"));
  ASSERT_EQ(aa["workloads"].size(), 1u) << aa.dump();
  const auto& cw = aa["workloads"][0];
  EXPECT_NE(cw["verdict"], "INVALID") << cw.dump();
  EXPECT_FALSE(cw["outside_window"]["moved"].get<bool>()) << cw.dump();
  // A 0.2-minute A/A on PoCL reads within about 10% (+8.2% seen on a clean clone); the control is about the window.
  EXPECT_LT(std::abs(cw["improvement_pct"].get<double>()), 10.0) << cw.dump();
}

TEST(opencl_test, profile_traces_six_kernels_for_the_baseline_and_one_for_fused) {
  for (const auto& [file, kernels] : {std::pair<std::string, size_t>{"baseline.cpp", 6}, {"fused.cpp", 1}}) {
    KwbRun r = run_kwb({"profile", k_rmsnorm_lite.string(), "--backend", "opencl", "--impl", (k_opencl / file).string(),
                        "--workload", "prefill", "--json"});
    ASSERT_FALSE(r.json.is_discarded()) << file << ": " << r.output << r.errors;
    EXPECT_EQ(r.exit_code, 0) << file << ": " << r.errors;
    ASSERT_EQ(r.json["workloads"].size(), 1u);
    const auto& dev = r.json["workloads"][0]["device"];
    ASSERT_TRUE(dev["available"].get<bool>()) << dev.dump();
    EXPECT_EQ(dev["commands_per_call"].get<double>(), static_cast<double>(kernels)) << file;
    ASSERT_EQ(dev["kernels"].size(), kernels) << file;
    for (const auto& k : dev["kernels"]) {
      EXPECT_EQ(k["launches_per_call"].get<double>(), 1.0) << k.dump();
      EXPECT_GT(k["median_device_ns"].get<double>(), 0.0) << k.dump();  // profiling events gave device times
      EXPECT_TRUE(k["on_call_stream"].get<bool>()) << k.dump();
    }
    EXPECT_GT(dev["median_call_device_ns"].get<double>(), 0.0);
    EXPECT_TRUE(r.json["workloads"][0]["roofline"]["measured"].get<bool>());
    // Host-side tools are not pretended: they would count the runtime, not the kernels.
    EXPECT_FALSE(r.json["workloads"][0]["instructions"]["available"].get<bool>());
  }
}

TEST(opencl_test, compare_runs_end_to_end_with_device_times_in_every_sample) {
  const TempDir tmp("kwb-opencl-compare");
  const auto dir = tmp / "out";
  KwbRun r = run_kwb({"compare", k_rmsnorm_lite.string(), "--backend", "opencl", "--candidate",
                      (k_opencl / "fused.cpp").string(), "--workload", "prefill", "--max-minutes", "0.3",
                      "--output-dir", dir.string(), "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  ASSERT_EQ(r.json["workloads"].size(), 1u) << r.output;
  const auto& w = r.json["workloads"][0];
  // The whole record when it stops short: what ended it (a failure, the steady state, work outside the window).
  ASSERT_GE(w["blocks"].get<int>(), 10) << w.dump();
  // Six launches against one on a CPU device: the fused kernel is faster by a wide margin.
  ASSERT_TRUE(w["ci_low_pct"].is_number()) << w.dump();
  EXPECT_GT(w["ci_low_pct"].get<double>(), 0.0) << w.dump();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::istringstream csv(read_file(dir / "samples.csv"));
  std::string line;
  std::getline(csv, line);
  ASSERT_TRUE(line.find(",ns,output_valid,device_ns,") != std::string::npos) << line;
  size_t rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    ASSERT_GE(f.size(), 11u) << line;
    const int64_t ns = std::stoll(f[8]);
    const int64_t device_ns = std::stoll(f[10]);
    EXPECT_GT(device_ns, 0) << line;
    EXPECT_LE(device_ns, ns + ns / 100 + 20000) << line;  // the host window contains the device's events
  }
  EXPECT_GT(rows, 100u);
}

// Cold mode: a fill of twice the device's cache before every call, outside the timer. It must leave every call
// valid, and be recorded.
TEST(opencl_test, cold_mode_compares_and_is_recorded) {
  KwbRun r = run_kwb({"compare", k_rmsnorm_lite.string(), "--backend", "opencl", "--candidate",
                      (k_opencl / "fused.cpp").string(), "--workload", "decode", "--max-minutes", "0.1", "--warmups",
                      "1", "--samples", "1", "--cold", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.json["cold"], true);
  EXPECT_EQ(r.json["backend"], "opencl");
  EXPECT_TRUE(r.json["refused"].empty()) << r.output;
  ASSERT_EQ(r.json["workloads"].size(), 1u) << r.output;
  EXPECT_GE(r.json["workloads"][0]["blocks"].get<int>(), 10);
}

// A takeover of the worker's upload path (tests/adversarial/opencl/vtable_takeover.cpp): after its first call the
// candidate points the worker's backend object at a copy of its vtable whose upload computes the output on the host
// before go, and kwb_run returns at once. The worker calls its backend between the request and the read-back only
// through its sealed call path (backend/backend.h, CallPath), so the rewritten vtable is never called: the outputs
// stay the parent's poison and the check fails on them.
TEST(opencl_test, a_takeover_of_the_backends_vtable_reaches_nothing_the_worker_calls) {
  KwbRun r = run_kwb(check_args(k_source_dir / "tests" / "adversarial" / "opencl" / "vtable_takeover.cpp"));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  ASSERT_FALSE(r.json["failures"].empty()) << r.output;
  const auto& first = r.json["failures"][0];
  EXPECT_EQ(first["call"], 1) << "the first call is honest; the second finds its takeover ineffective: " << first;
  EXPECT_NE(first["reason"], "timeout") << first;
}

TEST(opencl_test, no_platform_is_exit_69_with_the_reason_and_no_build) {
  ::setenv("OCL_ICD_VENDORS", "/nonexistent-kwb-vendors", 1);
  KwbRun r = run_kwb(check_args(k_opencl / "fused.cpp"));
  ::unsetenv("OCL_ICD_VENDORS");
  EXPECT_EQ(r.exit_code, 69) << r.output << r.errors;
  EXPECT_NE(r.errors.find("no OpenCL platform"), std::string::npos) << r.errors;
  EXPECT_TRUE(r.output.empty()) << r.output;
}

TEST(opencl_test, an_out_of_range_device_index_is_a_usage_error) {
  ::setenv("KWB_OPENCL_DEVICE", "7", 1);
  KwbRun r = run_kwb(check_args(k_opencl / "fused.cpp"));
  ::unsetenv("KWB_OPENCL_DEVICE");
  EXPECT_EQ(r.exit_code, 64) << r.output << r.errors;
  EXPECT_NE(r.errors.find("KWB_OPENCL_DEVICE=7"), std::string::npos) << r.errors;
}

// PoCL leaves an empty tempfile_XXXXXX in its cache directory every time it starts; kwb removes such leftovers once
// the worker is gone, so an implementation's runtime directory keeps its compiled kernels and nothing per worker.
TEST(opencl_test, the_runtime_cache_keeps_nothing_of_finished_workers_but_their_kernels) {
  // A runtime directory of its own: other tests run beside this one, and a PoCL worker of theirs that is still
  // running has its tempfiles in the directory of its implementation. The directory is keyed on the implementation's
  // identity, so this test checks a copy of fused.cpp that no other test builds (its source says this process's
  // pid). This process computes the directory's key as kwb does: same environment, same worker executable.
  const std::string cache = (std::filesystem::temp_directory_path() / ("kwb-ocl-cache-" + std::to_string(::getpid())));
  const std::filesystem::path own = std::filesystem::path(cache) / "impl" / "fused.cpp";
  std::filesystem::create_directories(own.parent_path());
  write_file_atomic(own, read_file(k_opencl / "fused.cpp") + "// the runtime cache test of process " +
                             std::to_string(::getpid()) + "\n");
  const char* old_cache = std::getenv("KWB_CACHE_DIR");
  const std::string restore = old_cache != nullptr ? old_cache : "";
  ::setenv("KWB_CACHE_DIR", cache.c_str(), 1);
  ::setenv("KWB_WORKER", KWB_WORKER_BINARY, 1);
  std::string identity;
  for (int run = 0; run < 2; ++run) {
    KwbRun r = run_kwb(check_args(own, {"--case", "decode"}));
    ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
    ASSERT_EQ(r.exit_code, 0) << r.output;
    identity = r.json["implementation"]["identity"]["key"].get<std::string>();
  }
  const std::filesystem::path dir =
      worker_runtime_cache_dir(BackendKind::opencl, worker_runtime_cache_key(BackendKind::opencl, identity));
  ::unsetenv("KWB_WORKER");
  EXPECT_FALSE(std::filesystem::is_empty(dir)) << dir << ": the compiled kernels are kept";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_FALSE(e.path().filename().string().starts_with("tempfile_")) << e.path();
  }
  std::filesystem::remove_all(cache);
  std::filesystem::remove_all(dir);  // no other test uses it
  if (restore.empty()) {
    ::unsetenv("KWB_CACHE_DIR");
  } else {
    ::setenv("KWB_CACHE_DIR", restore.c_str(), 1);
  }
}

// tests/adversarial/opencl/cache_poison.cpp walks every runtime cache it can find in kwb_setup and tries to plant
// and rewrite files in the other identities' folders (each success makes its outputs wrong). Here another identity's
// cache holds a compiled kernel: after the attacker's check it is byte for byte what it was, with nothing added, and
// when kwb is root it is root's and private to it (no worker user can even list it).
TEST(opencl_test, a_worker_cannot_write_another_identitys_runtime_cache) {
  ::setenv("KWB_WORKER", KWB_WORKER_BINARY, 1);
  const std::filesystem::path victim = worker_runtime_cache_dir(
      BackendKind::opencl, worker_runtime_cache_key(BackendKind::opencl, "victim-of-" + std::to_string(::getpid())));
  ::unsetenv("KWB_WORKER");
  write_file_atomic(victim / "kernel.so", "the baseline's compiled kernel");
  KwbRun r = run_kwb(check_args(k_adversarial / "opencl" / "cache_poison.cpp", {"--case", "decode"}));
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json["verdict"], "PASS") << r.json["failures"].dump(2);
  EXPECT_EQ(r.output.find("escaped"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(victim / "kernel.so"), "the baseline's compiled kernel");
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(victim)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"kernel.so"});
  if (::geteuid() == 0) {
    struct stat st {};
    ASSERT_EQ(::stat(victim.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_mode & 077, 0u);
  }
  std::filesystem::remove_all(victim);
}

}  // namespace
}  // namespace kwb::test
