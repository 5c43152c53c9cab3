// The loop's verbs on the ledger (ledger/ledger.h, docs/agents.md):
//   kwb keep BUNDLE              promote a verified KEEP_CANDIDATE bundle's candidate to incumbent
//   kwb history TASK [--backend] the lineage of kept implementations and the runs recorded for the task
// and the recording every check, compare and validate does (record_in_ledger).
#include "cli/commands.h"
#include "cli/ledger.h"
#include "cli/terminal.h"
#include "ledger/bundle_entry.h"
#include "task/task.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/sha256.h"

#include <fmt/format.h>

#include <iostream>

namespace kwb::cli {

namespace {

Ledger open_ledger_or_throw() {
  const std::optional<std::filesystem::path> path = ledger_path();
  if (!path) throw UsageError("KWB_LEDGER=none: there is no ledger to read or keep in (unset it, or name a file)");
  return Ledger::open(*path);
}

// The latest revalidation of `incumbent` against generation 0, if any.
std::optional<LedgerRun> latest_revalidation(const std::vector<LedgerRun>& runs, const Incumbent& incumbent) {
  std::optional<LedgerRun> latest;
  for (const LedgerRun& r : runs) {
    if (r.kind != "revalidate") continue;
    for (const LedgerArm& arm : r.arms) {
      if (arm.role == "candidate" && arm.identity == incumbent.identity) latest = r;
    }
  }
  return latest;
}

nlohmann::json to_json(const Incumbent& i) {
  const nlohmann::json ws = kwb::to_json(i.workloads);
  return {{"generation", i.generation}, {"identity", i.identity},           {"source", i.source},
          {"source_sha256", i.source_sha256}, {"bundle", i.bundle},       {"kept", i.kept},
          {"improvement_pct", i.improvement_pct}, {"cumulative_pct", i.cumulative_pct}, {"workloads", ws}};
}

}  // namespace

void record_in_ledger(const LedgerRun& run) {
  try {
    const std::optional<std::filesystem::path> path = ledger_path();
    if (!path) return;
    Ledger::open(*path).record(run);
  } catch (const std::exception& e) {
    // The run itself is done and its result stands; only the note of it is missing.
    std::cerr << fmt::format("kwb: warning: not recorded in the ledger: {}\n", e.what());
  }
}

void record_bundle_in_ledger(const std::filesystem::path& bundle, const std::string& kind,
                             const std::string& manifest_sha256) {
  try {
    if (!ledger_path()) return;
    LedgerRun run = run_from_bundle(bundle);
    run.kind = kind;
    run.manifest_sha256 = manifest_sha256;
    record_in_ledger(run);
  } catch (const std::exception& e) {
    std::cerr << fmt::format("kwb: warning: not recorded in the ledger: {}\n", e.what());
  }
}

void record_interrupted_bundle_in_ledger(const std::filesystem::path& bundle, const std::string& kind,
                                         const std::string& why) {
  try {
    if (!ledger_path()) return;
    LedgerRun run = interrupted_run_from_bundle(bundle, why);
    run.kind = kind;
    record_in_ledger(run);
  } catch (const std::exception& e) {
    std::cerr << fmt::format("kwb: warning: not recorded in the ledger: {}\n", e.what());
  }
}

LedgerRun ledger_run(const Task& task, const CompareReport& report) {
  LedgerRun run;
  run.kind = "compare";
  run.task = task.name;
  run.task_dir = task.dir.string();
  run.backend = report.timing.backend;
  run.outcome = stats::to_string(report.verdict);
  run.reasons = report.refused;
  for (size_t i = 0; i < report.arm_labels.size() && i < report.arm_paths.size(); ++i) {
    run.arms.push_back({report.arm_labels[i], report.arm_paths[i],
                        i < report.arm_identities.size() ? report.arm_identities[i].key : ""});
  }
  for (const WorkloadResult& w : report.workloads) {
    LedgerWorkload lw{w.name, std::string(stats::to_string(w.verdict)), std::nullopt, std::nullopt, std::nullopt};
    if (w.estimate) {
      lw.improvement_pct = w.estimate->improvement_pct;
      lw.ci_low_pct = w.estimate->ci_low_pct;
      lw.ci_high_pct = w.estimate->ci_high_pct;
    }
    if (!w.reason.empty()) run.reasons.push_back(w.name + ": " + w.reason);
    run.workloads.push_back(std::move(lw));
  }
  if (report.timing_lock) {
    run.timing_holds.push_back({{"acquired_unix_ns", report.timing_lock->acquired_unix_ns},
                                {"released_unix_ns", report.timing_lock->released_unix_ns},
                                {"waited_seconds", report.timing_lock->waited_s}});
  }
  return run;
}

namespace {

// The source an incumbent was kept from, as long as it still holds what it held then.
std::filesystem::path verified_source(const Incumbent& i) {
  const std::filesystem::path src = i.source;
  if (!std::filesystem::is_regular_file(src) || sha256_file(src) != i.source_sha256) {
    throw DataError(fmt::format("generation {} of task {} on {} was kept from {}, which {}: restore it{}",
                                i.generation, i.task, i.backend, src.string(),
                                std::filesystem::is_regular_file(src) ? "has changed since" : "no longer exists",
                                i.bundle.empty() ? "" : fmt::format(" (its copy is in {}/artifacts)", i.bundle)));
  }
  return src;
}

}  // namespace

std::optional<std::filesystem::path> incumbent_source(const Task& task, BackendKind backend) {
  const std::optional<std::filesystem::path> path = ledger_path();
  if (!path) return std::nullopt;
  const std::vector<Incumbent> line = Ledger::open(*path).lineage(task.name, backend);
  if (line.empty()) return std::nullopt;
  return verified_source(line.back());
}

Action add_revalidate(CLI::App& root) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* app = root.add_subcommand(
      "revalidate", "Validate the task's incumbent against its original baseline (generation 0): the compounded "
                    "improvement, measured instead of multiplied");
  app->add_option("task_dir", a->task_dir, "Task folder (holding task.toml)")->required();
  add_validate_run_options(*app, *a);
  return [a]() {
    const Task task = load_task(a->task_dir);
    const std::optional<std::filesystem::path> path = ledger_path();
    if (!path) throw UsageError("KWB_LEDGER=none: there is no lineage to revalidate");
    const std::vector<Incumbent> line = Ledger::open(*path).lineage(task.name, a->timing.backend);
    if (line.size() < 2) {
      throw UsageError(fmt::format("task {} on {}: nothing has been kept yet, so the incumbent is the original "
                                   "baseline (kwb keep makes one)",
                                   task.name, a->timing.backend));
    }
    ValidateArgs v = *a;
    v.candidate = verified_source(line.back()).string();
    v.baseline = verified_source(line.front()).string();
    return validate_command(v, "revalidate");
  };
}

