// The timing lock end to end (util/timing_lock.h, docs/timing.md "The timing lock"): a kwb compare that finds the
// lock held waits, says so on stderr and in its JSON, and times only after the holder let go; two compares started
// together both finish, and their timed phases, from the times they recorded, never overlap. Each test uses a lock
// file of its own (KWB_TIMING_LOCK), so nothing else on the machine is involved.
#include "background_kwb.h"
#include "cli_helpers.h"
#include "util/timing_lock.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class TimingLockE2e : public ::testing::Test {
protected:
  std::vector<std::string> lock_env() const { return {"KWB_TIMING_LOCK=" + (m_dir / "timing.lock").string()}; }
  static std::vector<std::string> compare_args() {
    return {"compare", k_rmsnorm_lite.string(), "--candidate", (k_rmsnorm_lite / "cpu" / "fused.cpp").string(), "--workload",
            "decode", "--max-minutes", "0.05", "--json"};
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
  auto held = std::make_unique<TimingLock>(TimingLock::acquire(m_dir / "timing.lock", "the integration test"));
  BackgroundKwb kwb(compare_args(), lock_env());
  ASSERT_GT(kwb.pid(), 0);
  ASSERT_TRUE(eventually([&] { return kwb.errors().find("waiting for the timing lock") != std::string::npos; }, 240s))
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

}  // namespace
}  // namespace kwb::test
