// The loop's verbs on the ledger (ledger/ledger.h, docs/agents.md):
//   kwb keep BUNDLE              promote a verified KEEP_CANDIDATE bundle's candidate to incumbent
//   kwb history TASK [--backend] the lineage of kept implementations; with --runs, the runs recorded for the task
//                                (filtered by kind, outcome, start, count)
// and the recording every check, compare and validate does (record_in_ledger), each in the ledger of its task
// (ledger_path), whose file every one of them names.
#include "builder/builder.h"
#include "cli/commands.h"
#include "cli/ledger.h"
#include "cli/options.h"
#include "cli/terminal.h"
#include "ledger/bundle_entry.h"
#include "task/task.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/machine_key.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <iostream>

namespace kwb::cli {

namespace {

Ledger open_ledger_or_throw(const std::optional<std::filesystem::path>& path) {
  if (!path) throw UsageError("KWB_LEDGER=none: there is no ledger to read or keep in (unset it, or name a file)");
  return Ledger::open(*path);
}

// Another ledger than `used` in the current folder (.kwb/ledger.sqlite): a loop started here may expect to see
// what it holds. One sentence naming it and how to read it, or "".
std::string other_ledger_note(const std::filesystem::path& used) {
  const std::filesystem::path here = std::filesystem::current_path() / ".kwb" / "ledger.sqlite";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(here, ec) || std::filesystem::equivalent(here, used, ec)) return "";
  return fmt::format("note: {} is another ledger, not this task's; KWB_LEDGER={} reads it", here.string(),
                     here.string());
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
  return {{"generation", i.generation},
          {"identity", i.identity},
          {"source", i.source},
          {"source_sha256", i.source_sha256},
          {"bundle", i.bundle},
          {"kept", i.kept},
          {"improvement_pct", i.improvement_pct},
          {"cumulative_pct", i.cumulative_pct},
          {"workloads", ws}};
}

}  // namespace

namespace {

// The row this process started (begin_ledger_run) and has not finished yet.
struct PendingRun {
  std::filesystem::path ledger;
  int64_t id = 0;
  LedgerRun run;  // as started: what an error row keeps of it
};
std::optional<PendingRun> g_pending;

}  // namespace

void begin_ledger_run(const LedgerRun& run) {
  try {
    const std::optional<std::filesystem::path> path = ledger_path(run.task_dir);
    if (!path) return;
    g_pending = PendingRun{*path, Ledger::open(*path).start(run), run};
  } catch (const std::exception& e) {
    std::cerr << fmt::format("kwb: warning: the run's row could not be started in the ledger: {}\n", e.what());
  }
}

void record_in_ledger(const LedgerRun& run) {
  try {
    const std::optional<std::filesystem::path> path = ledger_path(run.task_dir);
    if (!path) return;
    int64_t id = 0;
    if (g_pending && g_pending->ledger == *path) {
      id = g_pending->id;
      Ledger::open(*path).finish(id, run);
      g_pending.reset();
    } else {
      id = Ledger::open(*path).record(run);
    }
    std::cerr << fmt::format("kwb: recorded as run {} in the ledger {}\n", id, path->string());
  } catch (const std::exception& e) {
    // The run itself is done and its result stands; only the note of it is missing.
    std::cerr << fmt::format("kwb: warning: not recorded in the ledger: {}\n", e.what());
  }
}

void close_pending_run(const std::string& outcome, const std::string& why) {
  if (!g_pending) return;
  LedgerRun run = g_pending->run;
  run.outcome = outcome;
  run.reasons = {why};
  try {
    Ledger::open(g_pending->ledger).finish(g_pending->id, run);
  } catch (const std::exception& e) {
    std::cerr << fmt::format("kwb: warning: the run's row could not be finished in the ledger: {}\n", e.what());
  }
  g_pending.reset();
}

