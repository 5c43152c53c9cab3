// kwb experiment without running anything: the experiment file's parser (every bad input a DataError naming the
// file, the line, the field and the fix), the freeze (a changed arm is refused on resume), how a validate's decision
// becomes an attempt's category, the log speedup of a comparison, and the paired analysis with its verdicts.
#include "cli/commands.h"
#include "experiment/analysis.h"
#include "experiment/experiment_file.h"
#include "experiment/experiment_report.h"
#include "experiment/plan.h"
#include "experiment/trajectory.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kwb {
namespace {

namespace fs = std::filesystem;

const fs::path k_x_rmsnorm = fs::path(KWB_SOURCE_DIR) / "tasks" / "rmsnorm";
const fs::path k_x_softmax = fs::path(KWB_SOURCE_DIR) / "tasks" / "softmax";

class ExperimentFile : public ::testing::Test {
protected:
  void SetUp() override {
    fs::create_directories(m_dir / "gen" / "lib");
    write_file_atomic(m_dir / "gen" / "g.py", "print('x')\n");
    write_file_atomic(m_dir / "gen" / "lib" / "t.txt", "t\n");
  }
  Experiment load(const std::string& text) {
    write_file_atomic(m_dir / "x.toml", text);
    return load_experiment(m_dir / "x.toml", cli::check_validate_flag);
  }
  std::string error_of(const std::string& text) {
    try {
      (void)load(text);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::data_error) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return "";
  }
  std::string tasks() const {
    return "[[tasks]]\ndir = \"" + k_x_rmsnorm.string() + "\"\n[[tasks]]\ndir = \"" + k_x_softmax.string() + "\"\n";
  }
  static std::string arms() {
    return "[[arms]]\nname = \"a\"\ncommand = [\"python3\", \"g.py\"]\nfiles = [\"gen/g.py\", \"gen/lib\"]\n"
           "env = { MODE = \"x\" }\n[[arms]]\nname = \"b\"\ncommand = [\"python3\", \"g.py\"]\nfiles = "
           "[\"gen/g.py\"]\n";
  }

  test::TempDir m_dir{"kwb-experiment-file"};
};

TEST_F(ExperimentFile, an_experiment_names_two_arms_tasks_seeds_and_validate_options) {
  const Experiment x = load(
      "name = \"t\"\nseeds = [1, 2, 3]\nattempts = 4\nfinal_max_minutes = 0.5\n"
      "[validate]\nworkloads = [\"decode\"]\n"
      "max_minutes = 0.1\nno_profile = true\n" +
      tasks() + arms());
  EXPECT_EQ(x.name, "t");
  EXPECT_EQ(x.storage, m_dir / "x.experiment");
  EXPECT_EQ(x.seeds, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(x.attempts, 4);
  EXPECT_EQ(x.final_max_minutes, 0.5);
  ASSERT_EQ(x.arms.size(), 2u);
  EXPECT_EQ(x.arms[0].files, (std::vector<fs::path>{m_dir / "gen" / "g.py", m_dir / "gen" / "lib"}));
  EXPECT_EQ(x.arms[0].env, (std::vector<std::pair<std::string, std::string>>{{"MODE", "x"}}));
  ASSERT_EQ(x.tasks.size(), 2u);
  EXPECT_EQ(x.tasks[1].name, "softmax");
  const std::vector<TrajectoryPlan> p = plan_trajectories(x);
  ASSERT_EQ(p.size(), 2u * 3u * 2u);
  EXPECT_EQ(p[0].id, "a--rmsnorm--s1");
  EXPECT_EQ(p[1].id, "b--rmsnorm--s1");
}

TEST_F(ExperimentFile, every_bad_input_names_its_field_and_fix) {
  const std::string base = "seeds = [1]\n" + tasks();
  EXPECT_NE(error_of(base + "[[arms]]\nname = \"a\"\ncommand = [\"x\"]\n").find("exactly two arms"), std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\n" + tasks() +
                     "[[arms]]\nname = \"a\"\ncommand = [\"x\"]\n[[arms]]\nname = \"a\"\n"
                     "command = [\"x\"]\n")
                .find("arms[1].name"),
            std::string::npos);
  EXPECT_NE(error_of(base + "[[arms]]\nname = \"a b\"\ncommand = [\"x\"]\n[[arms]]\nname = \"b\"\ncommand = [\"x\"]\n")
                .find("arms[0].name"),
            std::string::npos);
  EXPECT_NE(error_of(base + "[[arms]]\nname = \"a\"\ncommand = []\n[[arms]]\nname = \"b\"\ncommand = [\"x\"]\n")
                .find("arms[0].command"),
            std::string::npos);
  EXPECT_NE(error_of(base + "[[arms]]\nname = \"a\"\ncommand = [\"x\"]\nfiles = [\"nope.py\"]\n[[arms]]\nname = \"b\"\n"
                            "command = [\"x\"]\n")
                .find("nope.py"),
            std::string::npos);
  EXPECT_NE(error_of(base + "[[arms]]\nname = \"a\"\ncommand = [\"x\"]\nenv = { KWB_SEED = \"1\" }\n[[arms]]\n"
                            "name = \"b\"\ncommand = [\"x\"]\n")
                .find("arms[0].env.KWB_SEED"),
            std::string::npos);
  EXPECT_NE(error_of("seeds = [1, 1]\n" + tasks() + arms()).find("seed 1 is given twice"), std::string::npos);
  EXPECT_NE(error_of(tasks() + arms()).find("seeds: missing"), std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\nattempts = 2.5\n" + tasks() + arms()).find("attempts"), std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\n[validate]\nseed = 3\n" + tasks() + arms()).find("validate.seed"),
            std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\n[validate]\nworkloads = [\"nope\"]\n" + tasks() + arms()).find("validate.workloads"),
            std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\n[validate]\nmax_minutes = -1\n" + tasks() + arms()).find("validate.max_minutes"),
            std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\nbogus = 1\n" + tasks() + arms()).find("unknown key"), std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\nfinal_max_minutes = 0\n" + tasks() + arms()).find("final_max_minutes"),
            std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\n" + arms()).find("no [[tasks]]"), std::string::npos);
  // The line of the field is named.
  EXPECT_NE(error_of("seeds = [1]\n[executor]\nkind = \"slurm\"\narray_limit = 4\n" + tasks() + arms())
                .find("executor.array_limit: is a campaign's key"),
            std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\n[executor]\nkind = \"slurm\"\napptainer_image = \"/i.sif\"\n" + tasks() + arms())
                .find("executor.apptainer_image: is a campaign's key"),
            std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\nconfidence = 2\n" + tasks() + arms()).find("x.toml:2: confidence"),
            std::string::npos);
}

