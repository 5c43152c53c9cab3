// The timing lock end to end (util/timing_lock.h, docs/timing.md "The timing lock"): a kwb compare that finds the
// lock held waits, says so on stderr and in its JSON, and times only after the holder let go; two compares started
// together both finish, and their timed phases, from the times they recorded, never overlap; a validate and a compare
// queued behind it are served in the order they came, the validate holding the lock from its A/A through its A/B;
// and a --lock-timeout gives up with exit 75, naming the holder, a validate keeping its bundle. Each test uses a
// lock file of its own (KWB_TIMING_LOCK), so nothing else on the machine is involved.
#include "util/timing_lock.h"
#include "background_kwb.h"
#include "cli_helpers.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

TimingLock::Request request_for(const std::string& what) {
  TimingLock::Request r;
  r.what = what;
  return r;
}

class TimingLockE2e : public ::testing::Test {
protected:
  std::vector<std::string> lock_env() const { return {"KWB_TIMING_LOCK=" + (m_dir / "timing.lock").string()}; }
  static std::vector<std::string> compare_args() {
    return {"compare",       k_rmsnorm_lite.string(),
            "--candidate",   (k_rmsnorm_lite / "cpu" / "fused.cpp").string(),
            "--workload",    "decode",
            "--max-minutes", "0.05",
            "--json"};
  }
  // A short validate: two layouts, no profile, a loose A/A bound (this tests the lock, not the machine's noise).
  std::vector<std::string> validate_args(const fs::path& out) const {
    return {"validate",
            k_rmsnorm_lite.string(),
            "--candidate",
            (k_rmsnorm_lite / "cpu" / "fused.cpp").string(),
            "--output-dir",
            out.string(),
            "--workload",
            "decode",
            "--max-minutes",
            "0.05",
            "--max-aa-difference-pct",
            "10",
            "--layouts",
            "2",
            "--no-profile",
            "--seed",
            "5",
            "--json"};
  }
  fs::path lock_file() const { return m_dir / "timing.lock"; }
  // Runs kwb with `args` and --lock-timeout 0.5 while the test holds the lock: its exit code and its stderr.
  std::pair<int, std::string> run_while_held(std::vector<std::string> args) const {
    TimingLock held = TimingLock::acquire(lock_file(), request_for("the integration test"));
    args.insert(args.end(), {"--lock-timeout", "0.5"});
    BackgroundKwb kwb(args, lock_env());
    const std::optional<int> status = kwb.wait(600s);
    EXPECT_TRUE(status && WIFEXITED(*status)) << kwb.log();
    return {status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, kwb.errors()};
  }

  const test::TempDir m_tmp{"kwb-timing-lock-e2e"};
  const fs::path m_dir = m_tmp.path();
};

