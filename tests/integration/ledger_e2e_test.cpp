// The loop's side of kwb end to end (ledger/ledger.h, docs/agents.md): a three-generation lineage built with real
// validate bundles and `kwb keep`, a stale bundle refused, `kwb history`; and two loops validating at once against
// one ledger and one timing lock: both finish, no row is lost, and their timed phases never overlap.
//
// The lineage needs three implementations that are clearly ordered in speed on any machine, so the test writes a
// copy of the rmsnorm task whose baseline is the stock baseline run three times over (generation 0); the stock
// baseline is generation 1 and the fused kernel generation 2. The budgets are small and the A/A bound loose: the
// ledger is under test here, not the timing.
#include "background_kwb.h"
#include "cli_helpers.h"
#include "support/temp_dir.h"
#include "util/fs.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class LedgerE2e : public ::testing::Test {
protected:
  void SetUp() override {
    // The task copy, with a baseline three times slower than the stock one.
    m_task = m_dir / "rmsnorm";
    fs::copy(k_rmsnorm_lite, m_task, fs::copy_options::recursive);
    std::string triple = read_file(m_task / "cpu" / "baseline.cpp");
    const std::string entry = "extern \"C\" KWB_EXPORT int kwb_run(const kwb_call* call) {";
    const size_t at = triple.find(entry);
    ASSERT_NE(at, std::string::npos) << "tasks/rmsnorm/cpu/baseline.cpp no longer defines kwb_run as expected";
    triple.replace(at, entry.size(), "static int run_once(const kwb_call* call) {");
    triple +=
        "\n// Generation 0 of the test's lineage: the stock baseline, three times over.\n"
        "extern \"C\" KWB_EXPORT int kwb_run(const kwb_call* call) {\n"
        "  for (int i = 0; i < 2; ++i) {\n"
        "    if (const int rc = run_once(call); rc != 0) return rc;\n"
        "  }\n"
        "  return run_once(call);\n"
        "}\n";
    write_file_atomic(m_task / "cpu" / "triple.cpp", triple);
    std::string manifest = read_file(m_task / "task.toml");
    const std::string from = "baseline = \"cpu/baseline.cpp\"";
    ASSERT_NE(manifest.find(from), std::string::npos);
    manifest.replace(manifest.find(from), from.size(), "baseline = \"cpu/triple.cpp\"");
    write_file_atomic(m_task / "task.toml", manifest);
    ::setenv("KWB_LEDGER", (m_dir / "ledger.sqlite").c_str(), 1);
    ::setenv("KWB_TIMING_LOCK", (m_dir / "timing.lock").c_str(), 1);
    ::setenv("KWB_KEY_DIR", (m_dir / "keys").c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("KWB_LEDGER");
    ::unsetenv("KWB_TIMING_LOCK");
    ::unsetenv("KWB_KEY_DIR");
  }

  // Two layouts per arm, not eight, and no profile: the ledger is this test's subject, and every generation's pool
  // is built fresh.
  std::vector<std::string> validate_args(const std::string& candidate, const std::string& bundle,
                                         bool against_incumbent) const {
    std::vector<std::string> a = {"validate",
                                  m_task.string(),
                                  "--candidate",
                                  (m_task / "cpu" / candidate).string(),
                                  "--output-dir",
                                  (m_dir / bundle).string(),
                                  "--workload",
                                  "decode",
                                  "--max-minutes",
                                  "0.3",
                                  "--max-aa-difference-pct",
                                  "25",
                                  "--layouts",
                                  "2",
                                  "--no-profile",
                                  "--json"};
    if (against_incumbent) a.push_back("--against=incumbent");
    return a;
  }

  const test::TempDir m_tmp{"kwb-ledger-e2e"};
  const fs::path m_dir = m_tmp.path();
  fs::path m_task;
};