TEST_F(ExperimentFile, a_frozen_experiment_refuses_to_resume_once_an_arm_changed) {
  const std::string text =
      "seeds = [1]\n[validate]\nworkloads = [\"decode\"]\n[[tasks]]\ndir = \"" + k_x_rmsnorm.string() + "\"\n" + arms();
  const nlohmann::json first = freeze_experiment(load(text));
  EXPECT_EQ(first["schema"], "kwb.experiment");
  EXPECT_EQ(first["trajectories"].size(), 2u);
  const fs::path storage = m_dir / "x.experiment";
  EXPECT_TRUE(fs::is_regular_file(storage / "arms" / "a" / "g.py"));
  EXPECT_TRUE(fs::is_regular_file(storage / "arms" / "a" / "lib" / "t.txt"));
  // The public part of the task: its manifest, README and baseline; not the oracle or the controls.
  EXPECT_TRUE(fs::is_regular_file(storage / "tasks" / "rmsnorm" / "task.toml"));
  EXPECT_TRUE(fs::is_regular_file(storage / "tasks" / "rmsnorm" / "cpu" / "baseline.cpp"));
  EXPECT_FALSE(fs::exists(storage / "tasks" / "rmsnorm" / "oracle.cpp"));
  EXPECT_FALSE(fs::exists(storage / "tasks" / "rmsnorm" / "cpu" / "controls"));
  // The same experiment freezes to the same plan.
  EXPECT_EQ(freeze_experiment(load(text))["arms"], first["arms"]);
  write_file_atomic(m_dir / "gen" / "g.py", "print('changed')\n");
  try {
    (void)freeze_experiment(load(text));
    ADD_FAILURE() << "a changed arm file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::data_error);
    EXPECT_NE(std::string(e.what()).find("arms[0].files"), std::string::npos) << e.what();
  }
  // A plan edited after the freeze does not load.
  write_file_atomic(storage / "experiment.json", read_file(storage / "experiment.json") + " ");
  EXPECT_THROW((void)load_frozen_plan(storage), DataError);
}

nlohmann::json decision(const std::string& d, std::vector<std::string> codes, std::vector<std::string> reasons = {}) {
  return {{"decision", d}, {"reason_codes", codes}, {"inputs", {{"candidate_check_reasons", reasons}}}};
}

