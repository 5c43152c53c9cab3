// The ledger as a loop reads it back (docs/agents.md, "Listing the runs"): `kwb history --runs` over twenty real runs
// (checks that pass, fail and do not build, compares refused at their checks, validates of a source that does not
// build, and keeps of their bundles), with each filter; the task folder's ledger found from any current folder; and
// an incumbent whose source file was overwritten, validated against from the copy its bundle keeps.
//
// Nothing here is timed (every run stops before a timing stage), so these tests run in the parallel group.
#include "cli_helpers.h"
#include "ledger/ledger.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

class LedgerRuns : public ::testing::Test {
protected:
  void SetUp() override {
    fs::copy(k_rmsnorm_lite, m_task, fs::copy_options::recursive);
    fs::remove_all(m_task / ".kwb");  // the copy starts with no ledger, whatever kwb run on the original left there
    fs::create_directories(m_elsewhere);
    fs::create_directories(m_src);
    write_file_atomic(m_src / "broken.cpp",
                      "#include <kwb/kernel.h>\nKWB_CANDIDATE_ABI\nextern \"C\" KWB_EXPORT int "
                      "kwb_run(const kwb_call* c) { return nope(c); }\n");
    // The task's own ledger, the default: hermetic_ledger.cpp's is set aside for these tests.
    if (const char* l = std::getenv("KWB_LEDGER")) m_saved_ledger = l;
    ::unsetenv("KWB_LEDGER");
    ::setenv("KWB_KEY_DIR", (m_dir / "keys").c_str(), 1);
  }
  void TearDown() override {
    if (!m_saved_ledger.empty()) ::setenv("KWB_LEDGER", m_saved_ledger.c_str(), 1);
    ::unsetenv("KWB_KEY_DIR");
  }

  // kwb with `dir` as its current folder.
  static KwbRun run_in(const fs::path& dir, std::vector<std::string> args) {
    args.insert(args.begin(), {"sh", "-c", "cd \"$0\" && exec \"$@\"", dir.string(), KWB_BINARY});
    return kwb_run_of(run_command(args, std::chrono::seconds(300), StderrMode::separate));
  }

  std::vector<std::string> check(const std::string& impl) const {
    return {"check", m_task.string(), "--impl", impl, "--case", "zeros"};
  }
  std::vector<std::string> validate(const std::string& bundle, bool against_incumbent = false) const {
    std::vector<std::string> a = {"validate",     m_task.string(),
                                  "--candidate",  (m_src / "broken.cpp").string(),
                                  "--output-dir", (m_dir / bundle).string(),
                                  "--workload",   "decode",
                                  "--layouts",    "2",
                                  "--no-profile", "--json"};
    if (against_incumbent) a.push_back("--against=incumbent");
    return a;
  }
  KwbRun history(std::vector<std::string> extra) const {
    extra.insert(extra.begin(), {"history", m_task.string(), "--runs"});
    return run_kwb(extra);
  }
  static std::vector<int64_t> ids(const KwbRun& r) {
    std::vector<int64_t> out;
    for (const auto& run : r.json["runs"]) out.push_back(run["id"].get<int64_t>());
    return out;
  }

  const TempDir m_tmp{"kwb-ledger-runs"};
  const fs::path m_dir = m_tmp.path();
  const fs::path m_task = m_dir / "rmsnorm";
  const fs::path m_ledger = m_task / ".kwb" / "ledger.sqlite";
  const fs::path m_elsewhere = m_dir / "elsewhere";
  const fs::path m_src = m_dir / "src";
  std::string m_saved_ledger;
};

