// End-to-end `kwb compare`: refusal to time rejected code, raw samples on disk, A/A and A/B on the real task.
#include "cli_helpers.h"
#include "support/temp_dir.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>

namespace kwb::test {
namespace {

// A workload the task lacks is a usage error before anything is built or checked, and the message lists the task's
// timing cases; check's --case lists every case.
TEST(compare_cli_test, an_unknown_workload_is_refused_at_once_with_the_task_s_workloads) {
  const TempDir tmp("kwb-compare-nope");
  const auto dir = tmp / "out";
  KwbRun r =
      run_kwb({"compare", k_rmsnorm_lite.string(), "--candidate", (k_rmsnorm_lite / "cpu" / "fused.cpp").string(),
               "--workload", "nope", "--output-dir", dir.string()});
  EXPECT_EQ(r.exit_code, 64) << r.errors;
  EXPECT_NE(r.errors.find("--workload nope"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("timing cases are: "), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("decode"), std::string::npos) << r.errors;
  EXPECT_EQ(r.errors.find("build"), std::string::npos) << "nothing was built: " << r.errors;
  EXPECT_FALSE(std::filesystem::exists(dir / "samples.csv"));
  KwbRun c = run_kwb(
      {"check", k_rmsnorm_lite.string(), "--impl", (k_rmsnorm_lite / "cpu" / "fused.cpp").string(), "--case", "nope"});
  EXPECT_EQ(c.exit_code, 64) << c.errors;
  EXPECT_NE(c.errors.find("--case nope"), std::string::npos) << c.errors;
  EXPECT_NE(c.errors.find("zeros"), std::string::npos) << "a correctness case is listed too: " << c.errors;
}

// A first word that is no command names itself and the commands; --version names the commit kwb was built from.
TEST(compare_cli_test, an_unknown_command_is_named_and_the_version_carries_the_commit) {
  KwbRun r = run_kwb({"frobnicate"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.errors.find("'frobnicate' is not a kwb command"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("check, compare, compare-saved, validate"), std::string::npos) << r.errors;
  KwbRun v = run_kwb({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.output.rfind("kwb ", 0), 0u) << v.output;
  EXPECT_NE(v.output.find(" ("), std::string::npos) << "the commit, or 'unknown' outside a checkout: " << v.output;
}

// A bundle folder that is not there: verify fails it (exit 3, "not verified") and report cannot read it (exit 74), as
// docs/cli.md's exit-code table says.
TEST(compare_cli_test, verify_and_report_of_a_missing_bundle_exit_3_and_74) {
  const TempDir tmp("kwb-compare-no-bundle");
  const auto dir = tmp / "out";  // never made
  KwbRun v = run_kwb({"verify", dir.string(), "--json"});
  EXPECT_EQ(v.exit_code, 3) << v.output << v.errors;
  ASSERT_FALSE(v.json.is_discarded()) << v.output;
  EXPECT_EQ(v.json["ok"], false);
  EXPECT_EQ(v.json["authenticity"]["established"], "not verified");
  ASSERT_EQ(v.json["problems"].size(), 1u);
  EXPECT_NE(v.json["problems"][0].get<std::string>().find("no such bundle folder"), std::string::npos);
  KwbRun r = run_kwb({"report", dir.string()});
  EXPECT_EQ(r.exit_code, 74) << r.errors;
  EXPECT_NE(r.errors.find("no such bundle folder"), std::string::npos) << r.errors;
}

TEST(compare_cli_test, rejected_candidate_gets_no_timing_at_all) {
  const TempDir tmp("kwb-compare-refused");
  const auto dir = tmp / "out";
  KwbRun r = run_kwb({"compare", k_rmsnorm_lite.string(), "--candidate",
                      (k_rmsnorm_lite / "cpu" / "controls" / "no_weight.cpp").string(), "--output-dir", dir.string(),
                      "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.json["verdict"], "REFUSED");
  ASSERT_EQ(r.json["refused"].size(), 1u);
  EXPECT_NE(r.json["refused"][0].get<std::string>().find("numeric_mismatch"), std::string::npos);
  EXPECT_TRUE(r.json["workloads"].empty());
  // Not one sample was taken.
  EXPECT_EQ(read_file(dir / "samples.csv"),
            "workload,block,arm,order_position,pid,sample_index,warmup,input_set,ns,output_valid,device_ns,layout,"
            "stack_offset,tensor_offsets,pre_cpu_ns,post_cpu_ns,window_ns,gap_cpu_ns,outside_cpu_ns,outside_wall_ns\n");
  // A compare folder is not a validate bundle: report refuses it by name instead of rendering an empty report.
  KwbRun rep = run_kwb({"report", dir.string()});
  EXPECT_EQ(rep.exit_code, 74) << rep.errors;
  EXPECT_NE(rep.errors.find("a compare result, not a validate bundle"), std::string::npos) << rep.errors;
  EXPECT_FALSE(std::filesystem::exists(dir / "report.md"));
}

// compare builds in two rounds (docs/timing.md, "Layout randomization"): the plain builds, which the checks need,
// then the padded ones once both arms have passed. A candidate refused at its check, or one that does not build, is
// built once, not once per layout; one whose padded build breaks (it defines the pad's own function, so only the
// padded link fails) passes its check and is then refused, with nothing timed, as the candidate's failure (exit 1),
// never as the user's input error (65).
TEST(compare_cli_test, a_refused_candidate_is_built_once_and_one_whose_padded_build_breaks_is_refused) {
  const TempDir tmp("kwb-compare-two-rounds");
  const auto compare_of = [](const std::filesystem::path& candidate) {
    return run_kwb(
        {"compare", k_rmsnorm_lite.string(), "--candidate", candidate.string(), "--workload", "decode", "--json"});
  };
  for (const std::filesystem::path& refused : {k_rmsnorm_lite / "cpu" / "controls" / "no_weight.cpp",
                                               k_source_dir / "tests" / "candidates" / "compile_error.cpp"}) {
    KwbRun r = compare_of(refused);
    ASSERT_FALSE(r.json.is_discarded()) << refused << r.output << r.errors;
    EXPECT_EQ(r.exit_code, 1) << refused;
    EXPECT_EQ(r.json["verdict"], "REFUSED") << refused;
    EXPECT_EQ(r.json["arms"][0]["layouts"].size(), 1u) << refused << ": the padded builds waited for the checks";
    EXPECT_EQ(r.json["arms"][1]["layouts"].size(), 1u) << refused << ": the padded builds waited for the checks";
  }
  const std::filesystem::path clash = tmp / "pad_clash.cpp";
  write_file_atomic(clash, read_file(k_rmsnorm_lite / "cpu" / "fused.cpp") +
                               "\n// The padded build of layout 1 links a function of this name (builder.cpp).\n"
                               "void kwb_layout_pad_1() {}\n");
  KwbRun r = compare_of(clash);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.output << r.errors;
  EXPECT_EQ(r.json["verdict"], "REFUSED");
  ASSERT_EQ(r.json["checks"].size(), 2u) << r.output;
  EXPECT_EQ(r.json["checks"][1]["verdict"], "PASS") << "the plain build is the one checked";
  ASSERT_EQ(r.json["refused"].size(), 1u) << r.output;
  EXPECT_NE(r.json["refused"][0].get<std::string>().find("arm B: its layout 1"), std::string::npos) << r.output;
  EXPECT_TRUE(r.json["workloads"].empty());
  EXPECT_NE(r.errors.find("kwb_layout_pad_1"), std::string::npos) << "the linker's lines: " << r.errors;
}

TEST(compare_cli_test, fused_beats_baseline_and_every_sample_is_on_disk) {
  const TempDir tmp("kwb-compare-ab");
  const auto dir = tmp / "out";
  KwbRun r = run_kwb({"compare", k_rmsnorm_lite.string(), "--candidate",
                      (k_rmsnorm_lite / "cpu" / "fused.cpp").string(), "--workload", "decode", "--workload", "prefill",
                      "--min-improvement-pct", "10", "--max-minutes", "0.5", "--output-dir", dir.string(), "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json["schema"], "kwb.compare");
  EXPECT_EQ(r.json["verdict"], "PASS");
  ASSERT_EQ(r.json["workloads"].size(), 2u);
  size_t reported = 0;
  for (const auto& w : r.json["workloads"]) {
    EXPECT_EQ(w["verdict"], "PASS");
    EXPECT_GE(w["ci_low_pct"].get<double>(), 10.0);
    for (const char* k : {"name", "improvement_pct", "ci_low_pct", "ci_high_pct", "blocks", "samples", "mde_pct"}) {
      EXPECT_TRUE(w.contains(k)) << k;
    }
    reported += w["samples"].get<size_t>();
  }
  // samples.csv: every timed sample the summary counts, plus warm-ups and the pilot, all validated.
  std::istringstream csv(read_file(dir / "samples.csv"));
  std::string line;
  std::getline(csv, line);
  size_t timed = 0, rows = 0;
  std::vector<ChargeRow> charges;
  std::vector<int64_t> samples;
  while (std::getline(csv, line)) {
    ++rows;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    ASSERT_EQ(f.size(), 20u) << line;
    EXPECT_EQ(f[9], "1") << line;    // output_valid
    EXPECT_EQ(f[18], "-1") << line;  // outside_cpu_ns and outside_wall_ns: device backends only
    EXPECT_EQ(f[19], "-1") << line;
    EXPECT_EQ(f[10], "-1") << line;  // device_ns: the cpu backend has no device clock
    // The visit's layout: a build of the arm's pool of 8, a 16-byte-aligned stack offset, three tensor offsets.
    EXPECT_LT(std::stoi(f[11]), 8) << line;
    EXPECT_EQ(std::stoi(f[12]) % 16, 0) << line;
    EXPECT_EQ(std::count(f[13].begin(), f[13].end(), '/'), 2) << line;
    // The charge: figures (>= 0) where the worker's task clock can be read, -1 in both otherwise; the sample is the
    // window plus both beyond the block's reference floor (util/cpu_watch.h, checked below).
    EXPECT_EQ(f[14] == "-1", f[15] == "-1") << line;
    charges.push_back({f[0], std::stoi(f[1]), f[2], f[6] == "1", f[9] == "1", std::stoll(f[14]), std::stoll(f[15]),
                       std::stoll(f[16])});
    samples.push_back(std::stoll(f[8]));
    if (f[6] == "0" && f[1] != "-1") ++timed;
  }
  EXPECT_EQ(samples, expected_samples(charges));
  EXPECT_EQ(timed, reported);
  EXPECT_GT(rows, timed);
  nlohmann::json on_disk = nlohmann::json::parse(read_file(dir / "compare.json"));
  EXPECT_EQ(on_disk["verdict"], "PASS");
}

TEST(compare_cli_test, aa_runs_the_baseline_layout_pool_against_itself) {
  KwbRun r = run_kwb({"compare", k_rmsnorm_lite.string(), "--aa", "--workload", "decode", "--max-aa-difference-pct",
                      "5", "--max-minutes", "0.25", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output;
  EXPECT_EQ(r.json["mode"], "aa");
  ASSERT_EQ(r.json["arms"].size(), 2u);
  EXPECT_EQ(r.json["arms"][1]["label"], "A'");
  // Both arms draw from the same pool of the baseline's builds: eight layouts, each its own binary.
  EXPECT_EQ(r.json["arms"][0]["identity"], r.json["arms"][1]["identity"]);
  ASSERT_EQ(r.json["arms"][0]["layouts"].size(), 8u);
  EXPECT_EQ(r.json["arms"][0]["layouts"], r.json["arms"][1]["layouts"]);
  std::set<std::string> artifacts;
  for (const auto& l : r.json["arms"][0]["layouts"]) artifacts.insert(l["artifact_sha256"].get<std::string>());
  EXPECT_EQ(artifacts.size(), 8u);
  EXPECT_EQ(r.json["workloads"][0]["layouts"], 8);
  const auto& w = r.json["workloads"][0];
  EXPECT_NE(w["faster_verdict"], "PASS");
  EXPECT_LT(std::abs(w["improvement_pct"].get<double>()), 5.0);
}

// Cold mode on cpu: the parent flushes the call's tensors and evicts the caches itself, while the worker sleeps,
// before every call of both arms. Every call stays valid (the flush's CPU time is not charged to the call: no
// timing_implausible, no work outside the timer), the result is recorded as cold, and reading 2 MiB from memory
// instead of cache leaves fused (one pass) still far ahead of the baseline. One warm-up and one timed call per
// visit: the flush writes twice the last-level cache before every call, which is most of this test's time. It stops
// at the first look that passes; the budget leaves a loaded machine (a clean-clone CI beside a build: 10 blocks in
// 6 s, [-42%, +84%]) time for a second look.
TEST(compare_cli_test, cold_mode_keeps_every_call_valid_and_is_recorded) {
  KwbRun r = run_kwb({"compare", k_rmsnorm_lite.string(), "--candidate",
                      (k_rmsnorm_lite / "cpu" / "fused.cpp").string(), "--workload", "prefill", "--max-minutes", "0.2",
                      "--warmups", "1", "--samples", "1", "--cold", "--json"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.json["cold"], true);
  EXPECT_TRUE(r.json["refused"].empty());
  ASSERT_EQ(r.json["workloads"].size(), 1u);
  EXPECT_TRUE(r.json["workloads"][0]["failures"].empty()) << r.json["workloads"][0]["failures"].dump();
  EXPECT_EQ(r.json["workloads"][0]["verdict"], "PASS") << r.output;
}

TEST(compare_cli_test, aa_with_a_candidate_is_a_usage_error) {
  KwbRun r = run_kwb(
      {"compare", k_rmsnorm_lite.string(), "--aa", "--candidate", (k_rmsnorm_lite / "cpu" / "fused.cpp").string()});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_EQ(run_kwb({"compare", k_rmsnorm_lite.string()}).exit_code, 64);
}

}  // namespace
}  // namespace kwb::test