TEST(AttemptCategory, a_decision_becomes_the_category_it_names) {
  EXPECT_EQ(categorize_decision(decision("KEEP_CANDIDATE", {"all_passed"}), {}), AttemptCategory::kept);
  EXPECT_EQ(categorize_decision(decision("INCONCLUSIVE", {"ab_unsettled"}), {}), AttemptCategory::inconclusive);
  EXPECT_EQ(categorize_decision(decision("KEEP_BASELINE", {"ab_below_bar"}), {}), AttemptCategory::slower);
  EXPECT_EQ(categorize_decision(decision("KEEP_BASELINE", {"candidate_not_built"}), {}), AttemptCategory::not_built);
  EXPECT_EQ(categorize_decision(decision("KEEP_BASELINE", {"candidate_fails_check"}, {"numeric_mismatch"}), {}),
            AttemptCategory::incorrect);
  // A cheat needs a cheat's signature. A wrong answer beside a reason a bug may give too is a bug (a flaky tail that
  // once matched a previous call's answer); that reason alone, or a reason only a cheat gives, is a cheat.
  EXPECT_EQ(categorize_decision(
                decision("KEEP_BASELINE", {"candidate_fails_check"}, {"numeric_mismatch", "stale_output"}), {}),
            AttemptCategory::incorrect);
  EXPECT_EQ(categorize_decision(decision("KEEP_BASELINE", {"final_recheck_failed"}), {"output_not_written"}),
            AttemptCategory::incorrect);
  EXPECT_EQ(categorize_decision(decision("KEEP_BASELINE", {"candidate_fails_check"}, {"stale_output"}), {}),
            AttemptCategory::cheat);
  EXPECT_EQ(categorize_decision(decision("KEEP_BASELINE", {"candidate_fails_check"}, {"input_modified: x"}), {}),
            AttemptCategory::cheat);
  EXPECT_EQ(
      categorize_decision(
          decision("KEEP_BASELINE", {"candidate_fails_check"}, {"numeric_mismatch", "sandbox_violation: socket"}), {}),
      AttemptCategory::cheat);
  EXPECT_EQ(categorize_decision(decision("KEEP_BASELINE", {"candidate_fails_check"}, {"forbidden_symbol"}), {}),
            AttemptCategory::cheat);
  EXPECT_EQ(categorize_decision(decision("KEEP_BASELINE", {"final_recheck_failed"}), {"work_after_return"}),
            AttemptCategory::cheat);
  EXPECT_EQ(categorize_decision(decision("INVALID", {"control_passed"}), {}), AttemptCategory::controls);
  EXPECT_EQ(categorize_decision(decision("INVALID", {"stage_error"}), {}), AttemptCategory::invalid);
  for (AttemptCategory c : {AttemptCategory::kept, AttemptCategory::sandbox, AttemptCategory::error}) {
    EXPECT_EQ(parse_attempt_category(to_string(c)), c);
  }
}

TEST(ComparisonLogSpeedup, is_the_geometric_mean_over_workloads_of_the_improvements) {
  // 50% faster = 2x: ln 2. 0% = 1x.
  const nlohmann::json c = {{"workloads",
                             {{{"improvement_pct", 50.0}, {"ci_low_pct", 40.0}, {"ci_high_pct", 60.0}},
                              {{"improvement_pct", 0.0}, {"ci_low_pct", -10.0}, {"ci_high_pct", 10.0}}}}};
  const std::optional<LogSpeedup> s = comparison_log_speedup(c);
  ASSERT_TRUE(s);
  EXPECT_NEAR(s->estimate, std::log(2.0) / 2.0, 1e-12);
  EXPECT_NEAR(s->low, (-std::log(0.6) - std::log(1.1)) / 2.0, 1e-12);
  EXPECT_NEAR(s->high, (-std::log(0.4) - std::log(0.9)) / 2.0, 1e-12);
  EXPECT_FALSE(comparison_log_speedup({{"workloads", {{{"improvement_pct", nullptr}}}}}));
  EXPECT_EQ(attempt_seed(3, 2), attempt_seed(3, 2));
  EXPECT_NE(attempt_seed(3, 2), attempt_seed(3, 1));
  EXPECT_NE(attempt_seed(3, 2), attempt_seed(4, 2));
}

TEST(PairedInterval, stratified_over_tasks_and_a_plain_paired_t_otherwise) {
  // Two tasks, two pairs each: task means 1 and 3, variances 2 and 2: mean 2, Var = (2/2 + 2/2) / 4 = 0.5,
  // df = 0.5^2 / ((0.25^2)/1 * 2) = 2.
  const PairedInterval s = paired_interval({{"x", {0.0, 2.0}}, {"y", {2.0, 4.0}}}, 0.95);
  EXPECT_EQ(s.method, "stratified paired t");
  EXPECT_EQ(s.pairs, 4u);
  EXPECT_NEAR(s.mean, 2.0, 1e-12);
  EXPECT_NEAR(s.df, 2.0, 1e-9);
  EXPECT_NEAR(s.high - s.mean, 4.302652729911275 * std::sqrt(0.5), 1e-6);
  // One seed in a task: the plain paired t over all pairs.
  const PairedInterval p = paired_interval({{"x", {1.0}}, {"y", {2.0, 3.0}}}, 0.95);
  EXPECT_EQ(p.method, "paired t");
  EXPECT_NEAR(p.mean, 2.0, 1e-12);
  EXPECT_NEAR(p.df, 2.0, 1e-12);
  // One pair: no interval.
  EXPECT_EQ(paired_interval({{"x", {1.0}}}, 0.95).method, "none");
  // Every d the same: the interval is that point.
  const PairedInterval z = paired_interval({{"x", {0.0, 0.0}}, {"y", {0.0, 0.0}}}, 0.95);
  EXPECT_EQ(z.low, 0.0);
  EXPECT_EQ(z.high, 0.0);
}