void record_bundle_in_ledger(const std::filesystem::path& bundle, const std::string& kind,
                             const std::string& manifest_sha256) {
  try {
    if (ledger_off()) return;
    LedgerRun run = run_from_bundle(bundle);
    run.kind = kind;
    run.manifest_sha256 = manifest_sha256;
    // The seal: what makes this row, and no row written elsewhere, vouch for the bundle (ledger/bundle_entry.h).
    try {
      run.seal = seal_ledger_row(machine_key(), BundleSeal{manifest_sha256, run.plan_digest, run.outcome});
    } catch (const std::exception& e) {
      std::cerr << fmt::format(
          "kwb: warning: the ledger row is not sealed, so it cannot vouch for the bundle (keep "
          "will refuse it): {}\n",
          e.what());
    }
    record_in_ledger(run);
  } catch (const std::exception& e) {
    std::cerr << fmt::format("kwb: warning: not recorded in the ledger: {}\n", e.what());
  }
}

void record_interrupted_bundle_in_ledger(const std::filesystem::path& bundle, const std::string& kind,
                                         const std::string& why) {
  try {
    if (ledger_off()) return;
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

// Where generation `generation` of the lineage is read from (incumbent_source_file), saying so on stderr when it is
// its bundle's copy. That copy stands in for the incumbent only if it builds to the identity that was kept: a
// source compiled with files beside it (kwb.files) does not, from the bundle.
std::filesystem::path verified_source(const std::vector<Incumbent>& line, size_t generation) {
  const IncumbentSource s = incumbent_source_file(line, generation);
  if (s.note.empty()) return s.path;
  const Incumbent& i = line[generation];
  const Artifact art = build_implementation({s.path, 0, i.backend});
  if (!art.ok || art.identity.key != i.identity) {
    throw DataError(
        fmt::format("{}; but that copy {} (the kept source was compiled with files beside it, which the "
                    "bundle does not keep, or the toolchain changed): restore {} with the bytes of "
                    "SHA-256 {}",
                    s.note,
                    art.ok ? fmt::format("builds to identity {}, not the kept {}", art.identity.key.substr(0, 12),
                                         i.identity.substr(0, 12))
                           : std::string("does not build"),
                    i.source, i.source_sha256));
  }
  std::cerr << "kwb: " << s.note << "\n";
  return s.path;
}

}  // namespace

namespace {

// Why a lineage is empty although the ledger holds one under the task's name: the task changed, or is another task
// of the same name (Ledger::other_lineages). "" when there is none.
std::string changed_task_note(const Ledger& ledger, const Task& task, BackendKind backend) {
  std::vector<std::string> parts;
  for (const Ledger::OtherLineage& o : ledger.other_lineages(task.name, backend, task.identity)) {
    parts.push_back(fmt::format("{} generation(s) kept under {} {} (last: {})", o.generations,
                                o.task.size() == 64 ? "identity" : "the name", o.task.substr(0, 12), o.last_source));
  }
  if (parts.empty()) return "";
  return fmt::format(
      "task {} on {} has a lineage in this ledger that is not this task's: {}. The lineage is keyed by "
      "the task's content (task.toml, the oracle, baselines, controls: identity {} now), "
      "so a changed task, or another task of the same name, starts a lineage of its own at its "
      "baseline. To carry a kept kernel over, validate it against this task and keep that bundle: kwb "
      "validate {} --candidate SOURCE --against incumbent --output-dir DIR, then kwb keep DIR",
      task.name, backend, fmt::join(parts, "; "), task.identity.substr(0, 12), task.dir.string());
}

}  // namespace

std::optional<std::filesystem::path> incumbent_source(const Task& task, BackendKind backend) {
  const std::optional<std::filesystem::path> path = ledger_path(task.dir);
  if (!path) return std::nullopt;
  const Ledger ledger = Ledger::open(*path);
  const std::vector<Incumbent> line = ledger.lineage(task.identity, backend);
  if (line.empty()) {
    std::cerr << fmt::format(
        "kwb: nothing of task {} on {} kept yet in the ledger {}: the incumbent is the task's "
        "baseline\n",
        task.name, backend, path->string());
    if (const std::string note = changed_task_note(ledger, task, backend); !note.empty()) {
      std::cerr << "kwb: " << note << "\n";
    }
    if (const std::string note = other_ledger_note(*path); !note.empty()) std::cerr << "kwb: " << note << "\n";
    return std::nullopt;
  }
  std::cerr << fmt::format("kwb: the incumbent of task {} on {} is generation {} in the ledger {}\n", task.name,
                           backend, line.back().generation, path->string());
  return verified_source(line, line.size() - 1);
}

Action add_revalidate(CLI::App& root) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* app =
      root.add_subcommand("revalidate",
                          "Validate the task's incumbent against its original baseline (generation 0): the compounded "
                          "improvement, measured instead of multiplied");
  app->add_option("task_dir", a->task_dir, "Task folder (holding task.toml)")->required();
  add_validate_run_options(*app, *a);
  return [a]() {
    const Task task = load_task(a->task_dir);
    const std::optional<std::filesystem::path> path = ledger_path(task.dir);
    if (!path) throw UsageError("KWB_LEDGER=none: there is no lineage to revalidate");
    const std::vector<Incumbent> line = Ledger::open(*path).lineage(task.identity, a->timing.backend);
    if (line.size() < 2) {
      throw UsageError(
          fmt::format("task {} on {}: nothing has been kept yet, so the incumbent is the original "
                      "baseline (kwb keep makes one; the ledger is {})",
                      task.name, a->timing.backend, path->string()));
    }
    ValidateArgs v = *a;
    v.candidate = verified_source(line, line.size() - 1).string();
    v.baseline = verified_source(line, 0).string();
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
    // Read once: from here on only the private copy is read (record/bundle_snapshot.h).
    std::string why;
    const std::optional<BundleSnapshot> snapshot = BundleSnapshot::take(*dir, why);
    if (!snapshot) {
      throw Error(ExitCode::invalid, fmt::format("{}: cannot be read whole ({}): nothing is kept from a bundle that "
                                                 "does not verify (kwb verify {} lists what is wrong)",
                                                 *dir, why, *dir));
    }
    const std::optional<std::filesystem::path> path = bundle_ledger_path(snapshot->path());
    if (!path && !ledger_off()) {
      throw Error(ExitCode::invalid, fmt::format("{}: its plan.json does not parse, so the task whose ledger would "
                                                 "keep it is unknown: nothing is kept from a bundle that does not "
                                                 "verify (kwb verify {} lists what is wrong)",
                                                 *dir, *dir));
    }
    Ledger ledger = open_ledger_or_throw(path);
    const KeepOutcome k = keep_bundle(ledger, *snapshot);
    if (*json) {
      nlohmann::json j = {{"schema", "kwb.keep"},
                          {"schema_version", 1},
                          {"bundle", *dir},
                          {"kept", k.kept.has_value()},
                          {"already_incumbent", k.already.has_value()},
                          {"message", k.message},
                          {"problems", k.problems},
                          {"ledger", ledger.path().string()}};
      if (k.kept) j["incumbent"] = to_json(*k.kept);
      if (k.already) j["incumbent"] = to_json(*k.already);
      std::cout << json_text(j, 2) << "\n";
    } else {
      for (const std::string& p : k.problems) std::cout << "PROBLEM " << p << "\n";
      std::cout << k.message << "\n";
      std::cout << fmt::format("ledger: {}\n", ledger.path().string());
    }
    return k.exit_code;
  };
}