nlohmann::json finished_json(BackgroundKwb& kwb) {
  const std::optional<int> status = kwb.wait(300s);
  EXPECT_TRUE(status.has_value()) << "kwb compare did not finish: " << kwb.log();
  if (!status) return nlohmann::json();
  EXPECT_TRUE(WIFEXITED(*status)) << kwb.log();
  // 0, 1 or 2: a verdict (PASS, FAIL, INCONCLUSIVE); anything else is a failure of the run itself.
  EXPECT_LE(WEXITSTATUS(*status), 2) << kwb.log();
  nlohmann::json j = nlohmann::json::parse(kwb.output(), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << kwb.log();
  return j;
}

TEST_F(TimingLockE2e, a_compare_waits_for_the_holder_says_so_and_times_only_after_it_let_go) {
  auto held =
      std::make_unique<TimingLock>(TimingLock::acquire(m_dir / "timing.lock", request_for("the integration test")));
  BackgroundKwb kwb(compare_args(), lock_env());
  ASSERT_GT(kwb.pid(), 0);
  ASSERT_TRUE(eventually(
      [&] { return kwb.errors().find("waiting for the timing lock") != std::string::npos || kwb.ended(); }, 240s))
      << kwb.log();
  EXPECT_NE(kwb.errors().find("the integration test"), std::string::npos) << kwb.errors();
  EXPECT_FALSE(kwb.ended()) << "kwb went on while the lock was held: " << kwb.log();
  held->release();
  const int64_t released = held->record().released_unix_ns;
  nlohmann::json j = finished_json(kwb);
  ASSERT_TRUE(j.contains("timing_lock")) << j.dump();
  const auto& l = j["timing_lock"];
  EXPECT_NE(l["waited_for"].get<std::string>().find("the integration test"), std::string::npos) << l.dump();
  EXPECT_GT(l["waited_seconds"].get<double>(), 0.0) << l.dump();
  EXPECT_GE(l["acquired_unix_ns"].get<int64_t>(), released) << l.dump();
  EXPECT_GT(l["released_unix_ns"].get<int64_t>(), l["acquired_unix_ns"].get<int64_t>()) << l.dump();
  EXPECT_FALSE(j["workloads"].empty()) << j.dump();
}

TEST_F(TimingLockE2e, two_compares_started_together_both_finish_and_their_timing_never_overlaps) {
  BackgroundKwb first(compare_args(), lock_env());
  BackgroundKwb second(compare_args(), lock_env());
  ASSERT_GT(first.pid(), 0);
  ASSERT_GT(second.pid(), 0);
  nlohmann::json a = finished_json(first);
  nlohmann::json b = finished_json(second);
  ASSERT_TRUE(a.contains("timing_lock") && b.contains("timing_lock")) << a.dump() << "\n" << b.dump();
  for (const nlohmann::json* j : {&a, &b}) EXPECT_FALSE((*j)["workloads"].empty()) << j->dump();
  const int64_t a0 = a["timing_lock"]["acquired_unix_ns"], a1 = a["timing_lock"]["released_unix_ns"];
  const int64_t b0 = b["timing_lock"]["acquired_unix_ns"], b1 = b["timing_lock"]["released_unix_ns"];
  ASSERT_GT(a1, a0);
  ASSERT_GT(b1, b0);
  EXPECT_TRUE(a1 <= b0 || b1 <= a0) << "timed phases overlap: [" << a0 << ", " << a1 << "] and [" << b0 << ", " << b1
                                    << "]";
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_file(p), nullptr, false); }

// The Must-show of issue 26: a validate, then a compare, queue while the lock is held (the test holds it, so that
// both arrive while it is busy and in a known order). The validate is served first and holds the lock once from
// its A/A through its A/B; the compare, queued behind it, times only after that hold ends. Their lock records say
// so (printed for the reader: arrival, ticket, waiters ahead, wait, hold).
TEST_F(TimingLockE2e, a_validate_and_a_compare_queued_behind_it_are_served_in_order_aa_through_ab_in_one_hold) {
  auto gate =
      std::make_unique<TimingLock>(TimingLock::acquire(lock_file(), request_for("the integration test (the gate)")));
  const fs::path bundle = m_dir / "bundle";
  BackgroundKwb validate(validate_args(bundle), lock_env());
  // (A validate that ends before it queues, its baseline refused say, fails the test at once, not after 600 s.)
  ASSERT_TRUE(eventually([&] { return timing_lock_queue(lock_file()).size() == 1 || validate.ended(); }, 600s) &&
              !validate.ended())
      << validate.log();
  const fs::path compare_out = m_dir / "compare";
  std::vector<std::string> cargs = compare_args();
  cargs.insert(cargs.end(), {"--output-dir", compare_out.string()});
  BackgroundKwb compare(cargs, lock_env());
  ASSERT_TRUE(eventually([&] { return timing_lock_queue(lock_file()).size() == 2 || compare.ended(); }, 600s) &&
              !compare.ended())
      << compare.log();
  gate->release();
  const int64_t gate_released = gate->record().released_unix_ns;

  const std::optional<int> vs = validate.wait(600s);
  ASSERT_TRUE(vs.has_value()) << validate.log();
  // Any decision (a short A/A on a loaded machine may not settle); 75 or a crash would be the lock's failure.
  EXPECT_TRUE(WIFEXITED(*vs) && WEXITSTATUS(*vs) <= 3) << validate.log();
  nlohmann::json c = finished_json(compare);
  const nlohmann::json aa = read_json(bundle / "comparisons" / "aa.json")["timing_lock"];
  const nlohmann::json ab = read_json(bundle / "comparisons" / "ab.json")["timing_lock"];
  ASSERT_TRUE(aa.is_object() && ab.is_object()) << validate.log();
  ASSERT_TRUE(c.contains("timing_lock")) << c.dump();
  const nlohmann::json& cl = c["timing_lock"];

  std::cout << "validate (comparisons/aa.json) timing_lock: " << aa.dump() << "\n"
            << "validate (comparisons/ab.json) timing_lock: " << ab.dump() << "\n"
            << "compare  (compare.json)        timing_lock: " << cl.dump() << "\n";
  // One hold from the A/A through the A/B.
  EXPECT_EQ(aa, ab);
  // Arrival order: the validate first (no one ahead), the compare behind it (one ahead), and served in that order.
  EXPECT_LT(aa["arrived_unix_ns"].get<int64_t>(), cl["arrived_unix_ns"].get<int64_t>());
  EXPECT_LT(aa["ticket"].get<int64_t>(), cl["ticket"].get<int64_t>());
  EXPECT_EQ(aa["waiters_ahead"], 0);
  EXPECT_EQ(cl["waiters_ahead"], 1);
  EXPECT_GE(aa["acquired_unix_ns"].get<int64_t>(), gate_released);
  EXPECT_GE(cl["acquired_unix_ns"].get<int64_t>(), ab["released_unix_ns"].get<int64_t>())
      << "the compare timed before the validate's A/B was over";
  EXPECT_NE(cl["waited_for"].get<std::string>().find("the gate"), std::string::npos) << cl.dump();
  // Each was told, after its wait, how long it waited and that its budget starts now.
  EXPECT_NE(validate.errors().find("for the timing lock (held by"), std::string::npos) << validate.errors();
  EXPECT_NE(validate.errors().find(", from now"), std::string::npos) << validate.errors();
  EXPECT_NE(compare.errors().find(", from now"), std::string::npos) << compare.errors();
}