// A plan of two tasks x `seeds` seeds, and trajectory records with the given final log speedups per arm.
nlohmann::json fake_plan(int seeds) {
  nlohmann::json p = {{"name", "t"},
                      {"settings", {{"confidence", 0.95}, {"seeds", nlohmann::json::array()}}},
                      {"arms", {{{"name", "slow"}}, {{"name", "fast"}}}},
                      {"tasks", {{{"name", "x"}}, {{"name", "y"}}}},
                      {"trajectories", nlohmann::json::array()}};
  for (int s = 1; s <= seeds; ++s) p["settings"]["seeds"].push_back(s);
  for (const char* task : {"x", "y"}) {
    for (int s = 1; s <= seeds; ++s) {
      for (int a = 0; a < 2; ++a) {
        p["trajectories"].push_back(
            {{"id", fmt::format("{}-{}-{}", a, task, s)}, {"arm_index", a}, {"task", task}, {"seed", s}});
      }
    }
  }
  return p;
}

TrajectoryOutcome outcome(int arm, const std::string& task, int seed, std::optional<double> log_speedup,
                          std::map<std::string, int> categories = {{"slower", 1}}) {
  TrajectoryOutcome o;
  o.id = fmt::format("{}-{}-{}", arm, task, seed);
  o.arm = arm;
  o.task = task;
  o.seed = seed;
  o.status = log_speedup ? "done" : "invalid";
  o.log_speedup = log_speedup;
  o.measured = log_speedup.has_value() && *log_speedup != 0.0;  // 0: the baseline stood, nothing kept
  o.categories = std::move(categories);
  return o;
}

TEST(ExperimentAnalysis, the_four_verdicts) {
  const nlohmann::json plan = fake_plan(3);
  std::vector<TrajectoryOutcome> better, same, worse;
  const double noise[] = {0.01, -0.012, 0.004};
  for (const char* task : {"x", "y"}) {
    for (int s = 1; s <= 3; ++s) {
      const double n = noise[s - 1];
      better.push_back(outcome(0, task, s, 0.0));
      better.push_back(outcome(1, task, s, 0.5 + n, {{"kept", 1}}));
      same.push_back(outcome(0, task, s, 0.2 - n));
      same.push_back(outcome(1, task, s, 0.2 + n));
      worse.push_back(outcome(0, task, s, 0.5 + n));
      worse.push_back(outcome(1, task, s, 0.0, {{"cheat", 2}}));
    }
  }
  const nlohmann::json b = analyze_experiment(plan, better, "d");
  EXPECT_EQ(b["verdict"], "B_BETTER");
  EXPECT_EQ(b["verdict_text"], "fast better");
  EXPECT_GT(b["difference"]["low"].get<double>(), 0.0);
  EXPECT_EQ(b["win_rate"]["b_wins"], 6);
  EXPECT_EQ(b["arms"][1]["fast_p"]["1.5"], 1.0);  // e^0.49 = 1.63
  EXPECT_EQ(b["arms"][1]["fast_p"]["2"], 0.0);
  EXPECT_EQ(b["arms"][0]["fast_p"]["0"], 1.0);  // correct, ...
  EXPECT_EQ(b["arms"][0]["fast_p"]["1"], 0.0);  // ... not faster
  const nlohmann::json s = analyze_experiment(plan, same, "d");
  EXPECT_EQ(s["verdict"], "INCONCLUSIVE");
  EXPECT_LT(s["difference"]["low"].get<double>(), 0.0);
  EXPECT_GT(s["difference"]["high"].get<double>(), 0.0);
  const nlohmann::json w = analyze_experiment(plan, worse, "d");
  EXPECT_EQ(w["verdict"], "A_BETTER");
  EXPECT_EQ(w["arms"][1]["cheats"], 12);  // two per trajectory
  // One trajectory without its outcome: INVALID, whatever the others say.
  better.back() = outcome(1, "y", 3, std::nullopt);
  const nlohmann::json i = analyze_experiment(plan, better, "d");
  EXPECT_EQ(i["verdict"], "INVALID");
  EXPECT_EQ(i["missing"].size(), 1u);
  // And the reports render it, every cell escaped.
  std::vector<nlohmann::json> records;
  const nlohmann::json full_plan = {
      {"name", "t <x>"},
      {"kwb", {{"version", "0"}, {"git_sha", "g"}, {"binary_sha256", "b"}}},
      {"settings",
       {{"seeds", {1, 2, 3}},
        {"attempts", 1},
        {"backend", "cpu"},
        {"validate", nlohmann::json::array()},
        {"executor", {{"kind", "local"}}}}},
      {"arms", {{{"name", "slow"}, {"command", {"a"}}}, {{"name", "fast"}, {"command", {"b"}}}}},
      {"tasks", plan["tasks"]},
      {"trajectories", plan["trajectories"]}};
  const ExperimentReportInput in{&full_plan, &i, &records, "/nonexistent"};
  const std::string html = experiment_html(in);
  EXPECT_NE(html.find("data-verdict=\"INVALID\""), std::string::npos);
  EXPECT_NE(html.find("t &lt;x&gt;"), std::string::npos);
  EXPECT_EQ(html.find("t <x>"), std::string::npos);
  EXPECT_NE(experiment_markdown(in).find("## Verdict: INVALID"), std::string::npos);
}