namespace {

struct HistoryArgs {
  std::string task_dir;
  BackendKind backend = BackendKind::cpu;
  bool json = false;
  bool runs = false;
  std::vector<std::string> kinds, outcomes;
  std::string since, limit;
};

// Each value of a filter option, checked against what the ledger records (`lower`: kinds are lower case, outcomes
// upper case; either is accepted in any case).
std::vector<std::string> filter_values(const char* option, const std::vector<std::string>& given,
                                       const std::vector<std::string>& known, bool lower) {
  std::vector<std::string> out;
  for (std::string v : given) {
    for (char& c : v)
      c = static_cast<char>(lower ? std::tolower(static_cast<unsigned char>(c))
                                  : std::toupper(static_cast<unsigned char>(c)));
    if (std::find(known.begin(), known.end(), v) == known.end()) {
      throw UsageError(
          fmt::format("{} {}: not one the ledger records; give one or more of {} (comma-separated, or "
                      "the option repeated)",
                      option, v, fmt::join(known, ", ")));
    }
    out.push_back(v);
  }
  return out;
}

RunFilter run_filter(const HistoryArgs& a, const Task& task, bool backend_given) {
  RunFilter f;
  f.task = task.name;
  if (backend_given) f.backend = a.backend;
  f.kinds = filter_values("--kind", a.kinds, run_kinds(), true);
  f.outcomes = filter_values("--outcome", a.outcomes, run_outcomes(), false);
  if (!a.since.empty()) f.since = since_bound(a.since, std::time(nullptr));
  if (!a.limit.empty()) {
    size_t end = 0;
    long long n = 0;
    try {
      n = std::stoll(a.limit, &end);
    } catch (const std::exception&) {
      end = 0;
    }
    if (end != a.limit.size() || n < static_cast<long long>(k_limit_range.min) ||
        n > static_cast<long long>(k_limit_range.max)) {
      throw UsageError(fmt::format("--limit {}: not a whole number of runs from {} to {}: give e.g. --limit 10",
                                   a.limit, k_limit_range.min, k_limit_range.max));
    }
    f.limit = n;
  }
  return f;
}

// The arm a run tried: check's implementation, validate's candidate, compare's B (A' in an A/A); nullptr for none.
const LedgerArm* candidate_arm(const LedgerRun& r) {
  for (const char* role : {"candidate", "implementation", "B", "A'"}) {
    for (const LedgerArm& a : r.arms) {
      if (a.role == role) return &a;
    }
  }
  return nullptr;
}

std::string estimate_text(const LedgerWorkload& w) {
  if (!w.improvement_pct) return fmt::format("{} {}", w.name, w.verdict.empty() ? "no estimate" : w.verdict);
  std::string interval;
  if (w.ci_low_pct && w.ci_high_pct) interval = fmt::format(" [{:+.2f}, {:+.2f}]", *w.ci_low_pct, *w.ci_high_pct);
  return fmt::format("{} {:+.2f}%{}", w.name, *w.improvement_pct, interval);
}

// A path under the current folder relative to it, as a person typed it; others as recorded.
std::string shown_path(const std::string& p) {
  if (p.empty()) return "-";
  const std::filesystem::path rel = std::filesystem::path(p).lexically_relative(std::filesystem::current_path());
  return rel.empty() || *rel.begin() == ".." ? p : rel.string();
}

nlohmann::json run_json(const LedgerRun& r) {
  nlohmann::json arms = nlohmann::json::array();
  for (const LedgerArm& a : r.arms) arms.push_back({{"role", a.role}, {"source", a.source}, {"identity", a.identity}});
  nlohmann::json j = {{"id", r.id},
                      {"kind", r.kind},
                      {"task", r.task},
                      {"task_dir", r.task_dir},
                      {"backend", to_string(r.backend)},
                      {"started", r.started},
                      {"finished", r.finished},
                      {"outcome", r.outcome},
                      {"reasons", r.reasons},
                      {"candidate", nullptr},
                      {"arms", arms},
                      {"workloads", kwb::to_json(r.workloads)},
                      {"bundle", r.bundle},
                      {"plan_digest", r.plan_digest},
                      {"manifest_sha256", r.manifest_sha256},
                      {"timing_holds", r.timing_holds}};
  if (const LedgerArm* c = candidate_arm(r))
    j["candidate"] = {{"role", c->role}, {"source", c->source}, {"identity", c->identity}};
  return j;
}

int print_runs(const HistoryArgs& a, const Task& task, const RunFilter& f, const Ledger& ledger) {
  const std::vector<LedgerRun> runs = ledger.find_runs(f);
  RunFilter all;
  all.task = f.task;
  all.backend = f.backend;
  const size_t recorded = ledger.find_runs(all).size();
  if (a.json) {
    nlohmann::json filters = {{"kind", f.kinds}, {"outcome", f.outcomes}};
    filters["backend"] = f.backend ? nlohmann::json(to_string(*f.backend)) : nlohmann::json(nullptr);
    filters["since"] = f.since.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.since + "Z");
    filters["limit"] = f.limit ? nlohmann::json(*f.limit) : nlohmann::json(nullptr);
    nlohmann::json rows = nlohmann::json::array();
    for (const LedgerRun& r : runs) rows.push_back(run_json(r));
    std::cout << json_text({{"schema", "kwb.runs"},
                            {"schema_version", 1},
                            {"task", task.name},
                            {"ledger", ledger.path().string()},
                            {"filters", filters},
                            {"recorded", recorded},
                            {"runs", rows}},
                           2)
              << "\n";
    return 0;
  }
  std::vector<std::string> given;
  if (f.backend) given.push_back(fmt::format("--backend {}", *f.backend));
  if (!f.kinds.empty()) given.push_back(fmt::format("--kind {}", fmt::join(f.kinds, ",")));
  if (!f.outcomes.empty()) given.push_back(fmt::format("--outcome {}", fmt::join(f.outcomes, ",")));
  if (!f.since.empty()) given.push_back(fmt::format("--since {}Z", f.since));
  if (f.limit) given.push_back(fmt::format("--limit {}", *f.limit));
  std::cout << fmt::format("ledger {}\n", ledger.path().string());
  std::cout << fmt::format("task {}: {} run(s) recorded{}; {} shown, most recent first{}\n", task.name, recorded,
                           f.backend ? fmt::format(" on {}", *f.backend) : "", runs.size(),
                           given.empty() ? "" : fmt::format(" ({})", fmt::join(given, " ")));
  if (runs.empty()) {
    if (const std::string note = other_ledger_note(ledger.path()); !note.empty()) std::cout << note << "\n";
    return 0;
  }
  std::cout << runs_table(runs);
  return 0;
}

}  // namespace

