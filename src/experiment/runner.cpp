#include "experiment/runner.h"
#include "util/sealed_json.h"

#include "campaign/runner.h"
#include "experiment/analysis.h"
#include "experiment/experiment_report.h"
#include "experiment/plan.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/interrupt.h"
#include "util/json_text.h"
#include "util/timing_lock.h"

#include <fmt/format.h>

#include <cmath>
#include <deque>

namespace kwb {

namespace fs = std::filesystem;

namespace {

// A trajectory's record, believed only with the seal its trajectory wrote (util/sealed_json.h): an edited record is
// a data error naming the file, never a figure in a report.
std::optional<nlohmann::json> read_record(const fs::path& p) {
  if (!fs::is_regular_file(p)) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(p));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (const std::string why = sealed_json_problem(j, "kwb.trajectory", trusted_keys()); !why.empty()) {
    throw DataError(
        fmt::format("{}: not believed: {}. A trajectory seals its record with the machine key each time "
                    "it writes it; restore it from a copy, or run the trajectory again",
                    p.string(), why));
  }
  return j;
}

// The last line of a job's stderr that says why kwb failed ("kwb: error: ..."), or its last line; "" for none.
std::string last_error_line(const fs::path& log) {
  if (!fs::is_regular_file(log)) return "";
  std::string text;
  try {
    text = read_file(log);
  } catch (const std::exception&) {
    return "";
  }
  std::string last, last_error;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (!line.empty()) last = line;
    if (line.starts_with("kwb: error") || line.starts_with("kwb: internal error")) last_error = line;
    start = end + 1;
  }
  const std::string& pick = last_error.empty() ? last : last_error;
  return pick.substr(0, 400) + fmt::format(" (log: {})", log.string());
}

struct Running {
  std::string id;
  JobLaunch launch;
  std::string handle;
  double submitted = 0.0;
  double started = 0.0;  // 0 while queued
  bool cancelled = false;
  std::string stopping;
};

using Say = std::function<void(const std::string&)>;

// The trajectories not yet done under this plan, in the plan's order; the others are counted as skipped.
std::deque<std::string> pending_trajectories(const nlohmann::json& plan, const fs::path& storage,
                                             ExperimentRunSummary& s) {
  std::deque<std::string> todo;
  for (const nlohmann::json& t : plan["trajectories"]) {
    ++s.trajectories;
    const std::string id = t["id"].get<std::string>();
    const std::optional<nlohmann::json> r = read_record(ExperimentPaths{storage}.trajectory(id) / "trajectory.json");
    if (r && r->value("plan_digest", "") == plan_digest(storage) && r->value("status", "") == "done") {
      ++s.skipped;
      continue;
    }
    todo.push_back(id);
  }
  return todo;
}

// A trajectory's job: `kwb experiment trajectory STORAGE ID`, its logs in the trajectory's next jobs/<k>/.
JobLaunch trajectory_launch(const Experiment& x, const fs::path& kwb, const std::string& id) {
  const fs::path tdir = ExperimentPaths{x.storage}.trajectory(id);
  size_t k = 1;
  while (fs::exists(tdir / "jobs" / std::to_string(k))) ++k;
  JobLaunch l;
  l.name = fmt::format("kwb-exp-{}-{}", x.name, id).substr(0, 120);
  l.validate = {kwb.string(), "experiment", "trajectory", x.storage.string(), id};
  l.attempt_dir = tdir / "jobs" / std::to_string(k);
  fs::create_directories(l.attempt_dir);
  l.run_limit_s = x.run_limit_minutes * 60.0;
  l.backend = x.backend;
  return l;
}

// One look at a submitted trajectory: cancelled past its queue or run limit; true once it ended, which is said (and
// counted when the trajectory is not done, with the last error its job logged).
bool look_at(Running& r, const JobProbe& p, Executor& ex, const Experiment& x, ExperimentRunSummary& s,
             const Say& say) {
  const double now = wall_seconds_now();
  if (p.where == JobProbe::Where::running && r.started == 0.0) r.started = now;
  if (p.where != JobProbe::Where::ended) {
    const bool over_queue = r.started == 0.0 && now - r.submitted > x.queue_limit_minutes * 60.0;
    const bool over_run = r.started != 0.0 && now - r.started > x.run_limit_minutes * 60.0 + ex.grace_seconds();
    if ((over_queue || over_run) && !r.cancelled) {
      r.stopping = over_queue ? "queue_limit" : "run_limit";
      say(fmt::format("{}: past its {} limit: cancelled", r.id, over_queue ? "queue" : "run"));
      ex.cancel(r.handle);
      r.cancelled = true;
    }
    return false;
  }
  const std::optional<nlohmann::json> rec =
      read_record(ExperimentPaths{x.storage}.trajectory(r.id) / "trajectory.json");
  const std::string status = rec ? rec->value("status", "missing") : "missing";
  std::string why;
  if (status != "done") {
    ++s.failed;
    why = last_error_line(r.launch.attempt_dir / "stderr.log");
  }
  say(fmt::format("{}: ended (exit {}{}{}): trajectory {}{}", r.id, p.exit_code ? std::to_string(*p.exit_code) : "none",
                  p.signal != 0 ? fmt::format(", signal {}", p.signal) : "",
                  r.stopping.empty() ? "" : ", " + r.stopping, status, why.empty() ? "" : ": " + why));
  return true;
}

}  // namespace

