#include "pipeline/check.h"
#include "pipeline/compare.h"
#include "util/json_text.h"

#include "stats/random.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/interrupt.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "util/timing_lock.h"

#include <fmt/format.h>

#include <sys/sysinfo.h>

#include <algorithm>
#include <filesystem>
#include <optional>

namespace kwb {

void write_compare_outputs(const std::string& dir, const CompareReport& report) {
  std::filesystem::create_directories(dir);
  write_file_atomic(std::filesystem::path(dir) / "samples.csv", samples_csv(report.samples));
  write_file_atomic(std::filesystem::path(dir) / "compare.json", json_text(to_json(report), 2) + "\n");
}

namespace {

// The check of an exact artifact, by an exact kwb, on an exact task manifest, with the same options and the same
// worker environment, always gives the same report (its data come from the published seeds), so compare keeps it in
// the cache under check_cache_key: repeated comparisons of the same binaries (an optimization loop, the FPR bench) do
// not re-run it. validate never uses this: its bundle must hold checks run in that session.
CheckReport cached_check(const Task& task, const Artifact& art, const CheckOptions& co, bool& cached) {
  const std::filesystem::path file = cache_dir() / "checks" / (check_cache_key(task, art, co) + ".json");
  if (art.ok && std::filesystem::exists(file)) {
    nlohmann::json j = nlohmann::json::parse(read_file(file), nullptr, false);
    // A damaged entry (a field missing, of another type, a backend kwb does not know) is checked again and replaced.
    try {
      if (!j.is_discarded()) {
        CheckReport r = check_report_from_json(j);
        cached = true;
        return r;
      }
    } catch (const std::exception&) {
    }
  }
  CheckReport r = run_check(task, art, co);
  // A CPU watch that fired can be the machine's doing (another heavy process, stolen VM time): such a report is
  // used for this run and never kept, so the next run checks again.
  const bool machine_sensitive = std::any_of(r.failures.begin(), r.failures.end(), [](const Failure& f) {
    return f.reason == FailureReason::work_outside_timer;
  });
  if (art.ok && !machine_sensitive) {
    std::filesystem::create_directories(file.parent_path());
    write_file_atomic(file, json_text(to_json(r)) + "\n");
  }
  return r;
}

// Each arm's layout pool in the report, as identities. Every pool starts with its arm's plain build, the one checked.
void record_layouts(CompareReport& report, const CompareRequest& req,
                    const std::vector<std::vector<const Artifact*>>& pools) {
  if (pools.size() != req.arms.size()) throw InternalError("compare: one layout pool per arm");
  report.arm_layouts.clear();
  for (size_t i = 0; i < pools.size(); ++i) {
    if (pools[i].empty() || pools[i].front() != req.arms[i]) {
      throw InternalError("compare: a layout pool must start with its arm's plain build");
    }
    report.arm_layouts.emplace_back();
    for (const Artifact* a : pools[i]) report.arm_layouts.back().push_back(a->identity);
  }
}

// The report's arms: each one's path, identity and layout pool (one build when no pools were given).
std::vector<std::vector<const Artifact*>> arm_pools(CompareReport& report, const CompareRequest& req) {
  report.mode = req.mode;
  report.gate = req.gate;
  report.budget = req.budget;
  report.timing = req.timing;
  report.seed = req.seed;
  report.arm_labels = req.labels;
  std::vector<std::vector<const Artifact*>> pools = req.layouts;
  if (pools.empty()) {
    for (const Artifact* a : req.arms) pools.push_back({a});
  }
  for (const Artifact* a : req.arms) {
    report.arm_paths.push_back(a->source.string());
    report.arm_identities.push_back(a->identity);
  }
  record_layouts(report, req, pools);
  return pools;
}

// No metric ever comes from rejected code: every arm passes the check before any timing. An arm that does not is
// in report.refused.
void check_arms(CompareReport& report, const Task& task, const CompareRequest& req) {
  if (req.skip_checks) return;
  for (size_t i = 0; i < req.arms.size(); ++i) {
    CheckOptions co;
    co.backend = req.timing.backend;
    co.timeout = req.timing.timeout;
    co.exhaustive = req.exhaustive_checks;
    bool cached = false;
    CheckReport cr = cached_check(task, *req.arms[i], co, cached);
    report.checks.push_back({{"arm", req.labels[i]},
                             {"verdict", cr.pass() ? "PASS" : "FAIL"},
                             {"assertions_passed", cr.passed},
                             {"assertions_failed", cr.failed},
                             {"not_run", cr.not_run},
                             {"cached", cached}});
    if (auto why = timing_refusal(cr)) report.refused.push_back(fmt::format("arm {}: {}", req.labels[i], *why));
  }
}

// The workloads to time: those asked for, or every timing case. One whose smallest pool of input sets cannot fit
// this machine is refused before anything is timed.
std::vector<const Case*> timed_workloads(const Task& task, const CompareRequest& req) {
  std::vector<const Case*> workloads;
  if (req.workloads.empty()) {
    for (const Case& c : task.cases) {
      if (c.role == CaseRole::timing) workloads.push_back(&c);
    }
  } else {
    for (const std::string& name : req.workloads) {
      workloads.push_back(&task.require_case("--workload", name, true));
    }
  }
  if (workloads.empty()) throw DataError(fmt::format("{}: no case has role = \"timing\"", task.manifest.string()));
  struct sysinfo si {};
  if (::sysinfo(&si) == 0) {
    const uint64_t machine = static_cast<uint64_t>(si.totalram) * si.mem_unit;
    for (const Case* c : workloads) {
      if (const std::string why = pool_misfit(task, *c, machine); !why.empty()) {
        throw Error(ExitCode::unavailable, why);
      }
    }
  }
  return workloads;
}

// One timing stage at a time on this machine: the lock is held from before the first worker starts until the last
// visit is over, and released when the caller leaves, however it leaves; or the caller's caller holds it for longer
// (empty then).
std::optional<TimingLock> own_timing_lock(const Task& task, const CompareRequest& req, size_t workloads) {
  if (req.held_lock != nullptr) return std::nullopt;
  TimingLock::Request lr;
  lr.what = req.lock_what.empty() ? fmt::format("kwb compare: {}", task.name) : req.lock_what;
  lr.notice = req.lock_notice;
  lr.timeout_s = req.lock_timeout_s;
  std::optional<TimingLock> own = TimingLock::acquire(req.lock_path.empty() ? timing_lock_path() : req.lock_path, lr);
  if (req.lock_waited && !own->record().waited_for.empty()) {
    req.lock_waited(own->record(), static_cast<double>(workloads) * req.budget.max_seconds);
  }
  return own;
}

void compare_into(CompareReport& report, const Task& task, const CompareRequest& req, const ProgressSink& progress) {
  std::vector<std::vector<const Artifact*>> pools = arm_pools(report, req);
  check_arms(report, task, req);
  if (report.refused.empty() && req.build_layouts) {
    pools = req.build_layouts(report.refused);
    if (report.refused.empty()) record_layouts(report, req, pools);
  }
  if (!report.refused.empty()) {
    report.verdict = stats::Verdict::refused;
    if (!req.output_dir.empty()) write_compare_outputs(req.output_dir, report);
    return;
  }
  const std::vector<const Case*> workloads = timed_workloads(task, req);
  std::optional<TimingLock> own = own_timing_lock(task, req, workloads.size());
  const TimingLock& lock = own ? *own : *req.held_lock;
  report.timing_lock = lock.record();
  WorkerArmRunner runner(task, pools, req.labels, req.timing);
  SteadyClock clock;
  // The procedure replays each block's builds from the pool size (stats/sequential.h): one K for both arms.
  if (pools.size() != 2 || pools[0].size() != pools[1].size()) {
    throw InternalError("compare_into: the two arms' layout pools differ in size");
  }
  GateConfig gate = req.gate;
  gate.layouts = static_cast<int>(pools[0].size());
  for (size_t i = 0; i < workloads.size(); ++i) {
    const Case* c = workloads[i];
    const uint64_t seed = stats::workload_seed(req.seed, i);
    std::vector<Sample> pilot = runner.prepare(*c, seed);
    report.samples.insert(report.samples.end(), pilot.begin(), pilot.end());
    WorkloadResult w =
        run_sequential_comparison(c->name, req.labels, runner, clock, gate, req.budget, seed, report.samples, progress);
    w.layouts = static_cast<int>(pools[0].size());
    for (size_t arm = 0; arm < req.labels.size(); ++arm) {
      w.layout_sensitivity.push_back(layout_sensitivity_of(report.samples, c->name, req.labels[arm],
                                                           static_cast<int>(pools[arm].size()), seed ^ arm));
    }
    w.samples_per_visit = runner.samples_per_visit();
    w.long_samples_per_visit = runner.long_samples_per_visit();
    w.warmups_per_visit = runner.warmups_per_visit();
    report.workloads.push_back(std::move(w));
    report.verdict = overall_verdict(report.workloads);
    if (!req.output_dir.empty()) write_compare_outputs(req.output_dir, report);
  }
  if (own) own->release();
  report.timing_lock = lock.record();
  report.verdict = overall_verdict(report.workloads);
}

}  // namespace

CompareReport run_compare(const Task& task, const CompareRequest& req, const ProgressSink& progress) {
  CompareReport report;
  try {
    compare_into(report, task, req, progress);
  } catch (const Interrupted& i) {
    // Every completed visit's samples are in the report (run_sequential_comparison appends them as they come); the
    // visit that was running when the signal came is lost with its worker.
    report.interrupted = i.signal_name();
    report.verdict = stats::Verdict::interrupted;
    if (!req.output_dir.empty()) write_compare_outputs(req.output_dir, report);
    if (req.on_interrupted) req.on_interrupted(report);
    throw;
  }
  return report;
}

}  // namespace kwb
