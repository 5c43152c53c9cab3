// The ledger (ledger/ledger.h) on its own: schema creation and versioning, runs recorded and read back, and the
// lineage rules of promote (generation 0 is the task's baseline; a bundle decided against an older incumbent is
// stale; improvements compound from what each generation measured against its parent).
#include "ledger/ledger.h"
#include "cli/ledger.h"
#include "support/temp_dir.h"
#include "util/error.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace kwb {
namespace {

namespace fs = std::filesystem;

class LedgerTest : public ::testing::Test {
protected:
  // promote seals with the machine key and lineage trusts it: a key folder of the test's own.
  void SetUp() override {
    if (const char* old = std::getenv("KWB_KEY_DIR")) m_old_key_dir = old;
    ::setenv("KWB_KEY_DIR", (m_dir / "keys").c_str(), 1);
  }
  void TearDown() override {
    if (m_old_key_dir) {
      ::setenv("KWB_KEY_DIR", m_old_key_dir->c_str(), 1);
    } else {
      ::unsetenv("KWB_KEY_DIR");
    }
  }

  fs::path file() const { return m_dir / "project" / ".kwb" / "ledger.sqlite"; }

  // Runs `sql` on the ledger file as someone with sqlite3 and write access would.
  void tamper(const std::string& sql) const {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file().c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }

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
  std::optional<std::string> m_old_key_dir;
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
  EXPECT_NE(wrong.refused.find("nothing of task rmsnorm on cpu has been kept yet"), std::string::npos) << wrong.refused;
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
  EXPECT_FALSE(again.already) << "an older generation is not the incumbent";
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

// Issue 40: a generation-1 row inserted with sqlite3, with no validate and no keep behind it, was believed by history,
// validate --against incumbent and campaigns. Every row is sealed by the machine key over itself and the seal before
// it: an inserted row, an edited one, or one sealed by a key this machine does not trust breaks the lineage, and the
// error names the row; nothing falls back to an earlier generation.
TEST_F(LedgerTest, a_lineage_row_that_keep_did_not_write_breaks_the_lineage_naming_the_row) {
  const Incumbent g0 = impl("k0", "/t/baseline.cpp");
  {
    Ledger l = Ledger::open(file());
    ASSERT_TRUE(l.promote("rmsnorm", BackendKind::cpu, "k0", g0, kept("k1", "/c1.cpp", 50, 50)).kept);
    EXPECT_EQ(l.lineage("rmsnorm", BackendKind::cpu).size(), 2u);
  }
  auto broken = [&](const std::string& needle) {
    try {
      Ledger::open(file()).lineage("rmsnorm", BackendKind::cpu);
      ADD_FAILURE() << "the lineage was believed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::data_error);
      const std::string what = e.what();
      EXPECT_NE(what.find("the lineage of task rmsnorm on cpu is broken at generation"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  // A generation 2 planted with sqlite3.
  tamper(
      "INSERT INTO incumbents (task, backend, generation, identity, source, source_sha256, bundle, kept, "
      "workloads, improvement_pct) VALUES ('rmsnorm', 'cpu', 2, 'k-evil', '/evil.cpp', 'x', '', "
      "'2026-12-01T00:00:00Z', '[]', 90)");
  broken("generation 2 (/evil.cpp): it has no seal");
  // The same row with generation 1's seal copied onto it.
  tamper("UPDATE incumbents SET seal = (SELECT seal FROM incumbents WHERE generation = 1) WHERE generation = 2");
  broken("generation 2 (/evil.cpp): its seal does not match");
  tamper("DELETE FROM incumbents WHERE generation = 2");
  EXPECT_EQ(Ledger::open(file()).lineage("rmsnorm", BackendKind::cpu).size(), 2u);
  // Generation 1's source re-pointed: its own seal no longer matches.
  tamper("UPDATE incumbents SET source = '/evil.cpp' WHERE generation = 1");
  broken("generation 1 (/evil.cpp): its seal does not match");
  // And keep does not extend a broken lineage.
  EXPECT_THROW(Ledger::open(file()).promote("rmsnorm", BackendKind::cpu, "k1", g0, kept("k2", "/c2.cpp", 5, 5)), Error);
  tamper("UPDATE incumbents SET source = '/c1.cpp' WHERE generation = 1");
  EXPECT_EQ(Ledger::open(file()).lineage("rmsnorm", BackendKind::cpu).size(), 2u);
  // A lineage sealed by another machine's key, which this one does not trust.
  ::setenv("KWB_KEY_DIR", (m_dir / "other-keys").c_str(), 1);
  broken("generation 0 (/t/baseline.cpp): its seal was made by a key this machine does not trust");
}

// Issue 40: a run killed with SIGKILL left no row. A run's row is written before its work (RUNNING) and finished
// with its outcome; one whose process is gone reads KILLED, and the filters find it by that name.
TEST_F(LedgerTest, a_started_row_is_finished_with_its_outcome_and_reads_killed_once_its_process_is_gone) {
  Ledger l = Ledger::open(file());
  LedgerRun r;
  r.kind = "validate";
  r.task = "rmsnorm";
  r.arms = {{"candidate", "/c.cpp", ""}};
  const int64_t id = l.start(r);
  std::vector<LedgerRun> runs = l.runs("rmsnorm", BackendKind::cpu);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].outcome, "RUNNING");  // this process is alive
  EXPECT_TRUE(runs[0].finished.empty());
  LedgerRun done = r;
  done.outcome = "KEEP_BASELINE";
  done.reasons = {"below the bar"};
  done.arms = {{"baseline", "/b.cpp", "kb"}, {"candidate", "/c.cpp", "kc"}};
  l.finish(id, done);
  runs = l.runs("rmsnorm", BackendKind::cpu);
  ASSERT_EQ(runs.size(), 1u) << "finish completes the started row, it adds none";
  EXPECT_EQ(runs[0].id, id);
  EXPECT_EQ(runs[0].outcome, "KEEP_BASELINE");
  EXPECT_FALSE(runs[0].finished.empty());
  ASSERT_EQ(runs[0].arms.size(), 2u);
  EXPECT_EQ(runs[0].arms[1].identity, "kc");

  // A row started by a process that has since ended (its start no longer matches any process of that pid).
  const int64_t orphan = l.start(r);
  tamper(fmt::format("UPDATE runs SET proc_start = proc_start + 1 WHERE id = {}", orphan));
  runs = l.runs("rmsnorm", BackendKind::cpu);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].outcome, "KILLED");
  ASSERT_FALSE(runs[1].reasons.empty());
  EXPECT_NE(runs[1].reasons.back().find("ended without finishing the run"), std::string::npos);
  RunFilter killed;
  killed.outcomes = {"KILLED"};
  const std::vector<LedgerRun> found = l.find_runs(killed);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].id, orphan);
  // Another machine's unfinished run (a shared ledger) is not ours to call killed.
  tamper(fmt::format("UPDATE runs SET host = 'elsewhere' WHERE id = {}", orphan));
  EXPECT_EQ(l.runs("rmsnorm", BackendKind::cpu)[1].outcome, "RUNNING");
}