namespace {

// A run's first reason, on one line and at most 72 characters: why a validate kept the baseline (a compile error,
// a failed check, below the bar) reads differently from a plain KEEP_BASELINE. "-" for none.
std::string first_reason(const LedgerRun& r) {
  if (r.reasons.empty() || r.reasons.front().empty()) return "-";
  std::string text = r.reasons.front();
  for (char& ch : text) {
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  }
  return text.size() > 72 ? text.substr(0, 69) + "..." : text;
}

}  // namespace

std::string runs_table(const std::vector<LedgerRun>& runs) {
  std::vector<std::vector<std::string>> rows;
  for (const LedgerRun& r : runs) {
    const LedgerArm* c = candidate_arm(r);
    std::vector<std::string> row = {std::to_string(r.id),
                                    r.kind,
                                    r.started,
                                    r.finished,
                                    r.outcome,
                                    c ? shown_path(c->source) : "-",
                                    c && !c->identity.empty() ? c->identity.substr(0, 12) : "-",
                                    r.workloads.empty() ? "-" : estimate_text(r.workloads[0]),
                                    shown_path(r.bundle),
                                    first_reason(r)};
    rows.push_back(std::move(row));
    // Further workloads on lines of their own, under the first.
    for (size_t w = 1; w < r.workloads.size(); ++w) {
      rows.push_back({"", "", "", "", "", "", "", estimate_text(r.workloads[w]), "", ""});
    }
  }
  return format_table({"id", "kind", "started (UTC)", "finished (UTC)", "outcome", "candidate", "identity",
                       "estimate (improvement, 95% interval)", "bundle", "reason"},
                      rows);
}

