// End-to-end `kwb profile`: the real kwb, kwb-profile-worker and valgrind on the RMSNorm task's decode workload.
#include "cli_helpers.h"
#include "profile/valgrind.h"
#include "support/build_paths.h"
#include "util/fs.h"
#include "util/timing_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

namespace kwb::test {
namespace {

const std::filesystem::path k_candidates = k_source_dir / "tests" / "candidates";

KwbRun profile(const std::filesystem::path& impl, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"profile", k_rmsnorm_lite.string(), "--impl", impl.string(), "--workload", "decode",
                                   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_kwb(args);
}

#define SKIP_WITHOUT_VALGRIND()                                                                      \
  do {                                                                                               \
    if (!kwb::find_valgrind().found) GTEST_SKIP() << "valgrind is not installed (scripts/setup.sh)"; \
  } while (0)

const nlohmann::json& decode(const KwbRun& r) { return r.json.at("workloads").at(0); }

std::vector<uint64_t> instructions_per_call(const KwbRun& r) {
  std::vector<uint64_t> out;
  for (const auto& c : decode(r).at("instructions").at("per_call")) out.push_back(c.at("instructions"));
  return out;
}

// Sets an environment variable for one scope; kwb (a child process) inherits it.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : m_name(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(m_name); }
  ScopedEnv(const ScopedEnv&) = delete;  // restores the variable exactly once
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  const char* m_name;
};

TEST(profile_test, baseline_instruction_counts_repeat_exactly_and_show_the_six_passes) {
  SKIP_WITHOUT_VALGRIND();
  KwbRun first = profile(k_rmsnorm_lite / "cpu" / "baseline.cpp");
  ASSERT_FALSE(first.json.is_discarded()) << first.output << first.errors;
  ASSERT_EQ(first.exit_code, 0) << first.output << first.errors;
  EXPECT_EQ(first.json["schema"], "kwb.profile");
  EXPECT_EQ(first.json["schema_version"], 1);
  EXPECT_EQ(first.json["refused"], false);
  const nlohmann::json& instr = decode(first).at("instructions");
  ASSERT_TRUE(instr.at("available").get<bool>()) << instr.dump(2);
  EXPECT_EQ(instr.at("calls"), 2);
  EXPECT_GT(instr.at("instructions_per_call").get<double>(), 0.0);

  KwbRun second = profile(k_rmsnorm_lite / "cpu" / "baseline.cpp");
  ASSERT_EQ(second.exit_code, 0) << second.output << second.errors;
  // Same binary, same input, same harness: the same instructions, to the instruction, call by call.
  EXPECT_EQ(instructions_per_call(first), instructions_per_call(second));

  std::set<std::string> passes;
  for (const auto& f : instr.at("functions")) {
    if (f.at("implementation").get<bool>()) passes.insert(f.at("short_name"));
  }
  for (const char* p : {"pass_square", "pass_row_mean", "pass_add_eps", "pass_rsqrt", "pass_scale", "pass_weight"}) {
    EXPECT_TRUE(passes.contains(p)) << p << " missing from " << instr.at("functions").dump(2);
  }
  // The baseline allocates its temporaries on every call: sq and t (rows*cols floats), ms and inv_rms (rows).
  const nlohmann::json& alloc = decode(first).at("allocations");
  ASSERT_TRUE(alloc.at("available").get<bool>()) << alloc.dump(2);
  EXPECT_GT(alloc.at("count_per_call").get<double>(), 0.0);
  for (const auto& c : alloc.at("counts")) EXPECT_EQ(c.get<int>(), 4);
  EXPECT_GE(alloc.at("bytes_per_call").get<double>(), 2.0 * 4096 * 4);

  const nlohmann::json& roof = decode(first).at("roofline");
  EXPECT_EQ(roof.at("min_bytes").get<uint64_t>(), 3u * 4096 * 4);  // x, weight, y
  ASSERT_TRUE(roof.at("measured").get<bool>()) << roof.dump(2);
  EXPECT_GT(roof.at("achieved_gb_per_s").get<double>(), 0.0);
  EXPECT_GT(roof.at("fraction_of_probe").get<double>(), 0.0);
  EXPECT_GT(first.json.at("bandwidth_probe").at("peak_gb_per_s").get<double>(), 0.0);
}

TEST(profile_test, fused_allocates_nothing_and_runs_as_one_function) {
  SKIP_WITHOUT_VALGRIND();
  KwbRun r = profile(k_rmsnorm_lite / "cpu" / "fused.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  ASSERT_EQ(r.exit_code, 0) << r.output << r.errors;
  const nlohmann::json& alloc = decode(r).at("allocations");
  ASSERT_TRUE(alloc.at("available").get<bool>()) << alloc.dump(2);
  EXPECT_EQ(alloc.at("count_per_call").get<double>(), 0.0);
  EXPECT_EQ(alloc.at("bytes_per_call").get<double>(), 0.0);
  const nlohmann::json& instr = decode(r).at("instructions");
  ASSERT_TRUE(instr.at("available").get<bool>()) << instr.dump(2);
  std::vector<uint64_t> calls = instructions_per_call(r);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], calls[1]);  // no allocator in the loop: every call the same
  for (const auto& f : instr.at("functions")) {
    if (f.at("implementation").get<bool>()) {
      EXPECT_EQ(f.at("short_name"), "kwb_run") << instr.at("functions").dump(2);
    }
  }
  EXPECT_EQ(instr.at("implementation_functions"), 1);
}

