#include "pipeline/check.h"
#include "pipeline/compare.h"
#include "util/error.h"
#include "util/fs.h"

#include <fmt/format.h>

#include <filesystem>

namespace kwb {

void write_compare_outputs(const std::string& dir, const CompareReport& report) {
  std::filesystem::create_directories(dir);
  write_file_atomic(std::filesystem::path(dir) / "samples.csv", samples_csv(report.samples));
  write_file_atomic(std::filesystem::path(dir) / "compare.json", to_json(report).dump(2) + "\n");
}

CompareReport run_compare(const Task& task, const CompareRequest& req, const ProgressSink& progress) {
  CompareReport report;
  report.mode = req.mode;
  report.gate = req.gate;
  report.budget = req.budget;
  report.timing = req.timing;
  report.seed = req.seed;
  report.arm_labels = req.labels;
  for (const Artifact* a : req.arms) {
    report.arm_paths.push_back(a->source.string());
    report.arm_identities.push_back(a->identity);
  }

  // No metric ever comes from rejected code: every arm passes the check before any timing.
  if (!req.skip_checks) {
    for (size_t i = 0; i < req.arms.size(); ++i) {
      CheckOptions co;
      co.backend = req.timing.backend;
      co.timeout = req.timing.timeout;
      CheckReport cr = run_check(task, *req.arms[i], co);
      if (auto why = timing_refusal(cr)) report.refused.push_back(fmt::format("arm {}: {}", req.labels[i], *why));
    }
  }
  if (!report.refused.empty()) {
    report.verdict = "REFUSED";
    if (!req.output_dir.empty()) write_compare_outputs(req.output_dir, report);
    return report;
  }

  std::vector<const Case*> workloads;
  if (req.workloads.empty()) {
    for (const Case& c : task.cases) {
      if (c.role == CaseRole::timing) workloads.push_back(&c);
    }
  } else {
    for (const std::string& name : req.workloads) {
      const Case* c = task.find_case(name);
      if (c == nullptr) throw UsageError(fmt::format("--workload {}: the task has no such case", name));
      workloads.push_back(c);
    }
  }
  if (workloads.empty()) throw DataError(fmt::format("{}: no case has role = \"timing\"", task.manifest.string()));

  WorkerArmRunner runner(task, req.arms, req.labels, req.timing);
  SteadyClock clock;
  uint64_t workload_seed = req.seed;
  for (const Case* c : workloads) {
    std::vector<Sample> pilot = runner.prepare(*c);
    report.samples.insert(report.samples.end(), pilot.begin(), pilot.end());
    workload_seed = workload_seed * 6364136223846793005ull + 1442695040888963407ull;
    WorkloadResult w = run_sequential_comparison(c->name, req.labels, runner, clock, req.gate, req.budget,
                                                 workload_seed, report.samples, progress);
    w.samples_per_visit = runner.samples_per_visit();
    w.warmups_per_visit = runner.warmups_per_visit();
    report.workloads.push_back(std::move(w));
    report.verdict = overall_verdict(report.workloads);
    if (!req.output_dir.empty()) write_compare_outputs(req.output_dir, report);
  }
  report.verdict = overall_verdict(report.workloads);
  return report;
}

}  // namespace kwb