namespace {

nlohmann::json history_json(const Task& task, BackendKind backend, const Ledger& ledger,
                            const std::vector<Incumbent>& line, const std::vector<LedgerRun>& runs) {
  nlohmann::json l = nlohmann::json::array();
  for (const Incumbent& i : line) l.push_back(to_json(i));
  nlohmann::json r = nlohmann::json::array();
  for (const LedgerRun& run : runs) {
    r.push_back({{"id", run.id},
                 {"kind", run.kind},
                 {"started", run.started},
                 {"finished", run.finished},
                 {"outcome", run.outcome},
                 {"reasons", run.reasons},
                 {"bundle", run.bundle},
                 {"plan_digest", run.plan_digest},
                 {"manifest_sha256", run.manifest_sha256},
                 {"timing_holds", run.timing_holds}});
  }
  nlohmann::json j = {
      {"schema", "kwb.history"},          {"schema_version", 1}, {"task", task.name}, {"backend", to_string(backend)},
      {"ledger", ledger.path().string()}, {"lineage", l},        {"runs", r}};
  if (!line.empty()) {
    if (const std::optional<LedgerRun> m = latest_revalidation(runs, line.back())) {
      j["measured_over_baseline"] = {{"improvement_pct", summary_improvement_pct(m->workloads)},
                                     {"decision", m->outcome},
                                     {"run", m->id},
                                     {"bundle", m->bundle}};
    }
  }
  return j;
}

void print_lineage(const Task& task, BackendKind backend, const Ledger& ledger, const std::vector<Incumbent>& line,
                   const std::vector<LedgerRun>& runs) {
  std::cout << fmt::format("ledger {}\n", ledger.path().string());
  if (line.empty()) {
    std::cout << fmt::format("task {} on {}: nothing kept yet; the incumbent is the task's baseline\n", task.name,
                             backend);
    if (const std::string note = other_ledger_note(ledger.path()); !note.empty()) std::cout << note << "\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    rows.reserve(line.size());
    for (const Incumbent& i : line) {
      rows.push_back({std::to_string(i.generation), i.identity.substr(0, 12), i.source,
                      i.generation == 0 ? "-" : fmt::format("{:+.2f}%", i.improvement_pct),
                      fmt::format("{:+.2f}%", i.cumulative_pct), i.kept});
    }
    std::cout << fmt::format("task {} on {}: incumbent is generation {}\n", task.name, backend, line.back().generation)
              << format_table({"generation", "identity", "source", "over parent", "over baseline", "kept"}, rows);
    std::cout << "(each generation's improvement was measured against its parent; 'over baseline' multiplies them)\n";
    if (const std::optional<LedgerRun> m = latest_revalidation(runs, line.back())) {
      std::cout << fmt::format("measured over baseline: {:+.2f}% ({}, {}, bundle {})\n",
                               summary_improvement_pct(m->workloads), m->outcome, m->finished, m->bundle);
    } else {
      std::cout << "measured over baseline: not yet (kwb revalidate measures the incumbent against generation 0)\n";
    }
  }
  std::cout << fmt::format("{} run(s) recorded on {} (kwb history --runs lists them)\n", runs.size(), backend);
}

}  // namespace

