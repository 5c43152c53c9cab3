// The attacks on what a verdict depends on inside the worker (issue: truth outside the candidate's reach), each run
// through the stage where it acts: compare for the timing attacks, check for the protocol and sandbox ones (the
// profile worker's is in profile_test.cpp). docs/threat-model.md maps each to its defense.
#include "cli_helpers.h"
#include "support/build_paths.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

// Every failure of a compare report: those of its workloads, and those behind a refusal (the pre-timing check).
std::set<std::string> compare_reasons(const nlohmann::json& j) {
  std::set<std::string> out;
  for (const auto& w : j["workloads"]) {
    for (const std::string& r : reasons(w["failures"])) out.insert(r);
  }
  for (const auto& r : j["refused"]) out.insert(r.get<std::string>());
  return out;
}

bool mentions_any(const std::set<std::string>& got, const std::vector<std::string>& wanted) {
  for (const std::string& g : got) {
    for (const std::string& w : wanted) {
      if (g.find(w) != std::string::npos) return true;
    }
  }
  return false;
}

KwbRun compare(const fs::path& candidate, const std::string& workload, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"compare",       k_rmsnorm_lite.string(),
                                   "--candidate",   candidate.string(),
                                   "--workload",    workload,
                                   "--max-minutes", "0.2",
                                   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_kwb(args);
}

KwbRun check(const fs::path& impl, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"check",  k_rmsnorm_lite.string(),
                                   "--impl", impl.string(),
                                   "--json", "--timeout-seconds",
                                   "10",     "--case",
                                   "zeros",  "--case",
                                   "decode", "--case",
                                   "prefill"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_kwb(args);
}

TEST(trusted_timing_test, saying_done_early_from_inside_the_worker_gets_no_metric) {
  KwbRun r = compare(k_adversarial / "early_done.cpp", "prefill");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_NE(r.exit_code, 70) << r.errors;
  EXPECT_TRUE(r.json["verdict"] == "REFUSED" || r.json["verdict"] == "INVALID") << r.output;
  for (const auto& w : r.json["workloads"]) EXPECT_TRUE(w["improvement_pct"].is_null()) << w.dump();
  EXPECT_TRUE(mentions_any(compare_reasons(r.json), {"protocol", "work_outside_timer", "work_after_return"}))
      << r.output;
}

TEST(trusted_timing_test, rewriting_clock_samples_in_the_worker_gains_nothing) {
  // Three full passes of honest work: as slow as the baseline or slower, whatever it writes on the stack.
  KwbRun r = compare(k_adversarial / "clock_rewrite.cpp", "decode", {"--min-improvement-pct", "10"});
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_NE(r.exit_code, 70) << r.errors;
  EXPECT_NE(r.json["verdict"], "PASS") << r.output;
  for (const auto& w : r.json["workloads"]) {
    if (!w["improvement_pct"].is_null()) {
      EXPECT_LT(w["ci_low_pct"].get<double>(), 10.0) << w.dump();
    }
  }
}

TEST(trusted_timing_test, a_memo_keyed_on_mapping_state_replays_and_is_refused_timing) {
  KwbRun c = check(k_adversarial / "mapping_memo.cpp");
  ASSERT_FALSE(c.json.is_discarded()) << c.output << c.errors;
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_TRUE(reasons(c.json["failures"]).contains("stale_output")) << c.json["failures"].dump();
  KwbRun r = compare(k_adversarial / "mapping_memo.cpp", "prefill");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.json["verdict"], "REFUSED") << r.output;
}

TEST(trusted_timing_test, forged_protocol_messages_are_the_candidates_failure_never_kwbs) {
  KwbRun r = check(k_adversarial / "forged_reply.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.errors;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  EXPECT_TRUE(reasons(r.json["failures"]).contains("protocol")) << r.json["failures"].dump();
}

TEST(trusted_timing_test, a_forged_backend_error_at_load_is_the_candidates_failure_not_the_users) {
  KwbRun r = check(k_adversarial / "forged_backend_error.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.errors;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  EXPECT_TRUE(reasons(r.json["failures"]).contains("protocol")) << r.json["failures"].dump();
  EXPECT_EQ(r.errors.find("no such device"), std::string::npos) << "the candidate's text is not kwb's message";
}

TEST(trusted_timing_test, signal_routing_on_the_protocol_socket_is_denied) {
  KwbRun r = check(k_adversarial / "signal_routing.cpp");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1);
  bool named = false;
  for (const auto& f : r.json["failures"]) {
    named = named ||
            (f["reason"] == "sandbox_violation" && f["detail"].get<std::string>().find("fcntl") != std::string::npos);
  }
  EXPECT_TRUE(named) << r.json["failures"].dump();
}

// A root kwb gives each worker a user of its own (util/worker_user.h). In a user namespace that maps only root (as
// a rootless container maps too few ids), it cannot: it refuses to start any worker, with exit 69 and what to map,
// rather than run workers that share a user. Simulated with util-linux unshare -Ur (root inside, one id mapped).
TEST(trusted_timing_test, a_root_kwb_without_the_workers_ids_starts_no_worker) {
  const fs::path cache = fs::temp_directory_path() / ("kwb-ids-test-" + std::to_string(::getpid()));
  const std::string inner =
      fmt::format("KWB_CACHE_DIR={} {} check {} --impl {} --case decode", cache.string(), KWB_BINARY,
                  k_rmsnorm_lite.string(), (k_rmsnorm_lite / "cpu" / "fused.cpp").string());
  CommandResult r = run_command({"unshare", "-Ur", "sh", "-c", "test $(id -u) = 0 || exit 98; " + inner},
                                std::chrono::seconds(120), StderrMode::separate);
  fs::remove_all(cache);
  if (r.exit_code == 98 || r.errors.starts_with("unshare:")) {
    GTEST_SKIP() << "cannot create a user namespace here: " << r.errors;
  }
  EXPECT_EQ(r.exit_code, 69) << r.output << r.errors;
  EXPECT_NE(r.errors.find("gives each worker a user of its own"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("does not map those ids"), std::string::npos) << r.errors;
}

TEST(trusted_timing_test, no_worker_runs_as_root) {
  if (::geteuid() != 0) GTEST_SKIP() << "kwb runs as an unprivileged user here: its workers cannot be root anyway";
  const fs::path probe = k_adversarial / "uid_probe.cpp";
  KwbRun c = check(probe);
  ASSERT_FALSE(c.json.is_discarded()) << c.output << c.errors;
  EXPECT_EQ(c.exit_code, 0) << c.json["failures"].dump();
  KwbRun r = compare(probe, "decode");
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_NE(r.json["verdict"], "REFUSED") << r.output;
  for (const auto& w : r.json["workloads"]) EXPECT_TRUE(w["failures"].empty()) << w["failures"].dump();
  KwbRun p = run_kwb({"profile", k_rmsnorm_lite.string(), "--impl", probe.string(), "--workload", "decode", "--json"});
  ASSERT_FALSE(p.json.is_discarded()) << p.output << p.errors;
  EXPECT_EQ(p.exit_code, 0) << p.output << p.errors;
}

}  // namespace
}  // namespace kwb::test