// --lock-timeout: a compare that cannot get the lock in time exits 75 (not a verdict on the candidate), naming the
// holder and since when it holds the lock; its queue ticket goes with it.
TEST_F(TimingLockE2e, a_compare_past_its_lock_timeout_exits_75_naming_the_holder) {
  const auto [code, errors] = run_while_held(compare_args());
  EXPECT_EQ(code, 75) << errors;
  EXPECT_NE(errors.find("gave up after"), std::string::npos) << errors;
  EXPECT_NE(errors.find("pid " + std::to_string(::getpid()) + ": the integration test, since "), std::string::npos)
      << errors;
  EXPECT_TRUE(timing_lock_queue(lock_file()).empty());
}

// A validate that gives up waiting keeps its bundle: the checks it ran, the A/A's stage error naming the holder, an
// INVALID decision that verify re-derives, and exit 75.
TEST_F(TimingLockE2e, a_validate_past_its_lock_timeout_keeps_an_invalid_bundle_and_exits_75) {
  const fs::path bundle = m_dir / "bundle";
  const auto [code, errors] = run_while_held(validate_args(bundle));
  EXPECT_EQ(code, 75) << errors;
  EXPECT_NE(errors.find("the integration test"), std::string::npos) << errors;
  const nlohmann::json decision = read_json(bundle / "decision.json");
  EXPECT_EQ(decision["decision"], "INVALID") << decision.dump();
  EXPECT_TRUE(fs::is_regular_file(bundle / "checks" / "baseline.json"));
  for (const nlohmann::json& st : read_json(bundle / "stages.json")["stages"]) {
    if (st["name"] == "aa") {
      EXPECT_EQ(st["status"], "error") << st.dump();
      EXPECT_NE(st["summary"].get<std::string>().find("gave up after"), std::string::npos) << st.dump();
    }
    if (st["name"] == "ab") {
      EXPECT_EQ(st["status"], "skipped") << st.dump();
    }
  }
  // verify re-derives the INVALID from the recorded stage error: the bundle is whole.
  const KwbRun v = run_kwb({"verify", bundle.string(), "--json"});
  EXPECT_EQ(v.exit_code, 0) << v.output << v.errors;
  EXPECT_TRUE(timing_lock_queue(lock_file()).empty());
}

}  // namespace
}  // namespace kwb::test