Action add_keep(CLI::App& root) {
  auto dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* app = root.add_subcommand(
      "keep", "Make a verified KEEP_CANDIDATE bundle's candidate the incumbent of its task (the ledger)");
  app->add_option("bundle", *dir, "Evidence bundle folder from kwb validate")->required();
  app->add_flag("--json", *json, "Print the result as JSON");
  return [dir, json]() {
    if (!std::filesystem::is_directory(*dir)) throw UsageError(fmt::format("{}: not a bundle folder", *dir));
    Ledger ledger = open_ledger_or_throw();
    const KeepOutcome k = keep_bundle(ledger, *dir);
    if (*json) {
      nlohmann::json j = {{"schema", "kwb.keep"}, {"schema_version", 1}, {"bundle", *dir},
                          {"kept", k.kept.has_value()}, {"message", k.message}, {"problems", k.problems},
                          {"ledger", ledger.path().string()}};
      if (k.kept) j["incumbent"] = to_json(*k.kept);
      std::cout << json_text(j, 2) << "\n";
    } else {
      for (const std::string& p : k.problems) std::cout << "PROBLEM " << p << "\n";
      std::cout << k.message << "\n";
    }
    return k.exit_code;
  };
}

Action add_history(CLI::App& root) {
  auto task_dir = std::make_shared<std::string>();
  auto backend = std::make_shared<BackendKind>(BackendKind::cpu);
  auto json = std::make_shared<bool>(false);
  CLI::App* app = root.add_subcommand("history", "The lineage of a task's kept implementations, from the ledger");
  app->add_option("task_dir", *task_dir, "Task folder (holding task.toml)")->required();
  add_backend_option(*app, *backend);
  app->add_flag("--json", *json, "Print the history as JSON");
  return [task_dir, backend, json]() {
    const Task task = load_task(*task_dir);
    Ledger ledger = open_ledger_or_throw();
    const std::vector<Incumbent> line = ledger.lineage(task.name, *backend);
    const std::vector<LedgerRun> runs = ledger.runs(task.name, *backend);
    if (*json) {
      nlohmann::json l = nlohmann::json::array();
      for (const Incumbent& i : line) l.push_back(to_json(i));
      nlohmann::json r = nlohmann::json::array();
      for (const LedgerRun& run : runs) {
        r.push_back({{"id", run.id}, {"kind", run.kind}, {"started", run.started}, {"finished", run.finished},
                     {"outcome", run.outcome}, {"reasons", run.reasons}, {"bundle", run.bundle},
                     {"plan_digest", run.plan_digest}, {"manifest_sha256", run.manifest_sha256},
                     {"timing_holds", run.timing_holds}});
      }
      nlohmann::json j = {{"schema", "kwb.history"},        {"schema_version", 1},
                          {"task", task.name},                {"backend", to_string(*backend)},
                          {"ledger", ledger.path().string()}, {"lineage", l},
                          {"runs", r}};
      if (!line.empty()) {
        if (const std::optional<LedgerRun> m = latest_revalidation(runs, line.back())) {
          j["measured_over_baseline"] = {{"improvement_pct", summary_improvement_pct(m->workloads)},
                                         {"decision", m->outcome}, {"run", m->id}, {"bundle", m->bundle}};
        }
      }
      std::cout << json_text(j, 2) << "\n";
      return 0;
    }
    if (line.empty()) {
      std::cout << fmt::format("task {} on {}: nothing kept yet; the incumbent is the task's baseline\n", task.name,
                               *backend);
    } else {
      std::vector<std::vector<std::string>> rows;
      for (const Incumbent& i : line) {
        rows.push_back({std::to_string(i.generation), i.identity.substr(0, 12), i.source,
                        i.generation == 0 ? "-" : fmt::format("{:+.2f}%", i.improvement_pct),
                        fmt::format("{:+.2f}%", i.cumulative_pct), i.kept});
      }
      std::cout << fmt::format("task {} on {}: incumbent is generation {}\n", task.name, *backend,
                               line.back().generation)
                << format_table({"generation", "identity", "source", "over parent", "over baseline", "kept"}, rows);
      std::cout << "(each generation's improvement was measured against its parent; 'over baseline' multiplies them)\n";
      if (const std::optional<LedgerRun> m = latest_revalidation(runs, line.back())) {
        std::cout << fmt::format("measured over baseline: {:+.2f}% ({}, {}, bundle {})\n",
                                 summary_improvement_pct(m->workloads), m->outcome, m->finished, m->bundle);
      } else {
        std::cout << "measured over baseline: not yet (kwb revalidate measures the incumbent against generation 0)\n";
      }
    }
    std::cout << fmt::format("{} run(s) recorded in {}\n", runs.size(), ledger.path().string());
    return 0;
  };
}

}  // namespace kwb::cli