TEST_F(LedgerTest, the_ledger_is_the_task_folders_unless_kwb_ledger_names_one_and_none_turns_recording_off) {
  const fs::path task = m_dir / "tasks" / "rmsnorm";
  ::setenv("KWB_LEDGER", file().c_str(), 1);
  EXPECT_EQ(ledger_path(task), file());
  ::setenv("KWB_LEDGER", "none", 1);
  EXPECT_FALSE(ledger_path(task).has_value());
  ::unsetenv("KWB_LEDGER");
  // Wherever the loop runs from: the task folder decides, not the current folder.
  EXPECT_EQ(ledger_path(task), task / ".kwb" / "ledger.sqlite");
  EXPECT_EQ(ledger_path(m_dir / "tasks" / "." / "rmsnorm"), task / ".kwb" / "ledger.sqlite");
  EXPECT_FALSE(ledger_path("").has_value()) << "no task, no KWB_LEDGER: no ledger";
  EXPECT_FALSE(ledger_off());
  ::setenv("KWB_LEDGER", "none", 1);
  EXPECT_TRUE(ledger_off());
  ::unsetenv("KWB_LEDGER");
}

TEST_F(LedgerTest, keeping_the_incumbent_again_is_not_a_refusal_and_changes_nothing) {
  Ledger l = Ledger::open(file());
  const Incumbent g0 = impl("k0", "/t/baseline.cpp");
  ASSERT_TRUE(l.promote("rmsnorm", BackendKind::cpu, "k0", g0, kept("k1", "/c1.cpp", 50, 50)).kept);
  Ledger::Promotion again = l.promote("rmsnorm", BackendKind::cpu, "k0", g0, kept("k1", "/c1.cpp", 50, 50));
  EXPECT_FALSE(again.kept);
  EXPECT_TRUE(again.refused.empty()) << again.refused;
  ASSERT_TRUE(again.already);
  EXPECT_EQ(again.already->generation, 1);
  EXPECT_EQ(l.lineage("rmsnorm", BackendKind::cpu).size(), 2u);
  // The task's baseline offered before anything was kept: it is generation 0 already, and nothing is written.
  Ledger fresh = Ledger::open(m_dir / "other.sqlite");
  Ledger::Promotion base = fresh.promote("rmsnorm", BackendKind::cpu, "k0", g0, impl("k0", "/t/baseline.cpp"));
  ASSERT_TRUE(base.already);
  EXPECT_EQ(base.already->generation, 0);
  EXPECT_TRUE(fresh.lineage("rmsnorm", BackendKind::cpu).empty());
}