TEST_F(LedgerRuns, twenty_runs_are_listed_most_recent_first_and_every_filter_selects_what_it_names) {
  const std::string fused = (m_task / "cpu" / "fused.cpp").string();
  const std::string baseline = (m_task / "cpu" / "baseline.cpp").string();
  const std::string no_eps = (m_task / "cpu" / "controls" / "no_eps.cpp").string();
  const std::string broken = (k_source_dir / "tests" / "candidates" / "compile_error.cpp").string();
  const std::vector<std::string> no_eps_control = {"check", m_task.string(), "--control", "no_eps", "--case", "zeros"};
  const std::vector<std::string> compare_no_eps = {"compare", m_task.string(), "--candidate",
                                                   no_eps,    "--workload",    "decode"};
  struct Step {
    std::vector<std::string> args;
    int exit_code;
    std::string kind, outcome;
    bool from_elsewhere = false;
  };
  const auto first_half = [&](const std::string& bundle) -> std::vector<Step> {
    return {{check(fused), 0, "check", "PASS"},
            {check(no_eps), 1, "check", "FAIL"},
            {check(broken), 65, "check", "BUILD_FAILED"},
            {check(baseline), 0, "check", "PASS"},
            {no_eps_control, 1, "check", "FAIL"},
            {compare_no_eps, 1, "compare", "REFUSED"},
            {validate(bundle), 1, "validate", "KEEP_BASELINE"},
            {{"keep", (m_dir / bundle).string()}, 1, "keep", "REFUSED"},
            // From another folder: the ledger is the task's, wherever the loop runs.
            {check(fused), 0, "check", "PASS", true},
            {check(no_eps), 1, "check", "FAIL", true}};
  };
  std::vector<Step> steps = first_half("b1");
  const std::vector<Step> later = first_half("b2");
  steps.insert(steps.end(), later.begin(), later.end());
  ASSERT_EQ(steps.size(), 20u);

  std::string since;  // the start of the second half
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i == 10) {
      // The second half starts in a later second than the first ended, so that --since can split them.
      const auto now = std::chrono::system_clock::now();
      const auto next = std::chrono::ceil<std::chrono::seconds>(now + std::chrono::milliseconds(1));
      std::this_thread::sleep_until(next);
      const std::time_t t = std::chrono::system_clock::to_time_t(next);
      std::tm tm{};
      ::gmtime_r(&t, &tm);
      char buf[32];
      std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
      since = buf;
    }
    const Step& s = steps[i];
    const KwbRun r = s.from_elsewhere ? run_in(m_elsewhere, s.args) : run_kwb(s.args);
    ASSERT_EQ(r.exit_code, s.exit_code) << "run " << i + 1 << ": " << r.output << r.errors;
    if (s.kind != "keep") {
      EXPECT_NE(r.errors.find(fmt::format("recorded as run {} in the ledger {}", i + 1, m_ledger.string())),
                std::string::npos)
          << "run " << i + 1 << " names the ledger it recorded into: " << r.errors;
    }
  }
  EXPECT_FALSE(fs::exists(m_elsewhere / ".kwb")) << "no ledger follows the current folder";

  // Every run, most recent first, with what each tried and how it ended.
  const KwbRun all = history({"--json"});
  ASSERT_EQ(all.exit_code, 0) << all.output << all.errors;
  EXPECT_EQ(all.json["schema"], "kwb.runs");
  EXPECT_EQ(all.json["ledger"], m_ledger.string());
  EXPECT_EQ(all.json["recorded"], 20);
  ASSERT_EQ(all.json["runs"].size(), 20u) << all.output;
  for (size_t k = 0; k < 20; ++k) {
    const nlohmann::json& run = all.json["runs"][k];
    const Step& s = steps[19 - k];
    EXPECT_EQ(run["id"], 20 - static_cast<int64_t>(k));
    EXPECT_EQ(run["kind"], s.kind) << run;
    EXPECT_EQ(run["outcome"], s.outcome) << run;
    ASSERT_TRUE(run["candidate"].is_object()) << run;
    EXPECT_FALSE(run["candidate"]["source"].get<std::string>().empty()) << run;
    if (s.kind == "check" || s.kind == "compare") {
      // The real start, the process's, not the moment the row was written.
      EXPECT_LT(run["started"].get<std::string>(), run["finished"].get<std::string>()) << run;
    }
    if (s.outcome == "PASS") {
      EXPECT_EQ(run["candidate"]["identity"].get<std::string>().size(), 64u) << run;
    }
    if (s.kind == "compare") {
      EXPECT_EQ(run["candidate"]["role"], "B") << run;
      EXPECT_EQ(run["candidate"]["source"], no_eps) << run;
      ASSERT_EQ(run["reasons"].size(), 1u) << run;
      EXPECT_NE(run["reasons"][0].get<std::string>().find("failed its check"), std::string::npos) << run;
    }
    if (s.kind == "validate" || s.kind == "keep") {
      EXPECT_EQ(run["bundle"], (m_dir / (k < 10 ? "b2" : "b1")).string()) << run;
      EXPECT_EQ(run["candidate"]["source"], (m_src / "broken.cpp").string()) << run;
    }
  }

  // The same rows as text, headed by the ledger's file.
  const KwbRun text = history({});
  ASSERT_EQ(text.exit_code, 0) << text.errors;
  std::cout << text.output;  // for a reader of the test's log
  EXPECT_EQ(text.output.rfind("ledger " + m_ledger.string() + "\n", 0), 0u) << text.output;
  EXPECT_NE(text.output.find("task rmsnorm: 20 run(s) recorded; 20 shown, most recent first\n"), std::string::npos)
      << text.output;
  for (const char* column : {"id", "kind", "started (UTC)", "finished (UTC)", "outcome", "candidate", "identity",
                             "estimate (improvement, 95% interval)", "bundle"}) {
    EXPECT_NE(text.output.find(column), std::string::npos) << column;
  }
  const size_t row20 = text.output.find("\n20 "), row1 = text.output.find("\n1 ");
  ASSERT_NE(row20, std::string::npos) << text.output;
  ASSERT_NE(row1, std::string::npos) << text.output;
  EXPECT_LT(row20, row1) << "most recent first";
  EXPECT_NE(text.output.find((m_dir / "b1").string()), std::string::npos) << text.output;

  // Each filter.
  const auto count = [&](std::vector<std::string> filter) {
    filter.push_back("--json");
    const KwbRun r = history(filter);
    EXPECT_EQ(r.exit_code, 0) << r.output << r.errors;
    return r.json["runs"].size();
  };
  EXPECT_EQ(count({"--kind", "check"}), 14u);
  EXPECT_EQ(count({"--kind", "compare,validate"}), 4u);
  EXPECT_EQ(count({"--kind", "keep", "--kind", "compare"}), 4u);
  EXPECT_EQ(count({"--outcome", "BUILD_FAILED"}), 2u);
  EXPECT_EQ(count({"--outcome", "fail"}), 6u) << "outcomes in any case";
  EXPECT_EQ(count({"--outcome", "KEEP_BASELINE,REFUSED"}), 6u);
  EXPECT_EQ(count({"--kind", "check", "--outcome", "PASS"}), 6u);
  EXPECT_EQ(count({"--since", "1h"}), 20u);
  EXPECT_EQ(count({"--since", "2999-01-01"}), 0u);
  const KwbRun second_half = history({"--since", since, "--json"});
  EXPECT_EQ(ids(second_half), (std::vector<int64_t>{20, 19, 18, 17, 16, 15, 14, 13, 12, 11})) << since;
  EXPECT_EQ(second_half.json["filters"]["since"], since);
  EXPECT_EQ(ids(history({"--limit", "3", "--json"})), (std::vector<int64_t>{20, 19, 18}));
  EXPECT_EQ(ids(history({"--kind", "validate", "--limit", "1", "--json"})), (std::vector<int64_t>{17}));
  EXPECT_EQ(ids(history({"--backend", "opencl", "--json"})), std::vector<int64_t>{});
  const KwbRun limited = history({"--kind", "check", "--limit", "2"});
  EXPECT_NE(limited.output.find("20 run(s) recorded; 2 shown, most recent first (--kind check --limit 2)"),
            std::string::npos)
      << limited.output;

  // A filter value kwb cannot honour is a usage error naming the option and what it accepts; nothing is listed.
  struct Bad {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Bad& b : std::vector<Bad>{
           {{"--kind", "checks"}, "--kind checks: not one the ledger records; give one or more of check, compare"},
           {{"--outcome", "KEEP"}, "--outcome KEEP: not one the ledger records; give one or more of PASS"},
           {{"--since", "yesterday"}, "--since yesterday: not a UTC date"},
           {{"--since", "2026-02-30"}, "--since 2026-02-30: not a UTC date"},
           {{"--limit", "0"}, "--limit 0: not a whole number of runs from 1 to 1000000000"},
           {{"--limit", "ten"}, "--limit ten: not a whole number"}}) {
    const KwbRun r = history(b.args);
    EXPECT_EQ(r.exit_code, 64) << b.args[1] << ": " << r.output << r.errors;
    EXPECT_NE(r.errors.find(b.says), std::string::npos) << r.errors;
    EXPECT_EQ(r.output, "") << r.output;
  }
  const KwbRun no_runs = run_kwb({"history", m_task.string(), "--kind", "check"});
  EXPECT_EQ(no_runs.exit_code, 64);
  EXPECT_NE(no_runs.errors.find("add --runs"), std::string::npos) << no_runs.errors;

  // The lineage view, the default, names the same ledger.
  const KwbRun lineage = run_in(m_elsewhere, {"history", m_task.string()});
  EXPECT_EQ(lineage.exit_code, 0) << lineage.errors;
  EXPECT_EQ(lineage.output.rfind("ledger " + m_ledger.string() + "\n", 0), 0u) << lineage.output;
  EXPECT_NE(lineage.output.find("nothing kept yet"), std::string::npos) << lineage.output;
  EXPECT_NE(lineage.output.find("20 run(s) recorded on cpu (kwb history --runs lists them)"), std::string::npos)
      << lineage.output;
}

