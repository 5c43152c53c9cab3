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
#include <string>
#include <utility>
#include <vector>

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

// Each arm's layout pool, built in two rounds: first the plain builds, which the checks need, then (once both arms
// passed their checks) the padded ones. A candidate that does not build, or builds and is wrong, is refused in the
// time of one build instead of a pool's, which matters most where a build takes long. A/A has one pool, the
// baseline's, for both arms.
class ArmPools {
public:
  ArmPools(std::string baseline, std::string candidate, BackendKind backend, int layouts)
      : m_baseline(std::move(baseline)), m_candidate(std::move(candidate)), m_backend(backend), m_layouts(layouts) {
    // Reserved: the request holds pointers into both pools, and later builds must not move them.
    m_base.reserve(static_cast<size_t>(m_layouts));
    m_other.reserve(static_cast<size_t>(m_layouts));
    std::vector<BuildRequest> plain = {{m_baseline, 0, m_backend}};
    if (!aa()) plain.push_back({m_candidate, 0, m_backend});
    std::vector<Artifact> built = build_implementations(plain);
    m_base.push_back(std::move(built[0]));
    // A baseline that does not build is the caller's input to fix (exit 65). A candidate that does not build is a
    // verdict on it, not kwb failing: its check fails with build_failed and the comparison is REFUSED, exit 1, with
    // the compiler's lines on stderr.
    if (!m_base[0].ok) {
      std::cerr << m_base[0].log;
      throw DataError(fmt::format("{}: does not build (compiler output above)", m_base[0].source.string()));
    }
    if (!aa()) {
      m_other.push_back(std::move(built[1]));
      if (!m_other[0].ok) std::cerr << m_other[0].log;
    }
  }

  // The arms' plain builds: [A, B], or [A, A] for A/A.
  std::vector<const Artifact*> plain() const { return {&m_base[0], aa() ? &m_base[0] : &m_other[0]}; }

  // Builds layouts 1..K-1 of each pool and returns both pools. A padded build of the baseline that fails is the
  // caller's to fix (exit 65); one of the candidate's (its code can break the pad's link) refuses the candidate.
  std::vector<std::vector<const Artifact*>> build_padded(std::vector<std::string>& refused) {
    std::vector<BuildRequest> requests;
    for (int v = 1; v < m_layouts; ++v) requests.push_back({m_baseline, v, m_backend});
    if (!aa()) {
      for (int v = 1; v < m_layouts; ++v) requests.push_back({m_candidate, v, m_backend});
    }
    std::vector<Artifact> built = requests.empty() ? std::vector<Artifact>{} : build_implementations(requests);
    const size_t padded = static_cast<size_t>(m_layouts - 1);
    for (size_t k = 0; k < built.size(); ++k) {
      std::vector<Artifact>& pool = k < padded ? m_base : m_other;
      pool.push_back(std::move(built[k]));
      const Artifact& art = pool.back();
      // Bound to what was checked: the source and every file it read are the plain build's, byte for byte, or the
      // padded builds would time code that no check saw (a source swapped while the checks ran).
      const BuildIdentity& checked = pool.front().identity;
      if (art.ok &&
          (art.identity.source_sha256 != checked.source_sha256 || art.identity.dependencies != checked.dependencies)) {
        const std::string why = fmt::format(
            "{} changed after its plain build was checked: its layout {} was built "
            "from other bytes; nothing is timed",
            art.source.string(), art.identity.layout_variant);
        if (&pool == &m_base) throw DataError(why);
        refused.push_back("arm B: " + why);
        return {};
      }
      if (art.ok) continue;
      std::cerr << art.log;
      if (&pool == &m_base) {
        throw DataError(fmt::format("{}: its layout {} does not build (compiler output above)", art.source.string(),
                                    art.identity.layout_variant));
      }
      refused.push_back(
          fmt::format("arm B: its layout {} (the plain build with a pad, docs/timing.md \"Layout\") "
                      "does not build; no metric is reported for code that does not build",
                      art.identity.layout_variant));
      return {};
    }
    std::vector<std::vector<const Artifact*>> pools(2);
    for (const Artifact& art : m_base) pools[0].push_back(&art);
    for (const Artifact& art : aa() ? m_base : m_other) pools[1].push_back(&art);
    return pools;
  }

private:
  bool aa() const { return m_candidate.empty(); }

  std::string m_baseline, m_candidate;
  BackendKind m_backend;
  int m_layouts;
  std::vector<Artifact> m_base, m_other;
};

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
    ArmPools pools(baseline, a->aa ? "" : a->candidate, backend,
                   a->timing.layouts > 0 ? a->timing.layouts : default_layouts(backend));
    CompareRequest req = compare_request(*a);
    req.gate.same_margin_pct = same_margin_pct(a->timing, task);
    req.arms = pools.plain();
    req.build_layouts = [&pools](std::vector<std::string>& refused) { return pools.build_padded(refused); };
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