LedgerRun run_of(const std::string& task, const std::string& kind, const std::string& outcome,
                 const std::string& started, BackendKind backend = BackendKind::cpu) {
  LedgerRun r;
  r.task = task;
  r.kind = kind;
  r.outcome = outcome;
  r.backend = backend;
  r.started = started;
  r.arms.push_back({"implementation", "/src/" + kind + ".cpp", "key-" + kind});
  return r;
}

TEST_F(LedgerTest, find_runs_filters_by_task_backend_kind_outcome_start_and_keeps_the_most_recent) {
  Ledger l = Ledger::open(file());
  l.record(run_of("rmsnorm", "check", "PASS", "2026-11-30T10:00:00.000Z"));
  l.record(run_of("rmsnorm", "check", "FAIL", "2026-11-30T11:00:00.500Z"));
  l.record(run_of("rmsnorm", "validate", "KEEP_CANDIDATE", "2026-12-01T09:00:00Z"));
  l.record(run_of("rmsnorm", "validate", "INTERRUPTED", "2026-12-01T10:00:00Z"));
  l.record(run_of("softmax", "check", "PASS", "2026-12-01T11:00:00.000Z"));
  l.record(run_of("rmsnorm", "compare", "PASS", "2026-12-01T12:00:00.000Z", BackendKind::opencl));
  const auto ids = [&](const RunFilter& f) {
    std::vector<int64_t> out;
    for (const LedgerRun& r : l.find_runs(f)) out.push_back(r.id);
    return out;
  };
  RunFilter f;
  f.task = "rmsnorm";
  EXPECT_EQ(ids(f), (std::vector<int64_t>{6, 4, 3, 2, 1})) << "most recent first, only the task's";
  f.backend = BackendKind::cpu;
  EXPECT_EQ(ids(f), (std::vector<int64_t>{4, 3, 2, 1}));
  f.kinds = {"check"};
  EXPECT_EQ(ids(f), (std::vector<int64_t>{2, 1}));
  f.kinds = {"check", "validate"};
  f.outcomes = {"FAIL", "INTERRUPTED"};
  EXPECT_EQ(ids(f), (std::vector<int64_t>{4, 2}));
  f.outcomes.clear();
  f.since = "2026-11-30T11:00:00";  // a start of 11:00:00.500 is at or after 11:00:00
  EXPECT_EQ(ids(f), (std::vector<int64_t>{4, 3, 2}));
  f.since = "2026-11-30T11:00:01";
  EXPECT_EQ(ids(f), (std::vector<int64_t>{4, 3}));
  f.since.clear();
  f.limit = 3;
  EXPECT_EQ(ids(f), (std::vector<int64_t>{4, 3, 2}));
  const std::vector<LedgerRun> one = l.find_runs({"rmsnorm", std::nullopt, {"check"}, {"PASS"}, "", 1});
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(one[0].arms.size(), 1u);
  EXPECT_EQ(one[0].arms[0].source, "/src/check.cpp") << "a found run carries its arms";
}

TEST_F(LedgerTest, a_run_without_a_start_is_recorded_as_started_when_the_process_did) {
  Ledger l = Ledger::open(file());
  LedgerRun r = run_of("rmsnorm", "check", "PASS", "");
  l.record(r);
  const LedgerRun got = l.runs("rmsnorm", BackendKind::cpu).at(0);
  EXPECT_EQ(got.started, process_started_text());
  EXPECT_LE(got.started, got.finished);
  EXPECT_NE(got.started, got.finished) << "the test process started well before this row was written";
  // Milliseconds: YYYY-MM-DDTHH:MM:SS.mmmZ
  EXPECT_EQ(got.finished.size(), 24u) << got.finished;
  EXPECT_EQ(got.finished.back(), 'Z');
}