std::unique_ptr<Executor> make_experiment_executor(const Experiment& x) {
  if (x.executor.kind == ExecutorKind::slurm) return make_slurm_executor(x.executor.slurm);
  return make_local_executor();
}

std::vector<nlohmann::json> trajectory_records(const fs::path& storage) {
  const nlohmann::json plan = load_frozen_plan(storage);
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& t : plan["trajectories"]) {
    const std::string id = t["id"].get<std::string>();
    if (std::optional<nlohmann::json> r = read_record(ExperimentPaths{storage}.trajectory(id) / "trajectory.json")) {
      out.push_back(std::move(*r));
    }
  }
  return out;
}

nlohmann::json write_experiment_reports(const fs::path& storage) {
  const nlohmann::json plan = load_frozen_plan(storage);
  const std::string digest = plan_digest(storage);
  const std::vector<nlohmann::json> records = trajectory_records(storage);
  std::vector<TrajectoryOutcome> outcomes;
  for (const nlohmann::json& r : records) {
    // A record of another plan (a storage folder reused) is not this experiment's evidence.
    if (r.value("plan_digest", "") == digest) outcomes.push_back(outcome_of(r));
  }
  nlohmann::json analysis = analyze_experiment(plan, outcomes, digest);
  write_file_atomic(ExperimentPaths{storage}.analysis(), json_text(analysis, 2) + "\n");
  const ExperimentReportInput in{&plan, &analysis, &records, storage};
  write_file_atomic(storage / "report.md", experiment_markdown(in));
  write_file_atomic(storage / "report.html", experiment_html(in));
  return analysis;
}

ExperimentRunSummary run_experiment(const Experiment& x, Executor& ex, const fs::path& kwb,
                                    const std::function<void(const std::string&)>& say, bool plan_only) {
  const double start = wall_seconds_now();
  fs::create_directories(x.storage);
  const CampaignLock lock = CampaignLock::acquire(x.storage);
  const nlohmann::json plan = freeze_experiment(x);
  say(fmt::format("frozen: {} (plan digest {})", ExperimentPaths{x.storage}.plan().string(),
                  plan_digest(x.storage).substr(0, 16)));
  ExperimentRunSummary s;
  std::deque<std::string> todo = pending_trajectories(plan, x.storage, s);
  if (plan_only) return s;

  const double poll = x.executor.poll_seconds > 0 ? x.executor.poll_seconds : ex.poll_seconds();
  std::vector<Running> running;
  try {
    while (!todo.empty() || !running.empty()) {
      while (!todo.empty() && running.size() < ex.slots()) {
        Running r;
        r.id = todo.front();
        todo.pop_front();
        r.launch = trajectory_launch(x, kwb, r.id);
        r.handle = ex.submit(r.launch);
        r.submitted = wall_seconds_now();
        ++s.started;
        say(fmt::format("{}: submitted ({} {})", r.id, to_string(ex.kind()), r.handle));
        running.push_back(std::move(r));
      }
      nap_seconds(poll);
      // Every trajectory in flight in one query (on Slurm one squeue, one sacct for the ended).
      std::vector<ActiveJob> query;
      query.reserve(running.size());
      for (const Running& r : running) query.push_back({r.handle, r.launch});
      const std::vector<JobProbe> probes = ex.probe_all(query);
      std::vector<Running> still;
      for (size_t i = 0; i < running.size(); ++i) {
        if (!look_at(running[i], probes.at(i), ex, x, s, say)) still.push_back(std::move(running[i]));
      }
      running = std::move(still);
    }
  } catch (...) {
    // Interrupted (or an executor error): the jobs still running are cancelled; their trajectories resume later.
    for (Running& r : running) {
      try {
        ex.cancel(r.handle);
      } catch (...) {
      }
    }
    throw;
  }
  s.wall_seconds = wall_seconds_now() - start;
  return s;
}

}  // namespace kwb