// Task identity by content (issue 40, item 2). The attack: a copy of the task under the same name, with a
// correctness case and a control removed, validated into the same ledger (a shared KWB_LEDGER, a documented setup)
// and kept. Keyed by name, that made the real task's incumbent a kernel the real task never judged. Keyed by the
// task's content, the copy's keep extends the copy's own lineage: the real task's incumbent stays its baseline, and
// history says a lineage of the same name is not this task's. A bundle whose task folder changed after the validate
// is refused by keep, naming both identities.
TEST_F(LedgerE2e, a_weakened_copy_of_the_task_keeps_into_its_own_lineage_never_the_real_tasks) {
  const fs::path weak = m_dir / "weak" / "rmsnorm";
  fs::create_directories(weak.parent_path());
  fs::copy(m_task, weak, fs::copy_options::recursive);
  std::string manifest = read_file(weak / "task.toml");
  for (const std::string& block :
       {std::string("[[cases]]\nname = \"zeros\"\n"), std::string("[[backends.cpu.controls]]\nname = \"no_eps\"\n")}) {
    const size_t at = manifest.find(block);
    ASSERT_NE(at, std::string::npos) << block;
    manifest.erase(at, manifest.find("\n\n", at) + 2 - at);  // the block, to its blank line
  }
  write_file_atomic(weak / "task.toml", manifest);
  KwbRun v =
      run_kwb({"validate", weak.string(), "--candidate", (weak / "cpu" / "baseline.cpp").string(), "--output-dir",
               (m_dir / "weak-bundle").string(), "--workload", "decode", "--max-minutes", "0.2",
               "--max-aa-difference-pct", "25", "--layouts", "2", "--no-profile", "--against=incumbent", "--json"});
  ASSERT_EQ(v.json.value("decision", ""), "KEEP_CANDIDATE") << v.output << v.errors;
  const std::string weak_identity =
      nlohmann::json::parse(read_file(m_dir / "weak-bundle" / "plan.json"))["task"]["identity"];

  // The copy's folder changes after its validate: keep refuses, naming the identity the plan was made against.
  write_file_atomic(weak / "task.toml", manifest + "\n# edited after the validate\n");
  KwbRun changed = run_kwb({"keep", (m_dir / "weak-bundle").string()});
  EXPECT_EQ(changed.exit_code, 1) << changed.output << changed.errors;
  EXPECT_NE(changed.output.find("the task changed since this bundle was made"), std::string::npos) << changed.output;
  EXPECT_NE(changed.output.find(weak_identity), std::string::npos) << changed.output;
  write_file_atomic(weak / "task.toml", manifest);

  KwbRun kept = run_kwb({"keep", (m_dir / "weak-bundle").string(), "--json"});
  ASSERT_EQ(kept.exit_code, 0) << kept.output << kept.errors;
  EXPECT_EQ(kept.json["incumbent"]["generation"], 1) << kept.output;

  // The real task (same name, same ledger) has kept nothing: its incumbent is its own baseline, and it says why the
  // lineage of that name is not its own.
  KwbRun h = run_kwb({"history", m_task.string(), "--json"});
  ASSERT_EQ(h.exit_code, 0) << h.output << h.errors;
  EXPECT_TRUE(h.json["lineage"].empty()) << h.output;
  EXPECT_NE(h.errors.find("has a lineage in this ledger that is not this task's"), std::string::npos) << h.errors;
  EXPECT_NE(h.errors.find(weak_identity.substr(0, 12)), std::string::npos) << h.errors;
  // The copy's own history shows its generation 1.
  KwbRun hw = run_kwb({"history", weak.string(), "--json"});
  ASSERT_EQ(hw.json["lineage"].size(), 2u) << hw.output;
}