// The instrumentation window holds kwb_run and nothing else: two builds whose only difference is the trip count of
// a loop of exactly 4 instructions differ by exactly 4 * 1,000,000 instructions per call, and the instructions in
// the window outside kwb_run (the toggle and the call itself) are a handful, not the harness's parsing and setup.
TEST(profile_test, instrumentation_window_holds_exactly_the_known_work) {
  SKIP_WITHOUT_VALGRIND();
  KwbRun with = profile(k_candidates / "known_work.cpp");
  KwbRun without = profile(k_candidates / "known_work_zero.cpp");
  ASSERT_EQ(with.exit_code, 0) << with.output << with.errors;
  ASSERT_EQ(without.exit_code, 0) << without.output << without.errors;
  const nlohmann::json& a = decode(with).at("instructions");
  const nlohmann::json& b = decode(without).at("instructions");
  ASSERT_TRUE(a.at("available").get<bool>()) << a.dump(2);
  ASSERT_TRUE(b.at("available").get<bool>()) << b.dump(2);
  const double difference = a.at("instructions_per_call").get<double>() - b.at("instructions_per_call").get<double>();
  const double expected = 4.0 * 1000000;
  EXPECT_NEAR(difference, expected, expected * 1e-4);
  for (const auto* j : {&a, &b}) {
    for (const auto& c : j->at("per_call")) EXPECT_LE(c.at("window_overhead_instructions").get<uint64_t>(), 20u);
  }
  // Without the known work, what remains is the RMSNorm of one 4096-element row: a few instructions per element,
  // far below what one call of the harness (JSON, tensors, validation) would add.
  EXPECT_LT(b.at("instructions_per_call").get<double>(), 20.0 * 4096);
}