Action add_history(CLI::App& root) {
  auto a = std::make_shared<HistoryArgs>();
  CLI::App* app = root.add_subcommand(
      "history",
      "The lineage of a task's kept implementations, from the ledger; with --runs, the runs recorded for it");
  app->add_option("task_dir", a->task_dir, "Task folder (holding task.toml)")->required();
  add_backend_option(*app, a->backend);
  app->add_flag("--json", a->json, "Print the history as JSON");
  app->add_flag("--runs", a->runs,
                "List the runs recorded for the task, most recent first: kind, start and end, candidate, outcome, "
                "estimate, bundle, first reason (all backends unless --backend is given)");
  app->add_option("--kind", a->kinds, "--runs: only runs of these kinds (check, compare, validate, revalidate, keep)")
      ->delimiter(',');
  app->add_option("--outcome", a->outcomes,
                  "--runs: only runs with these outcomes (e.g. KEEP_CANDIDATE, INTERRUPTED, FAIL)")
      ->delimiter(',');
  app->add_option("--since", a->since,
                  "--runs: only runs started at or after this UTC date or time (2026-12-01, 2026-12-01T22:15), or "
                  "within this duration back from now (90s, 45m, 2h, 3d, 1w)");
  app->add_option("--limit", a->limit, "--runs: only the N most recent of the runs that match");
  return [a, app]() {
    const bool filtered = !a->kinds.empty() || !a->outcomes.empty() || !a->since.empty() || !a->limit.empty();
    if (filtered && !a->runs) {
      throw UsageError("--kind, --outcome, --since and --limit filter the list of runs: add --runs");
    }
    const Task task = load_task(a->task_dir);
    const bool backend_given = app->get_option("--backend")->count() > 0;
    // The filters are checked before the ledger is opened: a typo is a usage error, never a new ledger file.
    const std::optional<RunFilter> filter = a->runs ? std::optional(run_filter(*a, task, backend_given)) : std::nullopt;
    Ledger ledger = open_ledger_or_throw(ledger_path(task.dir));
    if (filter) return print_runs(*a, task, *filter, ledger);
    const BackendKind backend = a->backend;
    const std::vector<Incumbent> line = ledger.lineage(task.identity, backend);
    if (line.empty()) {
      if (const std::string note = changed_task_note(ledger, task, backend); !note.empty()) {
        std::cerr << "kwb: " << note << "\n";
      }
    }
    const std::vector<LedgerRun> runs = ledger.runs(task.name, backend);
    if (a->json) {
      std::cout << json_text(history_json(task, backend, ledger, line, runs), 2) << "\n";
    } else {
      print_lineage(task, backend, ledger, line, runs);
    }
    return 0;
  };
}

}  // namespace kwb::cli