TEST_F(LedgerE2e, three_generations_are_kept_and_compounded_and_a_stale_bundle_or_an_inserted_row_is_refused) {
  KwbRun v1 = run_kwb(validate_args("baseline.cpp", "gen1", true));
  ASSERT_EQ(v1.json.value("decision", ""), "KEEP_CANDIDATE") << v1.output << v1.errors;
  // --no-profile is in the plan and in stages.json with its reason, and nothing was profiled.
  EXPECT_EQ(nlohmann::json::parse(read_file(m_dir / "gen1" / "plan.json"))["profile"], false);
  const nlohmann::json stages = nlohmann::json::parse(read_file(m_dir / "gen1" / "stages.json"));
  bool profile_skipped = false;
  for (const auto& s : stages["stages"]) {
    if (s["name"] != "profile") continue;
    profile_skipped =
        s["status"] == "skipped" && s["summary"].get<std::string>().find("--no-profile") != std::string::npos;
  }
  EXPECT_TRUE(profile_skipped) << stages.dump();
  EXPECT_FALSE(fs::exists(m_dir / "gen1" / "profile"));
  KwbRun k1 = run_kwb({"keep", (m_dir / "gen1").string(), "--json"});
  ASSERT_EQ(k1.exit_code, 0) << k1.output << k1.errors;
  EXPECT_EQ(k1.json["incumbent"]["generation"], 1) << k1.output;

  // Against the incumbent (generation 1, the stock baseline): the fused kernel.
  KwbRun v2 = run_kwb(validate_args("fused.cpp", "gen2", true));
  ASSERT_EQ(v2.json.value("decision", ""), "KEEP_CANDIDATE") << v2.output << v2.errors;
  KwbRun k2 = run_kwb({"keep", (m_dir / "gen2").string(), "--json"});
  ASSERT_EQ(k2.exit_code, 0) << k2.output << k2.errors;
  EXPECT_EQ(k2.json["incumbent"]["generation"], 2) << k2.output;

  // Generation 2's bundle kept again: it is the incumbent already, which is what keep asks for (exit 0, nothing
  // changes), not a stale bundle.
  KwbRun twice = run_kwb({"keep", (m_dir / "gen2").string()});
  EXPECT_EQ(twice.exit_code, 0) << twice.output << twice.errors;
  EXPECT_NE(twice.output.find("already the incumbent: "), std::string::npos) << twice.output;
  EXPECT_EQ(twice.output.find("stale"), std::string::npos) << twice.output;
  KwbRun twice_json = run_kwb({"keep", (m_dir / "gen2").string(), "--json"});
  EXPECT_EQ(twice_json.exit_code, 0) << twice_json.output;
  EXPECT_EQ(twice_json.json["kept"], false) << twice_json.output;
  EXPECT_EQ(twice_json.json["already_incumbent"], true) << twice_json.output;
  EXPECT_EQ(twice_json.json["incumbent"]["generation"], 2) << twice_json.output;

  // A bundle decided against generation 0, kept after generation 2: stale. Its candidate is a copy of the fused
  // kernel with a comment added, so it is in no generation and its bundle's age is what refuses it.
  write_file_atomic(m_task / "cpu" / "fused_again.cpp",
                    read_file(m_task / "cpu" / "fused.cpp") + "\n// the same kernel, another identity\n");
  KwbRun v3 = run_kwb(validate_args("fused_again.cpp", "stale", false));
  ASSERT_EQ(v3.json.value("decision", ""), "KEEP_CANDIDATE") << v3.output << v3.errors;
  KwbRun k3 = run_kwb({"keep", (m_dir / "stale").string()});
  EXPECT_EQ(k3.exit_code, 1) << k3.output << k3.errors;
  EXPECT_NE(k3.output.find("stale bundle: it decided against generation 0"), std::string::npos) << k3.output;

  KwbRun h = run_kwb({"history", m_task.string(), "--json"});
  ASSERT_EQ(h.exit_code, 0) << h.output << h.errors;
  const auto& line = h.json["lineage"];
  ASSERT_EQ(line.size(), 3u) << h.output;
  EXPECT_NE(line[0]["source"].get<std::string>().find("triple.cpp"), std::string::npos);
  EXPECT_NE(line[1]["source"].get<std::string>().find("baseline.cpp"), std::string::npos);
  EXPECT_NE(line[2]["source"].get<std::string>().find("fused.cpp"), std::string::npos);
  for (int g = 1; g <= 2; ++g) EXPECT_GT(line[g]["improvement_pct"].get<double>(), 0.0) << line[g].dump();
  const double expected =
      ((1 + line[1]["improvement_pct"].get<double>() / 100) * (1 + line[2]["improvement_pct"].get<double>() / 100) -
       1) *
      100;
  EXPECT_NEAR(line[2]["cumulative_pct"].get<double>(), expected, 1e-6);
  EXPECT_GT(line[2]["cumulative_pct"].get<double>(), line[1]["cumulative_pct"].get<double>());
  // Every validate and keep is a row: three validates, five keeps (two kept, two already the incumbent, one refused).
  int validates = 0, keeps = 0, already = 0;
  for (const auto& r : h.json["runs"]) {
    validates += r["kind"] == "validate";
    keeps += r["kind"] == "keep";
    already += r["outcome"] == "ALREADY_INCUMBENT";
  }
  EXPECT_EQ(validates, 3) << h.output;
  EXPECT_EQ(keeps, 5) << h.output;
  EXPECT_EQ(already, 2) << h.output;
  EXPECT_FALSE(h.json.contains("measured_over_baseline")) << "nothing was measured against generation 0 yet";

  // The compounded figure, measured: the incumbent (fused) against generation 0 (the triple baseline). The loop has
  // overwritten the incumbent's source file since it was kept (agents do): the copy generation 2's bundle keeps is
  // measured instead, and kwb says so.
  write_file_atomic(m_task / "cpu" / "fused.cpp", "// the agent's next attempt, not yet compiled\n");
  std::vector<std::string> reval = validate_args("fused.cpp", "reval", false);
  reval.erase(reval.begin() + 2, reval.begin() + 4);  // revalidate takes no --candidate: it is the incumbent
  reval[0] = "revalidate";
  KwbRun r = run_kwb(reval);
  ASSERT_EQ(r.json.value("decision", ""), "KEEP_CANDIDATE") << r.output << r.errors;
  EXPECT_NE(r.errors.find("using the copy its bundle keeps, " + (m_dir / "gen2" / "artifacts").string()),
            std::string::npos)
      << r.errors;
  const nlohmann::json reval_plan = nlohmann::json::parse(read_file(m_dir / "reval" / "plan.json"));
  for (const auto& impl : reval_plan["implementations"]) {
    if (impl["role"] == "candidate" && impl["layout"] == 0) {
      EXPECT_EQ(fs::path(impl["source"].get<std::string>()).parent_path(), m_dir / "gen2" / "artifacts") << impl;
    }
  }
  KwbRun after = run_kwb({"history", m_task.string(), "--json"});
  ASSERT_TRUE(after.json.contains("measured_over_baseline")) << after.output;
  EXPECT_GT(after.json["measured_over_baseline"]["improvement_pct"].get<double>(), 0.0) << after.output;
  EXPECT_EQ(after.json["measured_over_baseline"]["bundle"], (m_dir / "reval").string()) << after.output;
  KwbRun text = run_kwb({"history", m_task.string()});
  EXPECT_NE(text.output.find("incumbent is generation 2"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("measured over baseline: +"), std::string::npos) << text.output;

  // Issue 40 item 4: a generation-3 row inserted with sqlite3 (generation 2's columns, another source, no keep behind
  // it) breaks the lineage's sealed chain: history and validate --against incumbent refuse it with exit 65 naming the
  // row, and neither falls back to generation 2.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((m_dir / "ledger.sqlite").c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(
        sqlite3_exec(db,
                     "INSERT INTO incumbents (task, backend, generation, identity, source, source_sha256, bundle, "
                     "kept, workloads, improvement_pct, seal, task_name) SELECT task, backend, 3, identity, "
                     "'/forged/never_judged.cpp', source_sha256, bundle, kept, workloads, 61.0, seal, task_name "
                     "FROM incumbents WHERE generation = 2",
                     nullptr, nullptr, &err),
        SQLITE_OK)
        << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
  for (const std::vector<std::string>& verb :
       {std::vector<std::string>{"history", m_task.string()}, validate_args("fused.cpp", "after_insert", true)}) {
    KwbRun broken = run_kwb(verb);
    EXPECT_EQ(broken.exit_code, 65) << verb[0] << ": " << broken.output << broken.errors;
    EXPECT_NE(broken.errors.find("is broken at generation 3 (/forged/never_judged.cpp)"), std::string::npos)
        << verb[0] << ": " << broken.errors;
  }
  EXPECT_FALSE(fs::exists(m_dir / "after_insert" / "decision.json"));
}