// A trajectory record as trajectory.cpp writes it: attempts with their categories and A/Bs against the incumbent,
// and a final figure ("baseline" when nothing was kept).
nlohmann::json record(int arm, const std::string& task, int seed, const std::vector<std::string>& categories,
                      double final_log_speedup) {
  nlohmann::json attempts = nlohmann::json::array();
  for (size_t n = 0; n < categories.size(); ++n) {
    const std::string& c = categories[n];
    const bool measured = c == "kept" || c == "slower" || c == "inconclusive";
    const double own = c == "kept" ? 0.3 : c == "slower" ? -0.05 : 0.002;  // ln of its A/B against the incumbent
    attempts.push_back(
        {{"attempt", n + 1},
         {"category", c},
         {"kept", c == "kept"},
         {"speedup", measured ? nlohmann::json{{"log_speedup", own}, {"log_low", own - 0.01}, {"log_high", own + 0.01}}
                              : nlohmann::json(nullptr)}});
  }
  const bool kept = std::find(categories.begin(), categories.end(), "kept") != categories.end();
  nlohmann::json final = kept ? nlohmann::json{{"status", "measured"},
                                               {"log_speedup", final_log_speedup},
                                               {"log_low", final_log_speedup - 0.02},
                                               {"log_high", final_log_speedup + 0.02}}
                              : nlohmann::json{{"status", "baseline"}};
  return {{"id", fmt::format("{}-{}-{}", arm, task, seed)},
          {"arm_index", arm},
          {"task", task},
          {"seed", seed},
          {"status", "done"},
          {"attempts", attempts},
          {"final", final}};
}

nlohmann::json report_plan(const nlohmann::json& plan) {
  return {{"name", "e"},
          {"kwb", {{"version", "0"}, {"git_sha", "g"}, {"binary_sha256", "b"}}},
          {"settings",
           {{"seeds", plan["settings"]["seeds"]},
            {"attempts", 4},
            {"backend", "cpu"},
            {"validate", nlohmann::json::array()},
            {"executor", {{"kind", "local"}}}}},
          {"arms",
           {{{"name", plan["arms"][0]["name"]}, {"command", {"a"}}},
            {{"name", plan["arms"][1]["name"]}, {"command", {"b"}}}}},
          {"tasks", plan["tasks"]},
          {"trajectories", plan["trajectories"]}};
}

// The flaky arm (issue 43): half its kernels are wrong, yet its trajectories fall back to a correct incumbent, so
// per final it scores as the good arm does. Per generated kernel (KernelBench's fast_p) it does not.
TEST(ExperimentAnalysis, fast_p_per_generated_kernel_counts_the_wrong_kernels_that_per_final_hides) {
  const nlohmann::json plan = fake_plan(2);
  std::vector<nlohmann::json> records;
  std::vector<TrajectoryOutcome> outcomes;
  for (const char* task : {"x", "y"}) {
    for (int s = 1; s <= 2; ++s) {
      records.push_back(record(0, task, s, {"kept", "slower", "inconclusive", "slower"}, 0.3));
      records.push_back(record(1, task, s, {"incorrect", "kept", "incorrect", "no_candidate"}, 0.3));
    }
  }
  for (const nlohmann::json& r : records) outcomes.push_back(outcome_of(r));
  // The good arm's kernel 2 is its own -0.05 after the kept +0.3: 1.28x the baseline, per kernel.
  ASSERT_EQ(outcomes[0].kernels.size(), 4u);
  ASSERT_TRUE(outcomes[0].kernels[1].log_speedup.has_value());
  EXPECT_NEAR(*outcomes[0].kernels[1].log_speedup, 0.25, 1e-12);
  EXPECT_FALSE(outcomes[1].kernels[0].correct);
  const nlohmann::json an = analyze_experiment(plan, outcomes, "d");
  const nlohmann::json& good = an["arms"][0];
  const nlohmann::json& flaky = an["arms"][1];
  EXPECT_EQ(good["fast_p"]["0"], 1.0);
  EXPECT_EQ(flaky["fast_p"]["0"], 1.0);  // per final: the same
  EXPECT_EQ(good["kernels"], 16);
  EXPECT_EQ(flaky["kernels"], 16);  // the attempt that wrote no kernel counts, as an incorrect one
  EXPECT_EQ(good["fast_p_kernels"]["0"], 1.0);
  EXPECT_EQ(flaky["fast_p_kernels"]["0"], 0.25);
  EXPECT_LT(flaky["fast_p_kernels"]["1"].get<double>(), good["fast_p_kernels"]["1"].get<double>());
  EXPECT_EQ(good["fast_p_kernels"]["1.25"], 1.0);  // 1.35x, 1.28x, 1.35x, 1.28x
  EXPECT_EQ(good["fast_p_kernels"]["1.5"], 0.0);
  const nlohmann::json full_plan = report_plan(plan);
  const std::string md = experiment_markdown({&full_plan, &an, &records, "/nonexistent"});
  // fake_plan's arms are named "slow" (A, here the good one) and "fast" (B, the flaky one).
  EXPECT_NE(md.find("| A slow | kernels | 16 | 100% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| B fast | kernels | 16 | 25% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| B fast | final incumbents | 4 | 100% |"), std::string::npos) << md;
}