// The loop overwrote the incumbent's source file after keeping it. validate --against incumbent measures the copy
// the bundle that kept it holds, says so, and records that copy as the baseline; a copy that is gone or changed is
// refused naming the file and the fix.
TEST_F(LedgerRuns, an_overwritten_incumbent_is_validated_against_from_its_bundles_copy) {
  // A bundle holding a candidate that builds (it is refused at its check: nothing here is timed), and a lineage in
  // which that candidate is generation 1. keep would refuse this bundle (it kept the baseline); the lineage is
  // written directly, since only where the copy comes from is under test.
  const fs::path kept = m_src / "kept.cpp";
  write_file_atomic(kept, read_file(m_task / "cpu" / "controls" / "no_eps.cpp"));
  std::vector<std::string> v = validate("b0");
  v[3] = kept.string();
  const KwbRun made = run_kwb(v);
  ASSERT_EQ(made.json.value("decision", ""), "KEEP_BASELINE") << made.output << made.errors;
  const nlohmann::json plan = nlohmann::json::parse(read_file(m_dir / "b0" / "plan.json"));
  Incumbent g0, g1;
  for (const auto& impl : plan["implementations"]) {
    if (impl["layout"] != 0 || (impl["role"] != "baseline" && impl["role"] != "candidate")) continue;
    Incumbent& i = impl["role"] == "baseline" ? g0 : g1;
    i.identity = impl["identity"]["key"].get<std::string>();
    i.source = impl["source"].get<std::string>();
    i.source_sha256 = impl["identity"]["source_sha256"].get<std::string>();
  }
  g1.bundle = (m_dir / "b0").string();
  g0.task_name = g1.task_name = "rmsnorm";  // the label keep gives a generation
  ASSERT_EQ(g1.source, kept.string());
  // The lineage's key is the task's identity, as plan.json records it (task/task.h).
  const std::string task_identity = plan["task"]["identity"].get<std::string>();
  ASSERT_TRUE(Ledger::open(m_ledger).promote(task_identity, BackendKind::cpu, g0.identity, g0, g1).kept);
  const fs::path copy = m_dir / "b0" / "artifacts" / (g1.source_sha256 + ".cpp");
  ASSERT_TRUE(fs::is_regular_file(copy));

  write_file_atomic(kept, "// the agent's next attempt\n");
  const KwbRun r = run_in(m_elsewhere, validate("b1", true));
  EXPECT_EQ(r.exit_code, 1) << r.output << r.errors;  // the candidate does not build: KEEP_BASELINE
  EXPECT_NE(r.errors.find("the incumbent of task rmsnorm on cpu is generation 1 in the ledger " + m_ledger.string()),
            std::string::npos)
      << r.errors;
  EXPECT_NE(r.errors.find(fmt::format("generation 1 of task rmsnorm on cpu was kept from {}, which has changed since; "
                                      "using the copy its bundle keeps, {}",
                                      kept.string(), copy.string())),
            std::string::npos)
      << r.errors;
  const nlohmann::json plan1 = nlohmann::json::parse(read_file(m_dir / "b1" / "plan.json"));
  for (const auto& impl : plan1["implementations"]) {
    if (impl["role"] == "baseline") {
      EXPECT_EQ(impl["source"], copy.string()) << impl;
    }
  }

  // The copy changed: refused, naming it, what it holds, and the fix.
  fs::permissions(copy.parent_path(), fs::perms::owner_all, fs::perm_options::add);
  fs::permissions(copy, fs::perms::owner_write, fs::perm_options::add);
  write_file_atomic(copy, "// not what was kept\n");
  const KwbRun changed = run_kwb(validate("b2", true));
  EXPECT_EQ(changed.exit_code, 65) << changed.output << changed.errors;
  EXPECT_NE(changed.errors.find(fmt::format("{} holds SHA-256 {}, not the kept source's {}", copy.string(),
                                            sha256_file(copy), g1.source_sha256)),
            std::string::npos)
      << changed.errors;
  EXPECT_NE(changed.errors.find("restore " + kept.string() + " with the bytes of SHA-256 " + g1.source_sha256),
            std::string::npos)
      << changed.errors;
  fs::remove(copy);
  const KwbRun missing = run_kwb(validate("b3", true));
  EXPECT_EQ(missing.exit_code, 65) << missing.output << missing.errors;
  EXPECT_NE(missing.errors.find(copy.string() + " is missing"), std::string::npos) << missing.errors;
  // The source restored: it is used, and nothing is said about copies.
  write_file_atomic(kept, read_file(m_task / "cpu" / "controls" / "no_eps.cpp"));
  const KwbRun restored = run_kwb(validate("b4", true));
  EXPECT_EQ(restored.exit_code, 1) << restored.output << restored.errors;
  EXPECT_EQ(restored.errors.find("using the copy"), std::string::npos) << restored.errors;
}

}  // namespace
}  // namespace kwb::test