TEST(profile_test, rejected_implementation_is_refused_with_its_reasons_and_no_numbers) {
  KwbRun r = profile(k_rmsnorm_lite / "cpu" / "controls" / "no_weight.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.json["schema"], "kwb.profile");
  EXPECT_EQ(r.json["refused"], true);
  EXPECT_NE(r.json["reason"].get<std::string>().find("numeric_mismatch"), std::string::npos) << r.json["reason"];
  EXPECT_EQ(r.json["check"]["verdict"], "FAIL");
  EXPECT_FALSE(r.json.contains("workloads")) << "a rejected implementation must get no profile numbers";

  KwbRun human = run_kwb({"profile", k_rmsnorm_lite.string(), "--impl",
                          (k_rmsnorm_lite / "cpu" / "controls" / "no_weight.cpp").string(), "--workload", "decode"});
  EXPECT_EQ(human.exit_code, 1);
  EXPECT_NE(human.output.find("profile refused"), std::string::npos) << human.output;
  EXPECT_NE(human.output.find("numeric_mismatch"), std::string::npos) << human.output;
  EXPECT_EQ(human.output.find("instr/call"), std::string::npos) << human.output;
}

TEST(profile_test, without_valgrind_says_so_and_still_reports_allocations_and_bandwidth) {
  ScopedEnv no_valgrind("KWB_VALGRIND", "/nonexistent/valgrind");
  KwbRun r = profile(k_rmsnorm_lite / "cpu" / "baseline.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(r.json["valgrind"]["found"], false);
  const nlohmann::json& instr = decode(r).at("instructions");
  EXPECT_EQ(instr.at("available"), false);
  EXPECT_NE(instr.at("reason").get<std::string>().find("valgrind not found"), std::string::npos) << instr.dump();
  EXPECT_FALSE(instr.contains("instructions_per_call")) << "no guess where nothing was measured";
  EXPECT_EQ(decode(r).at("allocations").at("count_per_call").get<double>(), 4.0);
  EXPECT_TRUE(decode(r).at("roofline").at("measured").get<bool>());

  KwbRun strict = profile(k_rmsnorm_lite / "cpu" / "baseline.cpp", {"--require-valgrind"});
  EXPECT_EQ(strict.exit_code, 69);
}

TEST(profile_test, human_output_has_the_table_the_passes_and_the_descriptive_label) {
  SKIP_WITHOUT_VALGRIND();
  KwbRun r = run_kwb({"profile", k_rmsnorm_lite.string(), "--impl", (k_rmsnorm_lite / "cpu" / "baseline.cpp").string(),
                      "--workload", "decode"});
  EXPECT_EQ(r.exit_code, 0) << r.output << r.errors;
  for (const char* s : {"instr/call", "allocs/call", "GB/s", "of probe", "*pass_row_mean", "descriptive only"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s << " missing from:\n" << r.output;
  }
}

// tests/adversarial/profile_escape.cpp behaves wherever /proc/self/maps cannot be opened (the timing worker) and
// forks a daemon that leaves a marker where it can (the profile worker). The profile stage of validate is this same
// run_profile in this same worker; here it runs without the timed stages, so beside the other parallel tests.
TEST(profile_test, the_profile_worker_cannot_start_a_daemon_that_outlives_it) {
  const std::filesystem::path marker = "/tmp/kwb-profile-escape";
  std::error_code ec;
  std::filesystem::remove(marker, ec);
  KwbRun r = profile(k_adversarial / "profile_escape.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << "the fork is refused (EPERM) and the candidate goes on: " << r.errors;
  EXPECT_FALSE(std::filesystem::exists(marker)) << read_file(marker);
}

// tests/adversarial/profile_confine.cpp, in the profile worker (natively and under valgrind), tries to write in
// /tmp and in the workers' cache, read kwb's command line and a bundle's plan.json, and open the timing lock for
// writing; each success makes its outputs wrong. kwb-confine's Landlock (and, run as root, the worker's own user)
// refuse them all: the profile completes with no failure. The plan.json is world-readable, so only the confinement
// stands between it and the worker; the timing lock exists, so the attempt on it is not a vacuous ENOENT.
TEST(profile_test, the_profile_worker_is_confined_by_landlock) {
  SKIP_WITHOUT_VALGRIND();
  const std::filesystem::path bundle = "/var/tmp/kwb-profile-confine/bundle";
  std::filesystem::create_directories(bundle);
  std::filesystem::permissions(bundle.parent_path(),
                               std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                   std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                   std::filesystem::perms::others_exec);
  std::filesystem::permissions(bundle, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                           std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                           std::filesystem::perms::others_exec);
  write_file_atomic(bundle / "plan.json", "{\"plan\": \"every identity key\"}\n");
  std::filesystem::permissions(bundle / "plan.json",
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                   std::filesystem::perms::group_read | std::filesystem::perms::others_read);
  const std::filesystem::path lock = timing_lock_path();
  if (!std::filesystem::exists(lock)) {
    const int fd = ::open(lock.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
  KwbRun r = profile(k_adversarial / "profile_confine.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.output << r.errors;
  for (const auto& w : r.json["workloads"]) EXPECT_TRUE(w["failures"].empty()) << w["failures"].dump(2);
  EXPECT_EQ(r.output.find("escaped"), std::string::npos) << r.output;
  EXPECT_EQ(r.errors.find("escaped"), std::string::npos) << r.errors;
  std::filesystem::remove_all(bundle.parent_path());
}

// kwb-confine itself, beside kwb (src/worker/confine_main.cpp), with a shell in the profile worker's place: what
// profile_confine.cpp relies on to tell the profile worker from the timing worker (its own /proc/self/maps) is
// readable, and the folder it was given is writable, so the escapes that test finds refused are refused by the
// confinement, not missed. Everything else it tries is refused here too. Run by root, the shell is its own user.
TEST(profile_test, kwb_confine_leaves_the_worker_its_own_proc_and_folder_and_nothing_else) {
  const std::filesystem::path confine = std::filesystem::path(KWB_BINARY).parent_path() / "kwb-confine";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("kwb-confine-" + std::to_string(::getpid()));
  const std::filesystem::path outside = out.string() + "-outside";
  std::filesystem::create_directories(out);
  const std::string script =
      "id -u; read l < /proc/self/maps && echo own-maps; read l < /proc/1/cmdline && echo other-cmdline; "
      "echo x > " +
      out.string() + "/f && echo own-folder; echo x > " + outside.string() +
      " && echo outside; "
      "(: 3<>" +
      timing_lock_path().string() + ") && echo lock; true";
  CommandResult r =
      run_command({confine.string(), "--own", out.string(), "--write", out.string(), "--", "/bin/sh", "-c", script},
                  std::chrono::seconds(30), StderrMode::separate);
  std::filesystem::remove_all(out);
  std::error_code ec;
  const bool leaked = std::filesystem::exists(outside, ec);
  std::filesystem::remove(outside, ec);
  EXPECT_EQ(r.exit_code, 0) << r.output << r.errors;
  EXPECT_NE(r.output.find("own-maps"), std::string::npos) << r.output << r.errors;
  EXPECT_NE(r.output.find("own-folder"), std::string::npos) << r.output << r.errors;
  EXPECT_EQ(r.output.find("other-cmdline"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("outside"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("lock"), std::string::npos) << r.output;
  EXPECT_FALSE(leaked);
  if (::geteuid() == 0) {
    EXPECT_NE(r.output.substr(0, r.output.find('\n')), "0") << r.output;
  }
}

TEST(profile_test, unknown_workload_is_a_usage_error) {
  KwbRun r = run_kwb({"profile", k_rmsnorm_lite.string(), "--impl", (k_rmsnorm_lite / "cpu" / "fused.cpp").string(),
                      "--workload", "nope"});
  EXPECT_EQ(r.exit_code, 64) << r.errors;
}

}  // namespace
}  // namespace kwb::test
