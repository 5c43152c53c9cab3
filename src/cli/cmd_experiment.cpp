// kwb experiment run FILE | trajectory DIR ID | status FILE|DIR | report FILE|DIR (docs/experiments.md): does one
// candidate generator produce better kernels than another? Two arms, paired by task and seed, every proposal judged
// by kwb validate, the difference given with its interval.
#include "cli/commands.h"
#include "experiment/experiment_file.h"
#include "experiment/plan.h"
#include "experiment/runner.h"
#include "experiment/study_plan.h"
#include "experiment/trajectory.h"
#include "util/error.h"
#include "util/json_text.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include <iostream>

namespace kwb::cli {

// Named, not anonymous: the unity build puts every verb's file in one translation unit.
namespace experiment_verbs {

namespace fs = std::filesystem;

// An experiment's storage folder, from the folder itself or from its experiment file.
fs::path storage_of(const std::string& given) {
  if (fs::is_regular_file(given)) return load_experiment(given, check_validate_flag).storage;
  if (!fs::is_regular_file(ExperimentPaths{given}.plan())) {
    throw UsageError(
        fmt::format("{}: neither an experiment file nor an experiment's storage folder (one holds "
                    "experiment.json once kwb experiment run has started)",
                    given));
  }
  return fs::absolute(given).lexically_normal();
}

// validate's exit codes for the experiment's four outcomes: a difference shown either way 0, INCONCLUSIVE 2,
// INVALID 3.
int exit_code_of(const std::string& verdict) {
  if (verdict == "B_BETTER" || verdict == "A_BETTER") return 0;
  if (verdict == "INCONCLUSIVE") return 2;
  return 3;
}

std::string summary_line(const nlohmann::json& an) {
  const nlohmann::json& d = an["difference"];
  return fmt::format(
      "verdict: {} ({}); mean d {:+.4f}, {:.0f}% interval [{:+.4f}, {:+.4f}] ({}, {} pairs), B/A "
      "{:.3f}x [{:.3f}x, {:.3f}x]",
      an.value("verdict_text", ""), an.value("verdict", ""), d.value("mean", 0.0), an.value("confidence", 0.95) * 100.0,
      d.value("low", 0.0), d.value("high", 0.0), d.value("method", ""), d.value("pairs", 0), d.value("ratio", 1.0),
      d.value("ratio_low", 1.0), d.value("ratio_high", 1.0));
}

int run_verb(const std::string& file, bool dry_run, bool json, const std::string& storage, const std::string& replay) {
  Experiment x = load_experiment(file, check_validate_flag);
  if (!storage.empty()) x.storage = fs::absolute(storage).lexically_normal();
  if (!replay.empty()) {
    x.replay_from = fs::absolute(replay).lexically_normal();
    if (!fs::is_regular_file(ExperimentPaths{x.replay_from}.plan())) {
      throw UsageError(
          fmt::format("--replay {}: not an experiment's storage folder (it holds no experiment.json)", replay));
    }
  }
  std::unique_ptr<Executor> executor = make_experiment_executor(x);
  std::cerr << fmt::format(
      "kwb experiment: {} ({} x {} task(s) x {} seed(s) x {} attempt(s), executor {}, storage "
      "{})\n",
      x.name, x.arms.size(), x.tasks.size(), x.seeds.size(), x.attempts, to_string(x.executor.kind),
      x.storage.string());
  const ExperimentRunSummary s = run_experiment(
      x, *executor, fs::read_symlink("/proc/self/exe"),
      [](const std::string& line) { std::cerr << "kwb experiment: " << line << "\n"; }, dry_run);
  if (dry_run) {
    std::cout << fmt::format("experiment {}: frozen ({}); {} trajectories, {} done earlier; nothing run (--dry-run)\n",
                             x.name, ExperimentPaths{x.storage}.plan().string(), s.trajectories, s.skipped);
    return 0;
  }
  const nlohmann::json an = write_experiment_reports(x.storage);
  if (json) {
    std::cout << json_text(an, 2) << "\n";
    return exit_code_of(an.value("verdict", "INVALID"));
  }
  std::cout << fmt::format(
      "experiment {}: {} trajectories, {} done earlier, {} run now ({} without an outcome) in "
      "{:.0f} s\n{}\nanalysis: {}\nreport: {}\n",
      x.name, s.trajectories, s.skipped, s.started, s.failed, s.wall_seconds, summary_line(an),
      ExperimentPaths{x.storage}.analysis().string(), (x.storage / "report.md").string());
  return exit_code_of(an.value("verdict", "INVALID"));
}

int trajectory_verb(const std::string& storage, const std::string& id) {
  const nlohmann::json r = run_trajectory(storage, id, fs::read_symlink("/proc/self/exe"));
  std::cout << fmt::format("trajectory {}: {}\n", id, r.value("status", ""));
  return r.value("status", "") == "done" ? 0 : static_cast<int>(ExitCode::rejected);
}

int status_verb(const std::string& given, bool json) {
  const fs::path storage = storage_of(given);
  const nlohmann::json plan = load_frozen_plan(storage);
  const std::vector<nlohmann::json> records = trajectory_records(storage);
  std::map<std::string, int> counts;
  nlohmann::json list = nlohmann::json::array();
  for (const nlohmann::json& t : plan["trajectories"]) {
    const std::string id = t["id"].get<std::string>();
    std::string status = "pending";
    int attempts = 0;
    for (const nlohmann::json& r : records) {
      if (r.value("id", "") == id) {
        status = r.value("status", "running");
        attempts = static_cast<int>(r.value("attempts", nlohmann::json::array()).size());
      }
    }
    ++counts[status];
    list.push_back({{"id", id}, {"status", status}, {"attempts_done", attempts}});
  }
  if (json) {
    std::cout << json_text({{"schema", "kwb.experiment_status"},
                            {"schema_version", 1},
                            {"name", plan.value("name", "")},
                            {"storage", storage.string()},
                            {"counts", counts},
                            {"trajectories", list}},
                           2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format("experiment {} ({}):\n", plan.value("name", ""), storage.string());
  for (const nlohmann::json& t : list) {
    std::cout << fmt::format("  {:<48} {:<8} {} of {} attempt(s)\n", t["id"].get<std::string>(),
                             t["status"].get<std::string>(), t["attempts_done"].get<int>(),
                             plan["settings"]["attempts"].get<int>());
  }
  for (const auto& [k, n] : counts) std::cout << fmt::format("{} {}\n", n, k);
  return 0;
}

int report_verb(const std::string& given, bool json) {
  const fs::path storage = storage_of(given);
  const nlohmann::json an = write_experiment_reports(storage);
  if (json) {
    std::cout << json_text(an, 2) << "\n";
    return 0;
  }
  std::cout << summary_line(an) << "\n"
            << fmt::format("{}\n{}\n{}\n", ExperimentPaths{storage}.analysis().string(),
                           (storage / "report.md").string(), (storage / "report.html").string());
  return 0;
}

// "1.2x", "1.2" or "20%": a ratio above 1.
double parse_effect(const std::string& text) {
  std::string t = text;
  double scale = 1.0, offset = 0.0;
  if (!t.empty() && (t.back() == 'x' || t.back() == 'X')) {
    t.pop_back();
  } else if (!t.empty() && t.back() == '%') {
    t.pop_back();
    scale = 0.01;
    offset = 1.0;
  }
  double v = 0.0;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  const double ratio = offset + scale * v;
  if (ec != std::errc() || p != t.data() + t.size() || !(ratio > 1.0) || !std::isfinite(ratio)) {
    throw UsageError(
        fmt::format("--effect {}: give the smallest B/A worth finding as a ratio above 1 (1.2x) or a "
                    "gain in percent (20%)",
                    text));
  }
  return ratio;
}

// What the plan needs of the experiment: its tasks and confidence, from the file or its frozen plan.
struct PlannedExperiment {
  int tasks = 0;
  double confidence = 0.95;
  fs::path storage;
};

PlannedExperiment planned_experiment(const std::string& given) {
  PlannedExperiment e;
  if (fs::is_regular_file(given)) {
    const Experiment x = load_experiment(given, check_validate_flag);
    e.tasks = static_cast<int>(x.tasks.size());
    e.confidence = x.confidence;
    e.storage = x.storage;
  } else {
    e.storage = storage_of(given);
    const nlohmann::json plan = load_frozen_plan(e.storage);
    e.tasks = static_cast<int>(plan["tasks"].size());
    e.confidence = plan["settings"].value("confidence", 0.95);
  }
  return e;
}

// The spread of d from a pilot's analysis; `sd_from` says where it came from.
double pilot_sd(const nlohmann::json& analysis, const fs::path& pilot_dir, std::string& sd_from) {
  const std::optional<PilotSpread> spread = pilot_spread(analysis);
  if (!spread || !(spread->sd > 0.0)) {
    throw UsageError(
        fmt::format("the pilot {} has fewer than two measured pairs, or they are all equal: its spread "
                    "of d says nothing; run more seeds, or state --sd",
                    pilot_dir.string()));
  }
  sd_from = fmt::format("pilot {}: {} pairs, {} ({} df)", pilot_dir.string(), analysis["difference"].value("pairs", 0),
                        spread->from, spread->df);
  return spread->sd;
}

// What a pair costs, from the pilot: its trajectories' generator and validate seconds, and model dollars.
nlohmann::json cost_per_pair(const nlohmann::json& analysis) {
  double seconds = 0.0, usd = 0.0;
  const int pairs = std::max(1, analysis["difference"].value("planned_pairs", 1));
  for (const nlohmann::json& arm : analysis["arms"]) {
    const nlohmann::json& c = arm["cost"];
    seconds += c.value("generator_wall_seconds", 0.0) + c.value("validate_seconds", 0.0);
    usd += c.value("model_usd", 0.0);
  }
  return {{"seconds", seconds / pairs}, {"usd", usd / pairs}};
}

void print_study_plan(const nlohmann::json& out) {
  const double ratio = out["effect_ratio"].get<double>(), half_width = out["half_width"].get<double>();
  const int pairs = out["pairs"].get<int>(), seeds = out["seeds"].get<int>();
  std::cout << fmt::format(
      "to show B/A >= {:.3g}x (d = {:.4f}) at {:.0f}% confidence with {:.0f}% power, sigma of d {:.4f} ({}):\n"
      "  {} task(s) x {} seed(s) = {} pairs ({} trajectories){}; achieved power {:.0f}%, expected interval "
      "half-width {:.4f} in d (x{:.3f})\n",
      ratio, std::log(ratio), out["confidence"].get<double>() * 100.0, out["power"].get<double>() * 100.0,
      out["sd"].get<double>(), out["sd_from"].get<std::string>(), out["tasks"].get<int>(), seeds, pairs, 2 * pairs,
      out["capped"].get<bool>() ? " (capped: the effect is too small for this sigma)" : "",
      out["achieved_power"].get<double>() * 100.0, half_width, std::exp(half_width));
  const nlohmann::json& per_pair = out["per_pair"];
  if (per_pair.is_object()) {
    std::cout << fmt::format(
        "  from the pilot: about {:.1f} h of generators and validates and {:.2f} USD of model "
        "calls in all\n",
        per_pair["seconds"].get<double>() * pairs / 3600.0, per_pair["usd"].get<double>() * pairs);
  }
  std::cout << fmt::format("  give the experiment file {} seeds: seeds = [1, 2, ..., {}]\n", seeds, seeds);
}

int plan_verb(const std::string& given, const std::string& effect_text, double sd, const std::string& pilot,
              double power, bool json) {
  const PlannedExperiment x = planned_experiment(given);
  // sigma: stated, or from a pilot's analysis (--pilot, else the experiment's own storage when it has run).
  const fs::path pilot_dir = pilot.empty() ? x.storage : fs::path(pilot);
  std::optional<nlohmann::json> pilot_analysis;
  if (sd <= 0.0 || !pilot.empty()) {
    if (!fs::is_regular_file(ExperimentPaths{pilot_dir}.plan())) {
      throw UsageError(
          fmt::format("no pilot to take the spread of d from ({} holds no experiment): run a pilot "
                      "(a few seeds) and give --pilot ITS_STORAGE, or state --sd",
                      pilot_dir.string()));
    }
    pilot_analysis = write_experiment_reports(pilot_dir);
  }
  std::string sd_from = "stated (--sd)";
  if (sd <= 0.0) sd = pilot_sd(*pilot_analysis, pilot_dir, sd_from);
  StudyPlanInput in;
  in.effect_ratio = parse_effect(effect_text);
  in.sd = sd;
  in.tasks = x.tasks;
  in.confidence = x.confidence;
  in.power = power;
  const StudyPlan p = plan_study(in);
  const nlohmann::json out = {
      {"schema", "kwb.experiment_study_plan"},
      {"schema_version", 1},
      {"effect_ratio", in.effect_ratio},
      {"delta", std::log(in.effect_ratio)},
      {"sd", sd},
      {"sd_from", sd_from},
      {"confidence", x.confidence},
      {"power", power},
      {"tasks", x.tasks},
      {"seeds", p.seeds},
      {"pairs", p.pairs},
      {"df", p.df},
      {"achieved_power", p.power},
      {"half_width", p.half_width},
      {"capped", p.capped},
      {"per_pair", pilot_analysis ? cost_per_pair(*pilot_analysis) : nlohmann::json(nullptr)},
  };
  if (json) {
    std::cout << json_text(out, 2) << "\n";
  } else {
    print_study_plan(out);
  }
  return p.capped ? static_cast<int>(ExitCode::inconclusive) : 0;
}

}  // namespace experiment_verbs

Action add_experiment(CLI::App& root) {
  struct Args {
    std::string target;
    std::string id;
    bool json = false;
    bool dry_run = false;
    std::string storage;
    std::string replay;
    std::string effect;
    double sd = 0.0;
    std::string pilot;
    double power = 0.8;
  };
  auto a = std::make_shared<Args>();
  CLI::App* app = root.add_subcommand("experiment",
                                      "Does one candidate generator (an agent, a skill) produce better "
                                      "kernels than another? A paired two-arm evaluation "
                                      "(docs/experiments.md)");
  app->require_subcommand(1);
  CLI::App* run = app->add_subcommand("run",
                                      "Freeze and run (or resume) the experiment a TOML file describes, then "
                                      "analyze it");
  run->add_option("file", a->target, "Experiment file (.toml)")->required();
  run->add_flag("--dry-run", a->dry_run, "Freeze the plan and say what would run; run nothing");
  run->add_flag("--json", a->json, "Print the analysis as JSON (schema kwb.experiment_analysis)");
  run->add_option("--storage", a->storage, "Storage folder to use instead of the file's `storage`");
  run->add_option("--replay", a->replay,
                  "A recorded experiment's storage folder: every arm's model proxy serves its recorded answers in "
                  "order instead of calling a model (no key needed; docs/arms.md)");
  CLI::App* traj = app->add_subcommand("trajectory", "Run one trajectory of a frozen experiment (what each job runs)");
  traj->add_option("storage", a->target, "The experiment's storage folder")->required();
  traj->add_option("id", a->id, "The trajectory's id (experiment.json's trajectories[].id)")->required();
  CLI::App* status = app->add_subcommand("status", "Each trajectory: pending, running, done or invalid");
  status->add_option("experiment", a->target, "Experiment file, or its storage folder")->required();
  status->add_flag("--json", a->json, "Print as JSON");
  CLI::App* plan = app->add_subcommand(
      "plan", "How many seeds an experiment needs to show an effect, from a pilot's spread or a stated one");
  plan->add_option("experiment", a->target, "Experiment file, or its storage folder")->required();
  plan->add_option("--effect", a->effect, "The smallest B/A worth finding: 1.2x, or 20%")->required();
  plan->add_option("--sd", a->sd, "The standard deviation of d within a task (instead of a pilot's)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--pilot", a->pilot,
                   "A pilot experiment's storage folder to take the spread of d and the costs from (default: the "
                   "experiment's own, when it has run)");
  plan->add_option("--power", a->power, "The chance of showing an effect of that size")->check(CLI::Range(0.5, 0.999));
  plan->add_flag("--json", a->json, "Print as JSON (schema kwb.experiment_study_plan)");
  CLI::App* report = app->add_subcommand("report", "Analyze and write analysis.json, report.md and report.html");
  report->add_option("experiment", a->target, "Experiment file, or its storage folder")->required();
  report->add_flag("--json", a->json, "Print the analysis as JSON (schema kwb.experiment_analysis)");
  return [a, run, traj, status, plan, report]() {
    if (plan->parsed()) return experiment_verbs::plan_verb(a->target, a->effect, a->sd, a->pilot, a->power, a->json);
    if (run->parsed()) return experiment_verbs::run_verb(a->target, a->dry_run, a->json, a->storage, a->replay);
    if (traj->parsed()) return experiment_verbs::trajectory_verb(a->target, a->id);
    if (status->parsed()) return experiment_verbs::status_verb(a->target, a->json);
    if (report->parsed()) return experiment_verbs::report_verb(a->target, a->json);
    return static_cast<int>(ExitCode::usage);
  };
}

}  // namespace kwb::cli