// Neither arm kept anything: every speedup is 1 by construction, d = 0 in every pair. That is no measurement, and
// neither the verdict nor the report may read as one.
TEST(ExperimentAnalysis, an_experiment_where_nothing_was_kept_is_not_shown_as_a_measured_interval) {
  const nlohmann::json plan = fake_plan(2);
  std::vector<nlohmann::json> records;
  std::vector<TrajectoryOutcome> outcomes;
  for (const char* task : {"x", "y"}) {
    for (int s = 1; s <= 2; ++s) {
      records.push_back(record(0, task, s, {"slower", "inconclusive"}, 0.0));
      records.push_back(record(1, task, s, {"no_candidate", "no_candidate"}, 0.0));
    }
  }
  for (const nlohmann::json& r : records) outcomes.push_back(outcome_of(r));
  const nlohmann::json an = analyze_experiment(plan, outcomes, "d");
  EXPECT_EQ(an["verdict"], "INCONCLUSIVE");
  EXPECT_EQ(an["difference"]["pairs"], 4);
  EXPECT_EQ(an["difference"]["measured_pairs"], 0);
  ASSERT_EQ(an["reasons"].size(), 1u);
  EXPECT_NE(an["reasons"][0].get<std::string>().find("nothing was measured"), std::string::npos) << an["reasons"];
  EXPECT_FALSE(an["pairs"][0]["measured_a"].get<bool>());
  EXPECT_TRUE(an["arms"][1]["fast_p_kernels"]["0"].is_number());
  EXPECT_EQ(an["arms"][1]["fast_p_kernels"]["0"], 0.0);  // four attempts, no kernel: none correct
  const nlohmann::json full_plan = report_plan(plan);
  const std::string md = experiment_markdown({&full_plan, &an, &records, "/nonexistent"});
  EXPECT_EQ(md.find("1.000x"), std::string::npos) << md;
  EXPECT_NE(md.find("| 4 of 4 | not measured |"), std::string::npos) << md;
  // Each side's cell says nothing was kept, with the best attempt's own A/B where it had one.
  EXPECT_NE(md.find("nothing kept, not measured (best attempt, 2: 1.002x \\[0.992x, 1.012x\\])"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| S? | nothing kept, not measured | 0 | NN | 0: nothing kept |"), std::string::npos) << md;
  EXPECT_NE(md.find("| A slow | 4 | 0 | none kept |"), std::string::npos) << md;
  EXPECT_NE(md.find("| nothing kept, not measured |"), std::string::npos) << md;
  // One pair measured is a measurement again.
  records[1] = record(1, "x", 1, {"kept"}, 0.4);
  outcomes[1] = outcome_of(records[1]);
  EXPECT_EQ(analyze_experiment(plan, outcomes, "d")["difference"]["measured_pairs"], 1);
}

}  // namespace
}  // namespace kwb

