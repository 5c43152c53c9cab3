// kwb campaign run FILE | status DIR|FILE | cancel DIR|FILE | report DIR|FILE (docs/campaigns.md): many candidates,
// each judged by kwb validate in a job of its own, on this machine or through Slurm, every decision recorded in the
// ledger once its bundle verifies and is authentic.
#include "campaign/campaign_file.h"
#include "campaign/campaign_report.h"
#include "campaign/runner.h"
#include "cli/commands.h"
#include "cli/ledger.h"
#include "cli/options.h"
#include "cli/terminal.h"
#include "task/task.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>

namespace kwb::cli {

namespace {

namespace fs = std::filesystem;

}  // namespace

std::string check_validate_flag(const std::string& flag, const std::string& value) {
  // A row of util/option_table.h with choices (--gate) takes one of them.
  for (const OptionRow& row : option_rows()) {
    if (flag != row.flag || row.choices.empty()) continue;
    if (std::find(row.choices.begin(), row.choices.end(), value) != row.choices.end()) return "";
    return fmt::format("{} must be one of {} (got {})", flag, fmt::join(row.choices, ", "), value);
  }
  if (const OptionRange* r = option_range(flag)) return out_of_range(*r, value);
  return "";
}

namespace {

// A campaign's storage folder, from the folder itself or from its campaign file.
fs::path storage_of(const std::string& given) {
  if (fs::is_regular_file(given)) return load_campaign(given, check_validate_flag).storage;
  if (!fs::is_regular_file(state_path(given))) {
    throw UsageError(
        fmt::format("{}: neither a campaign file nor a campaign's storage folder (one holds "
                    "campaign.json once kwb campaign run has started)",
                    given));
  }
  return fs::absolute(given).lexically_normal();
}

RunnerHooks hooks() {
  RunnerHooks h;
  h.record_accepted = [](const fs::path& bundle, const std::string& manifest) {
    record_bundle_in_ledger(bundle, "validate", manifest);
  };
  h.say = [](const std::string& line) { std::cerr << "kwb campaign: " << line << "\n"; };
  return h;
}

// queued (waiting or queued), running, decided, failed (every other end), for the jobs of the current campaign.
std::map<std::string, size_t> counts(const CampaignState& s) {
  std::map<std::string, size_t> c = {{"queued", 0}, {"running", 0}, {"decided", 0}, {"failed", 0}};
  for (const Job& j : s.jobs) {
    if (!j.current) continue;
    if (j.phase == JobPhase::waiting || j.phase == JobPhase::queued) ++c["queued"];
    if (j.phase == JobPhase::running) ++c["running"];
    if (j.phase == JobPhase::ended) ++c[j.outcome == JobOutcome::decided ? "decided" : "failed"];
  }
  return c;
}

std::string counts_line(const CampaignState& s) {
  const std::map<std::string, size_t> c = counts(s);
  return fmt::format("{} queued, {} running, {} decided, {} failed", c.at("queued"), c.at("running"), c.at("decided"),
                     c.at("failed"));
}

std::string jobs_table(const CampaignState& s) {
  std::vector<std::vector<std::string>> rows;
  for (const Job& j : s.jobs) {
    if (!j.current) continue;
    const std::string state =
        j.phase == JobPhase::ended ? std::string(to_string(j.outcome)) : std::string(to_string(j.phase));
    rows.push_back({j.id, state, j.decision.empty() ? "-" : j.decision, std::to_string(j.attempt),
                    j.handle.empty() ? "-" : j.executor + " " + j.handle,
                    j.scheduler_state.empty() ? "-" : j.scheduler_state + " " + j.scheduler_reason,
                    j.detail.empty() ? "-" : j.detail});
  }
  return format_table({"job", "state", "decision", "attempt", "handle", "Slurm", "why"}, rows);
}

void write_reports(const fs::path& storage) {
  const CampaignState state = load_state(storage);
  CampaignReportInput in{&state, storage, {}};
  for (const Job& j : state.jobs) {
    if (in.lineages.contains(j.task)) continue;
    const std::optional<fs::path> path = ledger_path(j.task_dir);
    if (!path || !fs::is_regular_file(*path)) continue;
    try {
      // The lineage is keyed by the task's identity: the folder's, as it is now.
      in.lineages[j.task] = Ledger::open(*path).lineage(load_task(j.task_dir).identity, j.backend);
    } catch (const Error& e) {
      std::cerr << fmt::format("kwb campaign: warning: the lineage of {} is left out: {}\n", j.task, e.what());
    }
  }
  write_file_atomic(storage / "report.md", campaign_markdown(in));
  write_file_atomic(storage / "report.html", campaign_html(in));
}

int run_verb(const std::string& file, bool dry_run) {
  const Campaign c = load_campaign(file, check_validate_flag);
  std::unique_ptr<Executor> executor = make_executor(c);
  std::cerr << fmt::format("kwb campaign: {} ({} task(s), executor {}, storage {})\n", c.name, c.tasks.size(),
                           to_string(c.executor), c.storage.string());
  const RunSummary s = run_campaign(c, *executor, hooks(), dry_run ? RunMode::plan_only : RunMode::run);
  const CampaignState state = load_state(c.storage);
  if (dry_run) {
    std::cout << fmt::format("campaign {}: {} job(s) planned, {} decided earlier; nothing submitted (--dry-run)\n",
                             c.name, s.planned, s.skipped)
              << jobs_table(state);
    return 0;
  }
  write_reports(c.storage);
  std::cout << fmt::format("campaign {}: {} job(s), {} skipped (decided earlier), {} attempt(s) started\n", c.name,
                           s.planned, s.skipped, s.started)
            << jobs_table(state) << counts_line(state) << "\n"
            << fmt::format("state: {}\nreport: {}\n", state_path(c.storage).string(),
                           (c.storage / "report.md").string());
  // 0 when every job of the campaign has a decision (whichever it is), 1 when some job ended without one.
  return counts(state).at("decided") == s.planned ? 0 : static_cast<int>(ExitCode::rejected);
}

int status_verb(const std::string& given, bool json) {
  const fs::path storage = storage_of(given);
  const CampaignState state = load_state(storage);
  const std::optional<int> runner = CampaignLock::holder(storage);
  if (json) {
    nlohmann::json jobs = nlohmann::json::array();
    for (const Job& j : state.jobs) {
      if (j.current) jobs.push_back(to_json(j));
    }
    std::cout << json_text({{"schema", "kwb.campaign_status"},
                            {"schema_version", 1},
                            {"name", state.name},
                            {"storage", storage.string()},
                            {"counts", counts(state)},
                            {"runner_pid", runner ? nlohmann::json(*runner) : nlohmann::json(nullptr)},
                            {"jobs", jobs}},
                           2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format("campaign {} ({}): {}\n", state.name, storage.string(),
                           runner ? fmt::format("running (pid {})", *runner) : "no campaign process running")
            << jobs_table(state) << counts_line(state) << "\n";
  return 0;
}

int cancel_verb(const std::string& given) {
  const fs::path storage = storage_of(given);
  std::unique_ptr<Executor> slurm = make_slurm_executor(SlurmOptions{});
  const size_t n = cancel_campaign(storage, *slurm, hooks());
  const CampaignState state = load_state(storage);
  std::cout << fmt::format("cancelled {} job(s)\n", n) << counts_line(state) << "\n";
  return 0;
}

int report_verb(const std::string& given) {
  const fs::path storage = storage_of(given);
  write_reports(storage);
  std::cout << fmt::format("{}\n{}\n", (storage / "report.md").string(), (storage / "report.html").string());
  return 0;
}

}  // namespace

Action add_campaign(CLI::App& root) {
  struct Args {
    std::string target;
    bool json = false;
    bool dry_run = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* app = root.add_subcommand("campaign",
                                      "Many candidates, each validated in a job of its own, on this machine "
                                      "or through Slurm (docs/campaigns.md)");
  app->require_subcommand(1);
  CLI::App* run = app->add_subcommand("run", "Run (or resume) the campaign a TOML file describes");
  run->add_option("file", a->target, "Campaign file (.toml)")->required();
  run->add_flag("--dry-run", a->dry_run, "Plan the jobs and record them in the state; submit nothing");
  CLI::App* status = app->add_subcommand("status", "Queued, running, decided and failed jobs");
  status->add_option("campaign", a->target, "Campaign file, or its storage folder")->required();
  status->add_flag("--json", a->json, "Print the jobs as JSON");
  CLI::App* cancel = app->add_subcommand("cancel", "Stop the campaign and cancel its queued and running jobs");
  cancel->add_option("campaign", a->target, "Campaign file, or its storage folder")->required();
  CLI::App* report = app->add_subcommand("report", "Write report.md and report.html into the storage folder");
  report->add_option("campaign", a->target, "Campaign file, or its storage folder")->required();
  return [a, run, status, cancel, report]() {
    if (run->parsed()) return run_verb(a->target, a->dry_run);
    if (status->parsed()) return status_verb(a->target, a->json);
    if (cancel->parsed()) return cancel_verb(a->target);
    if (report->parsed()) return report_verb(a->target);
    return static_cast<int>(ExitCode::usage);
  };
}

}  // namespace kwb::cli