// The text of `kwb history --runs`: a validate with two workloads (its second estimate on a line of its own), a
// compare refused with its reason (cut at 72 characters), a check with no estimate; paths outside the current folder
// as recorded.
TEST(RunsTable, each_run_is_a_row_with_its_candidate_estimates_and_bundle) {
  LedgerRun v = run_of("rmsnorm", "validate", "KEEP_CANDIDATE", "2026-12-01T09:00:00Z");
  v.id = 3;
  v.finished = "2026-12-01T09:04:10Z";
  v.arms = {{"baseline", "/t/cpu/baseline.cpp", "aaaaaaaaaaaaaaaa"},
            {"candidate", "/t/cpu/fused.cpp", "bbbbbbbbbbbbbbbb"}};
  v.workloads = {{"decode", "PASS", 54.5512, 50.1, 58.02}, {"prefill", "PASS", -3.2, -5.0, -1.25}};
  v.bundle = "/bundles/fused";
  LedgerRun c = run_of("rmsnorm", "compare", "REFUSED", "2026-12-01T08:00:00.250Z");
  c.id = 2;
  c.finished = "2026-12-01T08:00:04.750Z";
  c.arms = {{"A", "/t/cpu/baseline.cpp", "aaaaaaaaaaaaaaaa"}, {"B", "/t/cpu/no_eps.cpp", "cccccccccccccccc"}};
  c.workloads = {{"decode", "REFUSED", std::nullopt, std::nullopt, std::nullopt}};
  c.reasons = {
      "arm B: /t/cpu/no_eps.cpp failed its check: numeric_mismatch (2 assertions failed); no metric is reported "
      "for rejected code"};
  LedgerRun k = run_of("rmsnorm", "check", "PASS", "2026-12-01T07:00:00.000Z");
  k.id = 1;
  k.finished = "2026-12-01T07:00:01.500Z";
  k.arms = {{"implementation", "/t/cpu/fused.cpp", "bbbbbbbbbbbbbbbbbbbb"}};
  EXPECT_EQ(cli::runs_table({v, c, k}),
            "id  kind      started (UTC)             finished (UTC)            outcome         candidate          "
            "identity      estimate (improvement, 95% interval)  bundle          reason\n" +
                std::string(241, '-') +
                "\n"
                "3   validate  2026-12-01T09:00:00Z      2026-12-01T09:04:10Z      KEEP_CANDIDATE  /t/cpu/fused.cpp   "
                "bbbbbbbbbbbb  decode +54.55% [+50.10, +58.02]       /bundles/fused  -\n" +
                std::string(115, ' ') +
                "prefill -3.20% [-5.00, -1.25]\n"
                "2   compare   2026-12-01T08:00:00.250Z  2026-12-01T08:00:04.750Z  REFUSED         /t/cpu/no_eps.cpp  "
                "cccccccccccc  decode REFUSED                        -               "
                "arm B: /t/cpu/no_eps.cpp failed its check: numeric_mismatch (2 assert...\n"
                "1   check     2026-12-01T07:00:00.000Z  2026-12-01T07:00:01.500Z  PASS            /t/cpu/fused.cpp   "
                "bbbbbbbbbbbb  -                                     -               -\n");
}

TEST(SinceBound, dates_times_and_durations_become_a_utc_lower_bound) {
  const std::time_t now = 1'764'627'319;  // 2025-12-01T22:15:19Z
  EXPECT_EQ(since_bound("2026-12-01", now), "2026-12-01T00:00:00");
  EXPECT_EQ(since_bound("2026-12-01T22:15", now), "2026-12-01T22:15:00");
  EXPECT_EQ(since_bound("2026-12-01T22:15:19Z", now), "2026-12-01T22:15:19");
  EXPECT_EQ(since_bound("2026-12-01 22:15:19", now), "2026-12-01T22:15:19");
  EXPECT_EQ(since_bound("90s", now), "2025-12-01T22:13:49");
  EXPECT_EQ(since_bound("2h", now), "2025-12-01T20:15:19");
  EXPECT_EQ(since_bound("3d", now), "2025-11-28T22:15:19");
  EXPECT_EQ(since_bound("1w", now), "2025-11-24T22:15:19");
  for (const char* bad : {"", "yesterday", "2h30m", "h", "5y", "-2h", "2026-13-01", "2026-02-30", "2026-12-01T25:00",
                          "2026-12-01Tx", "99999999999d"}) {
    try {
      since_bound(bad, now);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--since"), std::string::npos) << m;
      EXPECT_NE(m.find("2026-12-01T22:15"), std::string::npos) << "names the forms: " << m;
    }
  }
}

}  // namespace
}  // namespace kwb