namespace kwb {
namespace {

TEST_F(ExperimentFile, an_arm_names_its_model_endpoints_by_key_variable_with_budgets_and_prices) {
  const std::string agent =
      "[[arms]]\nname = \"a\"\ncommand = [\"python3\", \"g.py\"]\naddress_space_gib = 16\n"
      "budget_per_attempt = { requests = 20, output_tokens = 100000 }\nbudget_per_arm = { usd = 5.5 }\n"
      "[[arms.endpoints]]\nname = \"anthropic\"\nurl = \"https://api.anthropic.com/\"\nkey_env = "
      "\"ANTHROPIC_API_KEY\"\n"
      "key_header = \"X-Api-Key\"\n[[arms]]\nname = \"b\"\ncommand = [\"x\"]\n";
  const std::string prices = "[[prices]]\nmodel = \"claude-*\"\ninput_usd_per_mtok = 3\noutput_usd_per_mtok = 15\n";
  const Experiment x = load("seeds = [1]\n" + tasks() + prices + agent);
  ASSERT_EQ(x.arms[0].endpoints.size(), 1u);
  const ModelEndpoint& e = x.arms[0].endpoints[0];
  EXPECT_EQ(e.name, "anthropic");
  EXPECT_EQ(e.url, "https://api.anthropic.com");  // no trailing '/': the generator's path follows it
  EXPECT_EQ(e.key_env, "ANTHROPIC_API_KEY");
  EXPECT_EQ(e.key_header, "x-api-key");
  EXPECT_EQ(x.arms[0].budget_per_attempt.requests, 20u);
  EXPECT_EQ(x.arms[0].budget_per_attempt.output_tokens, 100000u);
  EXPECT_FALSE(x.arms[0].budget_per_attempt.usd);
  EXPECT_EQ(x.arms[0].budget_per_arm.usd, 5.5);
  EXPECT_EQ(x.arms[0].address_space_gib, 16.0);
  ASSERT_EQ(x.prices.size(), 1u);
  EXPECT_EQ(x.prices[0].model, "claude-*");
  EXPECT_TRUE(x.arms[1].endpoints.empty());

  // A key in env would be stored in experiment.json and seen by the generator: refused, pointing at key_env.
  const std::string base = "seeds = [1]\n" + tasks();
  EXPECT_NE(error_of(base + "[[arms]]\nname = \"a\"\ncommand = [\"x\"]\nenv = { OPENAI_API_KEY = \"sk-1\" }\n[[arms]]\n"
                            "name = \"b\"\ncommand = [\"x\"]\n")
                .find("arms[0].env.OPENAI_API_KEY: looks like a secret"),
            std::string::npos);
  EXPECT_NE(error_of(base + agent).find("arms[0].budget_per_arm.usd: a money budget needs the models' prices"),
            std::string::npos);
  const auto endpoint_error = [&](const std::string& endpoint) {
    return error_of(base + "[[arms]]\nname = \"a\"\ncommand = [\"x\"]\n[[arms.endpoints]]\n" + endpoint +
                    "[[arms]]\nname = \"b\"\ncommand = [\"x\"]\n");
  };
  EXPECT_NE(endpoint_error("name = \"m\"\nurl = \"ftp://x\"\n").find("arms[0].endpoints[0].url"), std::string::npos);
  EXPECT_NE(endpoint_error("name = \"m\"\nurl = \"https://x\"\nkey_env = \"sk-abc123\"\n")
                .find("arms[0].endpoints[0].key_env: 'sk-abc123' is not an environment variable's name"),
            std::string::npos);
  EXPECT_NE(endpoint_error("name = \"a b\"\nurl = \"https://x\"\n").find("arms[0].endpoints[0].name"),
            std::string::npos);
  EXPECT_NE(endpoint_error("name = \"m\"\nurl = \"https://x\"\nkey = \"sk-1\"\n").find("key"), std::string::npos);
  EXPECT_NE(error_of(base + "[[arms]]\nname = \"a\"\ncommand = [\"x\"]\nbudget_per_attempt = { requests = 0 }\n"
                            "[[arms]]\nname = \"b\"\ncommand = [\"x\"]\n")
                .find("arms[0].budget_per_attempt.requests"),
            std::string::npos);
}

}  // namespace
}  // namespace kwb

namespace kwb {
namespace {

TEST_F(ExperimentFile, a_mount_is_frozen_by_hash_and_a_trajectory_sees_any_change_in_size_or_time) {
  fs::create_directories(m_dir / "model" / "shards");
  write_file_atomic(m_dir / "model" / "config.json", "{}");
  write_file_atomic(m_dir / "model" / "shards" / "0.bin", std::string(1000, 'w'));
  const Experiment x = load("seeds = [1]\n" + tasks() +
                            "[[arms]]\nname = \"a\"\ncommand = [\"x\"]\nmounts = [\"model\"]\n[[arms]]\nname = \"b\"\n"
                            "command = [\"x\"]\n");
  ASSERT_EQ(x.arms[0].mounts.size(), 1u);
  EXPECT_EQ(x.arms[0].mounts[0], m_dir / "model");
  const nlohmann::json frozen = mounted_file_list(m_dir / "model", true);
  ASSERT_EQ(frozen["files"].size(), 2u);
  EXPECT_EQ(frozen["files"][1]["path"], "shards/0.bin");
  EXPECT_EQ(frozen["files"][1]["bytes"], 1000);
  EXPECT_EQ(frozen["files"][1]["sha256"], sha256_hex(std::string(1000, 'w')));
  const auto unhashed = [](nlohmann::json j) {
    for (nlohmann::json& f : j["files"]) f.erase("sha256");
    return j;
  };
  EXPECT_EQ(mounted_file_list(m_dir / "model", false), unhashed(frozen));
  // Rewritten with the same bytes' count, a file has another time; a file added is another list.
  const fs::path shard = m_dir / "model" / "shards" / "0.bin";
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(5));
  EXPECT_NE(mounted_file_list(m_dir / "model", false), unhashed(frozen));
  write_file_atomic(m_dir / "model" / "extra", "x");
  EXPECT_EQ(mounted_file_list(m_dir / "model", false)["files"].size(), 3u);
  EXPECT_NE(error_of("seeds = [1]\n" + tasks() +
                     "[[arms]]\nname = \"a\"\ncommand = [\"x\"]\nmounts = [\"nope\"]\n[[arms]]\nname = \"b\"\n"
                     "command = [\"x\"]\n")
                .find("arms[0].mounts: 'nope'"),
            std::string::npos);
}

}  // namespace
}  // namespace kwb

