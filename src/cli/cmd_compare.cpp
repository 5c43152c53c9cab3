// kwb compare TASK_DIR [--baseline SRC] --candidate SRC | --aa  [gates, budgets] [--output-dir D] [--json]
#include "builder/builder.h"
#include "cli/commands.h"
#include "cli/comparison_text.h"
#include "cli/ledger.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/terminal.h"
#include "pipeline/compare.h"
#include "task/task.h"
#include "util/error.h"
#include "util/json_text.h"

#include <fmt/format.h>

#include <iostream>

namespace kwb::cli {

namespace {

void print_human(const CompareReport& r) {
  std::cout << fmt::format("kwb compare ({})\n", r.mode == CompareMode::aa ? "A/A: baseline vs its own copy A'"
                                                                           : "A/B: baseline A vs candidate B");
  for (size_t i = 0; i < r.arm_labels.size(); ++i) {
    std::cout << fmt::format("  {:<2} {}  artifact {}\n", r.arm_labels[i], r.arm_paths[i],
                             r.arm_identities[i].artifact_sha256.substr(0, 16));
  }
  if (!r.refused.empty()) {
    std::cout << "\ntiming refused: no metric is reported for rejected code\n";
    for (const std::string& s : r.refused) std::cout << "  " << s << "\n";
    return;
  }
  const nlohmann::json j = to_json(r);
  const std::string other = r.arm_labels.size() > 1 ? r.arm_labels[1] : "B";
  std::cout << "\n" << comparison_table(j, other);
  std::cout << "\n";
  for (const WorkloadResult& w : r.workloads) std::cout << fmt::format("  {}: {}\n", w.name, w.reason);
  std::cout << warning_block(noise_warnings(j, other));
  std::cout << fmt::format("\nverdict: {}\n", r.verdict);
}

int exit_code_for(stats::Verdict verdict) {
  switch (verdict) {
    case stats::Verdict::pass:
      return static_cast<int>(ExitCode::ok);
    case stats::Verdict::fail:
    case stats::Verdict::same:
    case stats::Verdict::refused:
      return static_cast<int>(ExitCode::rejected);
    case stats::Verdict::inconclusive:
      return static_cast<int>(ExitCode::inconclusive);
    case stats::Verdict::invalid:
    case stats::Verdict::interrupted:
      break;
  }
  return static_cast<int>(ExitCode::invalid);
}

}  // namespace

Action add_compare(CLI::App& root) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* app = root.add_subcommand("compare", "Interleaved A/B (or A/A) timing with intervals and a gate");
  add_compare_options(*app, *a);
  return [a]() {
    Task task = load_task(a->task_dir);
    if (!task.backends.contains(a->timing.backend)) {
      throw DataError(
          fmt::format("{}: the task has no [backends.{}] section", task.manifest.string(), a->timing.backend));
    }
    if (!a->aa && a->candidate.empty()) throw UsageError("compare needs --candidate SOURCE (or --aa for A/A)");
    if (a->aa && !a->candidate.empty()) throw UsageError("--aa compares the baseline with itself: drop --candidate");
    // Refused before anything is built or checked.
    for (const std::string& w : a->timing.workloads) (void)task.require_case("--workload", w, true);
    const BackendKind backend = a->timing.backend;
    const std::string baseline = a->baseline.empty() ? task.backends.at(backend).baseline.string() : a->baseline;

    require_backend(backend);
    LedgerRun started;
    started.kind = "compare";
    started.task = task.name;
    started.task_dir = task.dir.string();
    started.backend = backend;
    started.arms.push_back({"A", std::filesystem::absolute(baseline).lexically_normal().string(), ""});
    if (!a->aa) started.arms.push_back({"B", std::filesystem::absolute(a->candidate).lexically_normal().string(), ""});
    begin_ledger_run(started);
    // Each arm is a layout pool (docs/timing.md, "Layout"); A/A draws from the baseline's pool for both arms.
    const int layouts = a->timing.layouts > 0 ? a->timing.layouts : default_layouts(backend);
    std::vector<BuildRequest> requests;
    requests.reserve(static_cast<size_t>(layouts));
    for (int v = 0; v < layouts; ++v) requests.push_back({baseline, v, backend});
    if (!a->aa) {
      for (int v = 0; v < layouts; ++v) requests.push_back({a->candidate, v, backend});
    }
    std::vector<Artifact> built = build_implementations(requests);
    const auto split = built.begin() + layouts;
    std::vector<Artifact> base_pool(std::make_move_iterator(built.begin()), std::make_move_iterator(split));
    std::vector<Artifact> other_pool(std::make_move_iterator(split), std::make_move_iterator(built.end()));
    // A candidate that does not build is a verdict on it, not kwb failing: its check (below, in run_compare) fails
    // with build_failed and the comparison is REFUSED, exit 1, with the compiler's lines on stderr. A baseline that
    // does not build is the caller's input to fix (exit 65).
    const bool candidate_not_built = !a->aa && !other_pool.empty() && !other_pool.front().ok;
    for (const auto* pool : {&base_pool, &other_pool}) {
      for (const Artifact& art : *pool) {
        if (!art.ok) {
          std::cerr << art.log;
          if (pool == &other_pool && candidate_not_built) break;
          throw DataError(fmt::format("{}: does not build (compiler output above)", art.source.string()));
        }
      }
    }
    if (candidate_not_built) other_pool.resize(1);  // its check needs one artifact; nothing of it is timed
    std::vector<const Artifact*> base_ptrs, other_ptrs;
    for (const Artifact& art : base_pool) base_ptrs.push_back(&art);
    for (const Artifact& art : other_pool) other_ptrs.push_back(&art);
    if (a->aa) other_ptrs = base_ptrs;
    CompareRequest req = compare_request(*a);
    req.gate.same_margin_pct = same_margin_pct(a->timing, task);
    req.arms = {base_ptrs[0], other_ptrs[0]};
    req.layouts = {base_ptrs, other_ptrs};
    req.labels = {"A", a->aa ? "A'" : "B"};
    req.lock_what = fmt::format("kwb compare{}: {} ({})", a->aa ? " --aa" : "", task.name, task.dir.string());
    req.lock_notice = make_lock_notice("  ");
    req.lock_waited = make_lock_waited("  ");
    // A stopped comparison is a row too (verdict INTERRUPTED, with what it measured before the signal).
    req.on_interrupted = [&task](const CompareReport& partial) { record_in_ledger(ledger_run(task, partial)); };
    CompareReport report = run_compare(task, req, make_progress_sink("  "));
    end_progress_line();
    record_in_ledger(ledger_run(task, report));
    if (a->json) {
      std::cout << json_text(to_json(report), 2) << "\n";
    } else {
      print_human(report);
    }
    return exit_code_for(report.verdict);
  };
}

}  // namespace kwb::cli