// Issue 24, class 5: a genuine KEEP_CANDIDATE bundle, its candidate swapped for the 3x slower baseline and every
// hash, the plan digest and the manifest recomputed (tests/adversarial/bundle_rehash.py). verify finds it intact but
// can only call it self-consistent; keep refuses it, saying why, with exit 77; the genuine bundle is authentic (signed
// by this machine's key and recorded in its ledger) and is kept.
TEST_F(LedgerE2e, a_rehashed_bundle_is_self_consistent_only_and_keep_refuses_it_even_swapped_in_mid_keep) {
  KwbRun v = run_kwb(validate_args("fused.cpp", "genuine", true));
  ASSERT_EQ(v.json.value("decision", ""), "KEEP_CANDIDATE") << v.output << v.errors;
  ASSERT_TRUE(fs::exists(m_dir / "genuine" / "signature.json"));
  KwbRun genuine = run_kwb({"verify", (m_dir / "genuine").string(), "--json"});
  ASSERT_EQ(genuine.exit_code, 0) << genuine.output;
  EXPECT_EQ(genuine.json["authenticity"]["established"], "authentic") << genuine.output;
  EXPECT_EQ(genuine.json["authenticity"]["signature"]["state"], "trusted") << genuine.output;
  EXPECT_EQ(genuine.json["authenticity"]["ledger"]["recorded"], true) << genuine.output;

  fs::copy(m_dir / "genuine", m_dir / "forged", fs::copy_options::recursive);
  const CommandResult attack = run_command({"python3", (k_adversarial / "bundle_rehash.py").string(),
                                            (m_dir / "forged").string(), (m_task / "cpu" / "triple.cpp").string()},
                                           std::chrono::seconds(60), StderrMode::separate);
  ASSERT_EQ(attack.exit_code, 0) << attack.output << attack.errors;

  KwbRun forged = run_kwb({"verify", (m_dir / "forged").string(), "--json"});
  EXPECT_EQ(forged.exit_code, 0) << forged.output;  // intact: every hash agrees
  EXPECT_EQ(forged.json["ok"], true) << forged.output;
  EXPECT_EQ(forged.json["authenticity"]["established"], "self-consistent only") << forged.output;
  EXPECT_EQ(forged.json["authenticity"]["signature"]["state"], "absent") << forged.output;
  EXPECT_EQ(forged.json["authenticity"]["ledger"]["recorded"], false) << forged.output;
  KwbRun text = run_kwb({"verify", (m_dir / "forged").string()});
  EXPECT_NE(text.output.find("SELF-CONSISTENT ONLY, NOT AUTHENTIC"), std::string::npos) << text.output;

  KwbRun keep = run_kwb({"keep", (m_dir / "forged").string(), "--json"});
  EXPECT_EQ(keep.exit_code, 77) << keep.output << keep.errors;
  EXPECT_EQ(keep.json["kept"], false) << keep.output;
  EXPECT_NE(keep.json.value("message", "").find("does not match the one this machine's ledger"), std::string::npos)
      << keep.output;
  EXPECT_NE(keep.json.value("message", "").find("changed after the run, or it was not recorded here"),
            std::string::npos)
      << keep.output;

  // Issue 40 item 1: the two folders exchanged (renameat2 RENAME_EXCHANGE) as fast as an unprivileged user who owns
  // the folder they sit in can, while keep runs on the genuine one's path. keep reads one private copy: each keep
  // promotes the genuine candidate or refuses the forgery (77), and the forged candidate never becomes an incumbent.
  // (A keep that verified the path and re-read it to promote did promote it.)
  const bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::chown(m_dir.c_str(), 65534, 65534), 0) << "nobody (65534) owns the bundles' folder";
  }
  // The swapper runs beside kwb, spawned from this thread (kwb's own subprocess helper starts children on the main
  // thread only and waits for them); it prints its count of swaps into swaps.txt when it stops.
  std::vector<std::string> swapper = {"python3", (k_adversarial / "bundle_swap.py").string(),
                                      (m_dir / "genuine").string(), (m_dir / "forged").string(),
                                      (m_dir / "stop").string()};
  if (root) swapper.push_back("nobody");
  std::vector<char*> argv;
  for (std::string& a : swapper) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t out;
  posix_spawn_file_actions_init(&out);
  posix_spawn_file_actions_addopen(&out, 1, (m_dir / "swaps.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, "python3", &out, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&out);
  ASSERT_EQ(spawned, 0) << "python3 bundle_swap.py could not be started";
  int kept_now = 0, refused = 0;
  for (int i = 0; i < 12; ++i) {
    KwbRun k = run_kwb({"keep", (m_dir / "genuine").string(), "--json"});
    EXPECT_TRUE(k.exit_code == 0 || k.exit_code == 77) << k.exit_code << ": " << k.output << k.errors;
    if (k.exit_code == 0) {
      ++kept_now;
      EXPECT_NE(k.json["incumbent"].value("source", "").find("fused.cpp"), std::string::npos) << k.output;
    } else {
      ++refused;
    }
  }
  write_file_atomic(m_dir / "stop", "");
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "bundle_swap.py failed, status " << status;
  const std::string swaps = read_file(m_dir / "swaps.txt");
  EXPECT_GT(std::stoll(swaps), 12) << "the folders were hardly swapped: the attack did not run";
  KwbRun h = run_kwb({"history", m_task.string(), "--json"});
  ASSERT_EQ(h.exit_code, 0) << h.output << h.errors;
  // Generation 0 is the task's baseline (triple.cpp, the forgery's candidate too); every kept one is the genuine.
  ASSERT_FALSE(h.json["lineage"].empty()) << h.output;
  for (size_t g = 1; g < h.json["lineage"].size(); ++g) {
    EXPECT_NE(h.json["lineage"][g]["source"].get<std::string>().find("fused.cpp"), std::string::npos) << h.output;
  }
  std::cout << "[ swap ] " << swaps.substr(0, swaps.find('\n')) << " swaps; " << kept_now
            << " keep(s) took the genuine bundle, " << refused << " refused the forgery\n";

  KwbRun kept = run_kwb({"keep", (m_dir / "genuine").string(), "--json"});
  EXPECT_EQ(kept.exit_code, 0) << kept.output << kept.errors;
  EXPECT_NE(kept.json["incumbent"].value("source", "").find("fused.cpp"), std::string::npos) << kept.output;
}

TEST_F(LedgerE2e, two_loops_at_once_both_finish_lose_no_row_and_never_time_together) {
  // What this test holds is the lock's order, not a figure: a tenth of a minute per comparison is enough.
  const auto short_budget = [](std::vector<std::string> a) {
    *(std::find(a.begin(), a.end(), "--max-minutes") + 1) = "0.1";
    return a;
  };
  BackgroundKwb first(short_budget(validate_args("baseline.cpp", "loop1", false)));
  BackgroundKwb second(short_budget(validate_args("fused.cpp", "loop2", false)));
  for (BackgroundKwb* k : {&first, &second}) {
    const std::optional<int> status = k->wait(400s);
    ASSERT_TRUE(status.has_value()) << k->log();
    ASSERT_TRUE(WIFEXITED(*status)) << k->log();
    EXPECT_LE(WEXITSTATUS(*status), 3) << k->log();
  }
  KwbRun h = run_kwb({"history", m_task.string(), "--json"});
  ASSERT_EQ(h.exit_code, 0) << h.output << h.errors;
  std::vector<std::pair<int64_t, int64_t>> holds;
  int validates = 0;
  for (const auto& r : h.json["runs"]) {
    if (r["kind"] != "validate") continue;
    ++validates;
    // validate holds the lock once from its A/A through its A/B: both comparisons record that one hold.
    const nlohmann::json& t = r["timing_holds"];
    ASSERT_EQ(t.size(), 2u) << r.dump() << ": the A/A's and the A/B's record of the hold";
    EXPECT_EQ(t[0]["acquired_unix_ns"], t[1]["acquired_unix_ns"]) << r.dump();
    EXPECT_EQ(t[0]["released_unix_ns"], t[1]["released_unix_ns"]) << r.dump();
    holds.emplace_back(t[0]["acquired_unix_ns"], t[0]["released_unix_ns"]);
  }
  EXPECT_EQ(validates, 2) << h.output;
  std::sort(holds.begin(), holds.end());
  for (size_t i = 0; i < holds.size(); ++i) {
    EXPECT_LT(holds[i].first, holds[i].second);
    if (i > 0) {
      EXPECT_LE(holds[i - 1].second, holds[i].first) << "two timed phases overlap";
    }
  }
}

}  // namespace
}  // namespace kwb::test