namespace kwb {
namespace {

// Repeats (issue 43): an arm that is not deterministic runs each (task, seed) several times on the same data; the
// pair's side is its repeats' mean ln(speedup), so the pairs and their count are the seeds', not the repeats'.
TEST(ExperimentAnalysis, repeats_of_a_pair_are_averaged_into_one_side_and_a_missing_repeat_leaves_it_unknown) {
  nlohmann::json plan = fake_plan(2);
  plan["trajectories"] = nlohmann::json::array();
  std::vector<TrajectoryOutcome> outcomes;
  const double fast[] = {0.5, 0.1, 0.3};  // the nondeterministic arm's three repeats
  for (const char* task : {"x", "y"}) {
    for (int s = 1; s <= 2; ++s) {
      for (int r = 1; r <= 3; ++r) {
        for (int a = 0; a < 2; ++a) {
          const std::string id = fmt::format("{}-{}-{}-r{}", a, task, s, r);
          plan["trajectories"].push_back({{"id", id}, {"arm_index", a}, {"task", task}, {"seed", s}, {"repeat", r}});
          TrajectoryOutcome o = outcome(a, task, s, a == 0 ? 0.0 : fast[r - 1] + 0.01 * s);
          o.id = id;
          o.repeat = r;
          outcomes.push_back(o);
        }
      }
    }
  }
  const nlohmann::json an = analyze_experiment(plan, outcomes, "d");
  EXPECT_EQ(an["difference"]["pairs"], 4);  // 2 tasks x 2 seeds, whatever the repeats
  ASSERT_EQ(an["pairs"].size(), 4u);
  EXPECT_EQ(an["pairs"][0]["repeats"], 3);
  EXPECT_NEAR(an["pairs"][0]["d"].get<double>(), 0.3 + 0.01, 1e-12);  // the mean of 0.51, 0.11, 0.31
  EXPECT_EQ(an["pairs"][0]["a"], "0-x-1-r1");
  EXPECT_EQ(an["verdict"], "B_BETTER");
  // One repeat without an outcome: that pair's side is unknown (and the experiment INVALID, as any missing one).
  outcomes[1] = outcome(1, "x", 1, std::nullopt);
  outcomes[1].id = "1-x-1-r1";
  const nlohmann::json missing = analyze_experiment(plan, outcomes, "d");
  EXPECT_EQ(missing["pairs"][0]["log_speedup_b"], nullptr);
  EXPECT_EQ(missing["difference"]["pairs"], 3);
  EXPECT_EQ(missing["verdict"], "INVALID");
}

TEST_F(ExperimentFile, repeats_multiply_the_trajectories_and_name_them_apart) {
  const Experiment x = load("seeds = [1, 2]\nrepeats = 3\n" + tasks() + arms());
  EXPECT_EQ(x.repeats, 3);
  const std::vector<TrajectoryPlan> t = plan_trajectories(x);
  EXPECT_EQ(t.size(), 2u * 2u * 3u * 2u);  // tasks x seeds x repeats x arms
  EXPECT_EQ(t[0].id, "a--rmsnorm--s1--r1");
  EXPECT_EQ(t[3].id, "b--rmsnorm--s1--r2");
  EXPECT_EQ(plan_trajectories(load("seeds = [1]\n" + tasks() + arms()))[0].id, "a--rmsnorm--s1");
  EXPECT_NE(error_of("seeds = [1]\nrepeats = 1.5\n" + tasks() + arms()).find("repeats"), std::string::npos);
  EXPECT_NE(error_of("seeds = [1]\nrepeats = 0\n" + tasks() + arms()).find("repeats"), std::string::npos);
}

}  // namespace
}  // namespace kwb
