// The ledger (ledger/ledger.h) on its own: schema creation and versioning, runs recorded and read back, and the
// lineage rules of promote (generation 0 is the task's baseline; a bundle decided against an older incumbent is
// stale; improvements compound from what each generation measured against its parent).
#include "ledger/ledger.h"
#include "util/error.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

namespace kwb {
namespace {

namespace fs = std::filesystem;

class LedgerTest : public ::testing::Test {
protected:
  fs::path file() const { return m_dir / "project" / ".kwb" / "ledger.sqlite"; }

  static Incumbent impl(const std::string& id, const std::string& src) {
    Incumbent i;
    i.identity = id;
    i.source = src;
    i.source_sha256 = "sha-" + id;
    return i;
  }
  static Incumbent kept(const std::string& id, const std::string& src, double decode_pct, double prefill_pct) {
    Incumbent i = impl(id, src);
    i.bundle = "/bundles/" + id;
    i.workloads = {{"decode", "PASS", decode_pct, decode_pct - 1, decode_pct + 1},
                   {"prefill", "PASS", prefill_pct, prefill_pct - 1, prefill_pct + 1}};
    return i;
  }

  const test::TempDir m_tmp{"kwb-ledger-test"};
  const fs::path m_dir = m_tmp.path();
};

TEST_F(LedgerTest, a_new_ledger_is_created_with_its_folder_at_the_current_schema_version) {
  Ledger l = Ledger::open(file());
  EXPECT_TRUE(fs::exists(file()));
  EXPECT_EQ(l.schema_version(), Ledger::k_schema_version);
  Ledger again = Ledger::open(file());  // opening an existing ledger migrates nothing and loses nothing
  EXPECT_EQ(again.schema_version(), Ledger::k_schema_version);
}

TEST_F(LedgerTest, a_ledger_of_a_newer_kwb_and_a_foreign_database_are_refused_naming_the_file) {
  fs::create_directories(file().parent_path());
  for (const char* sql : {"PRAGMA user_version = 99", "CREATE TABLE something_else (x)"}) {
    fs::remove(file());
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file().c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    try {
      Ledger::open(file());
      FAIL() << sql << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::io_error);
      EXPECT_NE(std::string(e.what()).find(file().string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("KWB_LEDGER"), std::string::npos) << e.what();
    }
  }
}

TEST_F(LedgerTest, a_run_is_read_back_with_its_arms_workloads_and_timing_holds) {
  Ledger l = Ledger::open(file());
  LedgerRun r;
  r.kind = "compare";
  r.task = "rmsnorm";
  r.task_dir = "/tasks/rmsnorm";
  r.backend = BackendKind::cpu;
  r.outcome = "PASS";
  r.reasons = {"decode: whole interval >= 0%"};
  r.arms = {{"A", "/a.cpp", "key-a"}, {"B", "/b.cpp", "key-b"}};
  r.workloads = {{"decode", "PASS", 12.5, 10.0, 15.0}, {"dram", "INVALID", std::nullopt, std::nullopt, std::nullopt}};
  r.timing_holds = nlohmann::json::array({{{"acquired_unix_ns", 1}, {"released_unix_ns", 2}}});
  const int64_t id = l.record(r);
  LedgerRun other = r;
  other.backend = BackendKind::opencl;
  l.record(other);
  const std::vector<LedgerRun> runs = Ledger::open(file()).runs("rmsnorm", BackendKind::cpu);
  ASSERT_EQ(runs.size(), 1u);
  const LedgerRun& got = runs[0];
  EXPECT_EQ(got.id, id);
  EXPECT_EQ(got.kind, "compare");
  EXPECT_EQ(got.outcome, "PASS");
  EXPECT_EQ(got.reasons, r.reasons);
  ASSERT_EQ(got.arms.size(), 2u);
  EXPECT_EQ(got.arms[1].identity, "key-b");
  ASSERT_EQ(got.workloads.size(), 2u);
  EXPECT_DOUBLE_EQ(*got.workloads[0].improvement_pct, 12.5);
  EXPECT_FALSE(got.workloads[1].improvement_pct.has_value());
  EXPECT_EQ(got.timing_holds, r.timing_holds);
  EXPECT_FALSE(got.started.empty());
}

TEST_F(LedgerTest, three_generations_compound_and_a_stale_bundle_is_refused) {
  Ledger l = Ledger::open(file());
  const Incumbent g0 = impl("k0", "/t/baseline.cpp");
  // Nothing kept yet: the bundle must have decided against the task's baseline.
  Ledger::Promotion wrong = l.promote("rmsnorm", BackendKind::cpu, "k-other", g0, kept("k1", "/c1.cpp", 50, 50));
  EXPECT_FALSE(wrong.kept);
  EXPECT_NE(wrong.refused.find("nothing of task rmsnorm on cpu has been kept yet"), std::string::npos)
      << wrong.refused;
  EXPECT_TRUE(l.lineage("rmsnorm", BackendKind::cpu).empty()) << "a refused promotion writes nothing";

  Ledger::Promotion p1 = l.promote("rmsnorm", BackendKind::cpu, "k0", g0, kept("k1", "/c1.cpp", 50, 50));
  ASSERT_TRUE(p1.kept) << p1.refused;
  EXPECT_EQ(p1.kept->generation, 1);
  EXPECT_NEAR(p1.kept->improvement_pct, 50.0, 1e-9);

  // Decided against generation 0, after generation 1 was kept: stale.
  Ledger::Promotion stale = l.promote("rmsnorm", BackendKind::cpu, "k0", g0, kept("k2", "/c2.cpp", 30, 30));
  EXPECT_FALSE(stale.kept);
  EXPECT_NE(stale.refused.find("stale bundle: it decided against generation 0"), std::string::npos) << stale.refused;
  EXPECT_NE(stale.refused.find("is now generation 1"), std::string::npos) << stale.refused;

  // Workloads +21% and +19%: their geometric mean, sqrt(1.21 * 1.19) - 1 = +19.997%.
  Ledger::Promotion p2 = l.promote("rmsnorm", BackendKind::cpu, "k1", g0, kept("k2", "/c2.cpp", 21, 19));
  ASSERT_TRUE(p2.kept) << p2.refused;
  EXPECT_EQ(p2.kept->generation, 2);
  EXPECT_NEAR(p2.kept->improvement_pct, (std::sqrt(1.21 * 1.19) - 1) * 100, 1e-9);

  Ledger::Promotion again = l.promote("rmsnorm", BackendKind::cpu, "k2", g0, kept("k1", "/c1.cpp", 5, 5));
  EXPECT_FALSE(again.kept);
  EXPECT_NE(again.refused.find("already generation 1"), std::string::npos) << again.refused;

  const std::vector<Incumbent> line = Ledger::open(file()).lineage("rmsnorm", BackendKind::cpu);
  ASSERT_EQ(line.size(), 3u);
  EXPECT_EQ(line[0].source, "/t/baseline.cpp");
  EXPECT_EQ(line[0].cumulative_pct, 0.0);
  EXPECT_NEAR(line[1].cumulative_pct, 50.0, 1e-9);
  EXPECT_NEAR(line[2].cumulative_pct, (1.5 * std::sqrt(1.21 * 1.19) - 1) * 100, 1e-9);
  EXPECT_EQ(line[2].bundle, "/bundles/k2");
  ASSERT_EQ(line[2].workloads.size(), 2u);
  EXPECT_DOUBLE_EQ(*line[2].workloads[0].improvement_pct, 21.0);
  EXPECT_TRUE(l.lineage("rmsnorm", BackendKind::opencl).empty()) << "lineages are per backend";
}

TEST_F(LedgerTest, the_ledger_path_comes_from_kwb_ledger_and_none_turns_recording_off) {
  ::setenv("KWB_LEDGER", file().c_str(), 1);
  EXPECT_EQ(ledger_path(), file());
  ::setenv("KWB_LEDGER", "none", 1);
  EXPECT_FALSE(ledger_path().has_value());
  ::unsetenv("KWB_LEDGER");
  EXPECT_EQ(ledger_path(), fs::current_path() / ".kwb" / "ledger.sqlite");
}

}  // namespace
}  // namespace kwb
