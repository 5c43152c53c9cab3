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
#include "util/machine_key.h"

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
    std::string state =
        j.phase == JobPhase::ended ? std::string(to_string(j.outcome)) : std::string(to_string(j.phase));
    if (j.phase == JobPhase::running && !j.waiting.empty()) state += " (waiting for " + j.waiting + ")";
    rows.push_back({j.id, state, j.decision.empty() ? "-" : j.decision, std::to_string(j.attempt),
                    j.handle.empty() ? "-" : j.executor + " " + j.handle,
                    j.scheduler_state.empty() ? "-" : j.scheduler_state + " " + j.scheduler_reason,
                    j.node.empty() ? (j.host.empty() ? "-" : j.host) : j.node, j.detail.empty() ? "-" : j.detail});
  }
  return format_table({"job", "state", "decision", "attempt", "handle", "Slurm", "node", "why"}, rows);
}

void write_reports(const fs::path& storage) {
  const CampaignState state = load_state(storage);
  CampaignReportInput in{&state, storage, {}, {}};
  const TrustedKeys keys = trusted_keys();
  if (keys.own) in.trusted_keys.emplace_back("this machine", *keys.own);
  for (size_t i = 0; i < keys.others.size(); ++i) {
    in.trusted_keys.emplace_back(keys.files.at(i).stem().string(), keys.others[i]);
  }
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

// kwb.campaign_status: the counts and the current jobs (status --json, and run and cancel with --json).
nlohmann::json status_json(const fs::path& storage, const CampaignState& state) {
  const std::optional<int> runner = CampaignLock::holder(storage);
  nlohmann::json jobs = nlohmann::json::array();
  for (const Job& j : state.jobs) {
    if (j.current) jobs.push_back(to_json(j));
  }
  return {{"schema", "kwb.campaign_status"},
          {"schema_version", 1},
          {"name", state.name},
          {"storage", storage.string()},
          {"counts", counts(state)},
          {"runner_pid", runner ? nlohmann::json(*runner) : nlohmann::json(nullptr)},
          {"jobs", jobs}};
}

int run_verb(const std::string& file, bool dry_run, bool json) {
  const Campaign c = load_campaign(file, check_validate_flag);
  std::unique_ptr<Executor> executor = make_executor(c);
  std::cerr << fmt::format("kwb campaign: {} ({} task(s), executor {}, storage {})\n", c.name, c.tasks.size(),
                           to_string(c.executor), c.storage.string());
  const RunSummary s = run_campaign(c, *executor, hooks(), dry_run ? RunMode::plan_only : RunMode::run);
  const CampaignState state = load_state(c.storage);
  if (dry_run && json) {
    std::cout << json_text(status_json(c.storage, state), 2) << "\n";
    return 0;
  }
  if (dry_run) {
    std::cout << fmt::format("campaign {}: {} job(s) planned, {} decided earlier; nothing submitted (--dry-run)\n",
                             c.name, s.planned, s.skipped)
              << jobs_table(state) << (s.submission.empty() ? "" : "\n" + s.submission);
    return 0;
  }
  write_reports(c.storage);
  // 0 when every job of the campaign has a decision (whichever it is), 1 when some job ended without one.
  const int rc = counts(state).at("decided") == s.planned ? 0 : static_cast<int>(ExitCode::rejected);
  if (json) {
    std::cout << json_text(status_json(c.storage, state), 2) << "\n";
    return rc;
  }
  std::cout << fmt::format("campaign {}: {} job(s), {} skipped (decided earlier), {} attempt(s) started\n", c.name,
                           s.planned, s.skipped, s.started)
            << jobs_table(state) << counts_line(state) << "\n"
            << fmt::format("state: {}\nreport: {}\n", state_path(c.storage).string(),
                           (c.storage / "report.md").string());
  return rc;
}

int status_verb(const std::string& given, bool json) {
  const fs::path storage = storage_of(given);
  const CampaignState state = load_state(storage);
  const std::optional<int> runner = CampaignLock::holder(storage);
  if (json) {
    std::cout << json_text(status_json(storage, state), 2) << "\n";
    return 0;
  }
  std::cout << fmt::format("campaign {} ({}): {}\n", state.name, storage.string(),
                           runner ? fmt::format("running (pid {})", *runner) : "no campaign process running")
            << jobs_table(state) << counts_line(state) << "\n";
  return 0;
}

int cancel_verb(const std::string& given, bool json) {
  const fs::path storage = storage_of(given);
  std::unique_ptr<Executor> slurm = make_slurm_executor(SlurmOptions{});
  const size_t n = cancel_campaign(storage, *slurm, hooks());
  const CampaignState state = load_state(storage);
  if (json) {
    std::cout << json_text(status_json(storage, state), 2) << "\n";
    return 0;
  }
  std::cout << fmt::format("cancelled {} job(s)\n", n) << counts_line(state) << "\n";
  return 0;
}

// kwb campaign trust KEY [--name NAME]: KEY is a node's machine.pub (a file) or its 64 hex digits.
int trust_verb(const std::string& given, const std::string& named) {
  std::string key = given, name = named;
  if (fs::is_regular_file(given)) {
    key = read_file(given);
    // keys-n2/machine.pub -> "keys-n2"; a file named n2.pub -> "n2".
    if (name.empty()) {
      const fs::path p = fs::absolute(given);
      name = p.filename() == "machine.pub" ? p.parent_path().filename().string() : p.stem().string();
    }
  }
  if (name.empty()) name = "node-" + key.substr(0, 16);
  const fs::path file = trust_key(key, name);
  std::cout << fmt::format(
      "{}: trusted. Bundles signed by this key are now accepted here: by campaigns, keep and verify "
      "(docs/campaigns.md, "
      "\"Authentication\")\n",
      file.string());
  return 0;
}

int report_verb(const std::string& given, bool json) {
  const fs::path storage = storage_of(given);
  write_reports(storage);
  if (json) {
    const CampaignState state = load_state(storage);
    std::cout << json_text({{"schema", "kwb.campaign_report"},
                            {"schema_version", 1},
                            {"name", state.name},
                            {"storage", storage.string()},
                            {"counts", counts(state)},
                            {"report_md", (storage / "report.md").string()},
                            {"report_html", (storage / "report.html").string()},
                            {"markdown", read_file(storage / "report.md")}},
                           2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format("{}\n{}\n", (storage / "report.md").string(), (storage / "report.html").string());
  return 0;
}

}  // namespace

Action add_campaign(CLI::App& root) {
  struct Args {
    std::string target;
    bool json = false;
    bool dry_run = false;
    std::string name;
  };
  auto a = std::make_shared<Args>();
  CLI::App* app = root.add_subcommand("campaign",
                                      "Many candidates, each validated in a job of its own, on this machine "
                                      "or through Slurm (docs/campaigns.md)");
  app->require_subcommand(1);
  CLI::App* run = app->add_subcommand("run", "Run (or resume) the campaign a TOML file describes");
  run->add_option("file", a->target, "Campaign file (.toml)")->required();
  run->add_flag("--dry-run", a->dry_run,
                "Plan the jobs and record them in the state, and print what would be submitted (the sbatch line and "
                "the job scripts); submit nothing");
  run->add_flag("--json", a->json, "At the end, print the campaign's status as JSON (schema kwb.campaign_status)");
  CLI::App* status = app->add_subcommand("status", "Queued, running, decided and failed jobs");
  status->add_option("campaign", a->target, "Campaign file, or its storage folder")->required();
  status->add_flag("--json", a->json, "Print the jobs as JSON");
  CLI::App* cancel = app->add_subcommand("cancel", "Stop the campaign and cancel its queued and running jobs");
  cancel->add_option("campaign", a->target, "Campaign file, or its storage folder")->required();
  cancel->add_flag("--json", a->json, "Print the campaign's status afterwards as JSON (schema kwb.campaign_status)");
  CLI::App* report = app->add_subcommand("report", "Write report.md and report.html into the storage folder");
  report->add_option("campaign", a->target, "Campaign file, or its storage folder")->required();
  report->add_flag("--json", a->json, "Print the report's paths and its Markdown as JSON (schema kwb.campaign_report)");
  CLI::App* trust = app->add_subcommand(
      "trust", "Enrol a node's public key, so that the bundles its jobs sign are accepted here (docs/campaigns.md)");
  trust->add_option("key", a->target, "The node's machine.pub, or its 64 hex digits (kwb doctor on the node prints it)")
      ->required();
  trust->add_option("--name", a->name, "The name to file it under (default: the key's folder, e.g. keys-n2)");
  return [a, run, status, cancel, report, trust]() {
    if (trust->parsed()) return trust_verb(a->target, a->name);
    if (run->parsed()) return run_verb(a->target, a->dry_run, a->json);
    if (status->parsed()) return status_verb(a->target, a->json);
    if (cancel->parsed()) return cancel_verb(a->target, a->json);
    if (report->parsed()) return report_verb(a->target, a->json);
    return static_cast<int>(ExitCode::usage);
  };
}

}  // namespace kwb::cli
