#include "pipeline/compare.h"

#include "stats/alpha_spending_rule.h"
#include "stats/sequential.h"
#include "stats/descriptive.h"
#include "stats/random.h"
#include "util/cpu_watch.h"
#include "util/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace kwb {

double visit_statistic(const ArmVisit& visit) {
  std::vector<double> ns;
  for (const Sample& s : visit.samples) {
    if (!s.warmup && s.output_valid) ns.push_back(static_cast<double>(s.ns));
  }
  if (ns.empty()) throw InternalError("visit_statistic: a visit without timed samples");
  // The median: robust to the occasional preempted call on a shared machine, which a mean would absorb.
  return stats::median(ns);
}

stats::SequentialGate sequential_gate(const GateConfig& g, const Budget& budget) {
  stats::SequentialGate s;
  s.aa = g.mode == CompareMode::aa;
  s.kind = g.kind;
  s.min_improvement_pct = g.min_improvement_pct;
  s.max_aa_difference_pct = g.max_aa_difference_pct;
  s.alpha = g.alpha;
  s.min_blocks = budget.min_blocks;
  return s;
}

namespace {

std::string verdict_reason(const stats::EffectEstimate& e, const GateConfig& g, stats::Verdict v) {
  const std::string ci = fmt::format("{:+.2f}% [{:+.2f}%, {:+.2f}%] at {:.2f}% confidence over {} blocks",
                                     e.improvement_pct, e.ci_low_pct, e.ci_high_pct, 100 * e.confidence, e.blocks);
  if (g.mode == CompareMode::aa) {
    switch (v) {
      case stats::Verdict::pass: return fmt::format("A' vs A {}: within +-{}%", ci, g.max_aa_difference_pct);
      case stats::Verdict::fail: return fmt::format("A' vs A {}: outside +-{}%", ci, g.max_aa_difference_pct);
      case stats::Verdict::inconclusive:
        return fmt::format("A' vs A {}: interval not resolved within +-{}% (MDE {:.2f}%)", ci,
                           g.max_aa_difference_pct, e.mde_pct);
      case stats::Verdict::invalid:
      case stats::Verdict::refused:
      case stats::Verdict::interrupted: break;
    }
  }
  if (g.kind == stats::GateKind::point) {
    return fmt::format("improvement {} ({} the point gate >= {}%)", ci,
                       v == stats::Verdict::pass ? "passes" : "fails", g.min_improvement_pct);
  }
  switch (v) {
    case stats::Verdict::pass: return fmt::format("improvement {}: whole interval >= {}%", ci, g.min_improvement_pct);
    case stats::Verdict::fail: return fmt::format("improvement {}: whole interval < {}%", ci, g.min_improvement_pct);
    case stats::Verdict::inconclusive:
      return fmt::format("improvement {}: interval straddles {}% (MDE {:.2f}%)", ci, g.min_improvement_pct,
                         e.mde_pct);
    case stats::Verdict::invalid:
    case stats::Verdict::refused:
    case stats::Verdict::interrupted: break;
  }
  throw InternalError(fmt::format("verdict_reason: a gate never answers {}", stats::to_string(v)));
}

}  // namespace

WorkloadResult run_sequential_comparison(const std::string& workload, const std::vector<std::string>& arm_labels,
                                         ArmRunner& runner, Clock& clock, const GateConfig& gate,
                                         const Budget& budget, uint64_t seed, std::vector<Sample>& samples_out,
                                         const ProgressSink& progress) {
  if (arm_labels.size() != 2) throw InternalError("run_sequential_comparison: exactly two arms");
  WorkloadResult res;
  res.name = workload;
  res.seed = seed;
  // The decision procedure verify replays (stats/sequential.h).
  stats::SequentialProcedure procedure(sequential_gate(gate, budget), seed);
  stats::Xoshiro256StarStar order_rng(seed);
  const double start = clock.seconds();

  for (;;) {
    const double elapsed = clock.seconds() - start;
    if (res.blocks >= budget.max_blocks) {
      res.stopped_by_budget = true;
      break;
    }
    // Start a block only if one more of the average length still fits in the budget; --repetitions is a floor the
    // budget cannot cut (a verdict from fewer blocks than asked for would be a surprise).
    if (res.blocks >= budget.min_blocks && elapsed + elapsed / static_cast<double>(res.blocks) > budget.max_seconds) {
      res.stopped_by_budget = true;
      break;
    }
    const int block = static_cast<int>(res.blocks);
    // A fresh random order per block: neither arm always goes first (RMIT); over blocks this balances AB and BA.
    std::vector<size_t> order = {0, 1};
    if (order_rng.next() & 1) std::swap(order[0], order[1]);
    ArmVisit visits[2];
    bool ok = true;
    std::string failed_arm;
    for (int pos = 0; pos < 2 && ok; ++pos) {
      ArmVisit v = runner.visit(workload, order[static_cast<size_t>(pos)], block, pos);
      // Kept the moment the visit is over: an interruption or a failure in the next visit loses none of it.
      samples_out.insert(samples_out.end(), v.samples.begin(), v.samples.end());
      for (const Sample& s : v.samples) res.timed_samples += !s.warmup;
      if (!v.valid) {
        ok = false;
        failed_arm = arm_labels[order[static_cast<size_t>(pos)]];
        res.failures.insert(res.failures.end(), v.failures.begin(), v.failures.end());
      }
      visits[order[static_cast<size_t>(pos)]] = std::move(v);
    }
    if (!ok) {
      // An output failed validation during timing: no metric may come from this comparison.
      res.verdict = stats::Verdict::invalid;
      // Which arm, why and where, in the words of its first failure: what a reader of the decision needs.
      std::string why = "?";
      if (!res.failures.empty()) {
        const Failure& f = res.failures.front();
        std::string detail = f.detail.size() > 200 ? f.detail.substr(0, 200) + "..." : f.detail;
        why = fmt::format("{} at {} call {}{}{}", to_string(f.reason), f.case_name, f.call,
                          detail.empty() ? "" : ": ", detail);
      }
      res.reason = fmt::format("block {}: arm {} failed validation during timing ({}); no metric is reported", block,
                               failed_arm, why);
      res.seconds = clock.seconds() - start;
      res.estimate.reset();
      return res;
    }
    const double a = visit_statistic(visits[0]);
    const double b = visit_statistic(visits[1]);
    res.block_median_a.push_back(a);
    res.block_median_b.push_back(b);
    res.log_ratios.push_back(std::log(b / a));
    ++res.blocks;

    Progress p{workload, res.blocks, clock.seconds() - start, budget.max_seconds, {}, {}, {}};
    const size_t looks_before = procedure.looks().size();
    const bool stop = procedure.add(res.log_ratios.back());
    if (procedure.looks().size() > looks_before) {
      const stats::SequentialLook& l = procedure.looks().back();
      res.looks.push_back({l.blocks, l.confidence, l.estimate.improvement_pct, l.estimate.ci_low_pct,
                           l.estimate.ci_high_pct, l.verdict});
      p.estimate_pct = l.estimate.improvement_pct;
      p.ci_low_pct = l.estimate.ci_low_pct;
      p.ci_high_pct = l.estimate.ci_high_pct;
    }
    if (progress) progress(p);
    if (stop) break;
  }

  res.seconds = clock.seconds() - start;
  const size_t looks_before = procedure.looks().size();
  const std::optional<stats::SequentialLook> outcome = procedure.finish();
  if (!outcome) {
    res.verdict = stats::Verdict::inconclusive;
    res.reason = fmt::format("only {} block(s) fit in the budget of {:.0f} s; no interval can be formed", res.blocks,
                             budget.max_seconds);
    res.estimate.reset();
    return res;
  }
  if (procedure.looks().size() > looks_before) {  // the final analysis
    res.looks.push_back({outcome->blocks, outcome->confidence, outcome->estimate.improvement_pct,
                         outcome->estimate.ci_low_pct, outcome->estimate.ci_high_pct, outcome->verdict});
  }
  res.estimate = outcome->estimate;
  const stats::Verdict decided = outcome->verdict;
  res.verdict = decided;
  res.reason = verdict_reason(*res.estimate, gate, decided);
  if (res.stopped_by_budget && decided == stats::Verdict::inconclusive) {
    res.reason += fmt::format("; budget ended after {:.1f} s", res.seconds);
  }
  if (gate.mode == CompareMode::aa) {
    res.faster_verdict = stats::improvement_verdict(*res.estimate, gate.min_improvement_pct, stats::GateKind::ci);
  }
  return res;
}

// ---- real arms ------------------------------------------------------------------------------------------------

WorkerArmRunner::WorkerArmRunner(const Task& task, std::vector<std::vector<const Artifact*>> arms,
                                 std::vector<std::string> labels, TimingOptions options)
    : m_task(task), m_arms(std::move(arms)), m_labels(std::move(labels)), m_options(std::move(options)) {}

WorkerArmRunner::~WorkerArmRunner() = default;

std::vector<Sample> WorkerArmRunner::prepare(const Case& workload, uint64_t workload_seed) {
  m_case = &workload;
  m_workload_seed = workload_seed;
  m_pool.clear();
  // No input content repeats within a worker's lifetime: each call of a visit (warm-ups included) runs on a set of
  // its own, in a fresh order per visit, so no memo of any kind (by pointer, by content, by mapping state) can hit
  // inside a worker. The pool is bounded in memory (k_pool_bytes): where a workload's sets are large, visits get
  // fewer calls instead (docs/timing.md).
  size_t bytes_per_set = 0;
  for (const TensorSpec& s : m_task.signature.inputs) {
    bytes_per_set += resolve_shape(s, workload).elements() * dtype_size(s.dtype);
  }
  for (const TensorSpec& s : m_task.signature.outputs) bytes_per_set += resolve_shape(s, workload).elements() * 8;
  const size_t max_sets = std::max<size_t>(k_pool_bytes / std::max<size_t>(bytes_per_set, 1), k_min_pool_sets);
  m_warmups = std::max(1, m_options.warmups);
  auto grow_pool = [&](size_t sets) {
    while (m_pool.size() < sets) {
      m_pool.push_back(
          std::make_unique<InputSet>(make_input_set(m_task, workload, 1000 + m_pool.size(), m_options.nonce)));
    }
  };
  auto fit = [&](int samples) {
    const auto room = static_cast<int>(max_sets) - m_warmups;
    return std::max(k_min_samples_per_visit, std::min(samples, room));
  };
  m_samples = m_options.samples > 0 ? fit(m_options.samples) : 0;
  if (m_samples > 0) {
    grow_pool(static_cast<size_t>(m_warmups + m_samples));
    return {};
  }
  // Pilot: a few calls of the reference arm size the visits so each lasts ~50 ms of kernel time, between 5 and
  // 100 calls (enough calls for a stable median, few enough for many blocks in the budget).
  constexpr int k_pilot_calls = 3;
  grow_pool(static_cast<size_t>(m_warmups + k_pilot_calls));
  ArmVisit pilot = run_visit(0, -1, 0, m_warmups, k_pilot_calls);
  if (!pilot.valid) {
    m_samples = fit(5);
  } else {
    const double t = visit_statistic(pilot) * 1e-9;
    m_samples = fit(static_cast<int>(std::clamp(std::round(0.05 / std::max(t, 1e-9)), 5.0, 100.0)));
  }
  grow_pool(static_cast<size_t>(m_warmups + m_samples));
  return pilot.samples;
}

ArmVisit WorkerArmRunner::visit(const std::string&, size_t arm, int block, int order_position) {
  return run_visit(arm, block, order_position, m_warmups, m_samples);
}

ArmVisit WorkerArmRunner::run_visit(size_t arm, int block, int order_position, int warmups, int samples) {
  ArmVisit v;
  const std::vector<const Artifact*>& pool = m_arms.at(arm);
  // The pilot (block -1) runs the reference arm's plain build at the plain layout.
  const stats::VisitLayout layout =
      block < 0 ? stats::VisitLayout{0, 0, std::vector<uint32_t>(m_task.signature.inputs.size() + m_task.signature.outputs.size(), 0)}
                : stats::visit_layout(m_workload_seed, arm, block, static_cast<int>(pool.size()),
                                      m_task.signature.inputs.size() + m_task.signature.outputs.size(),
                                      layout_offsets(m_options.backend, static_cast<int>(pool.size())));
  SessionOptions so;
  so.backend = m_options.backend;
  so.timeout = m_options.timeout;
  so.cold = m_options.cold;
  so.poison_seed = mix_seed(m_options.nonce, ++m_visits);
  so.stack_offset = layout.stack_offset;
  so.tensor_offsets = layout.tensor_offsets;
  WorkerSession session(m_task, *pool.at(static_cast<size_t>(layout.variant)), so);
  LoadOutcome lo = session.start();
  if (!lo.ok) {
    v.valid = false;
    v.failures.push_back({m_case->name, -1, "loads", lo.reason, lo.detail});
    return v;
  }
  v.pid = session.pid();
  // This visit's order of the pool: every call on a set of its own.
  std::vector<size_t> order(m_pool.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Rng shuffle(mix_seed(m_options.nonce, m_visits * 0x9E37 + 0x0DE5));
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[shuffle.next() % i]);
  if (order.size() < static_cast<size_t>(warmups + samples)) {
    throw InternalError("compare: the input pool is smaller than a visit");
  }
  for (int i = 0; i < warmups + samples; ++i) {
    const size_t set = order[static_cast<size_t>(i)];
    CallResult r = session.call(*m_pool[set], i, CallMode::timing);
    Sample s;
    s.workload = m_case->name;
    s.block = block;
    s.arm = m_labels.at(arm);
    s.order_position = order_position;
    s.pid = v.pid;
    s.sample_index = i;
    s.warmup = i < warmups;
    s.input_set = static_cast<int>(set);
    s.ns = r.ns;
    s.device_ns = r.device_ns;
    s.output_valid = r.valid();
    s.layout = layout.variant;
    s.stack_offset = layout.stack_offset;
    s.tensor_offsets = layout.tensor_offsets;
    s.pre_cpu_ns = r.pre_cpu_ns;
    s.post_cpu_ns = r.post_cpu_ns;
    s.window_ns = r.window_ns;
    s.gap_cpu_ns = r.gap_cpu_ns;
    s.outside_cpu_ns = r.outside_cpu_ns;
    s.outside_wall_ns = r.outside_wall_ns;
    v.samples.push_back(s);
    if (!r.valid()) {
      v.valid = false;
      v.failures.insert(v.failures.end(), r.failures.begin(), r.failures.end());
      break;
    }
  }
  if (v.valid) {
    for (const auto& set : m_pool) {
      CallResult r = session.verify_inputs(*set, warmups + samples);
      if (!r.valid()) {
        v.valid = false;
        v.failures.insert(v.failures.end(), r.failures.begin(), r.failures.end());
      }
    }
  }
  // The worker must also say goodbye with the right call count: a forged answer followed by _exit(0) on the last
  // call of a visit is caught here even when its reported time looks plausible.
  if (!session.shutdown() && v.valid) {
    v.valid = false;
    const auto death = session.death();
    const FailureReason reason = death ? death->reason : FailureReason::exited;
    v.failures.push_back({m_case->name, warmups + samples, "said_goodbye", reason,
                          death ? death->detail : "the worker did not confirm its calls at shutdown"});
  }
  return v;
}

// ---- reporting ------------------------------------------------------------------------------------------------

stats::Verdict overall_verdict(const std::vector<WorkloadResult>& workloads) {
  using stats::Verdict;
  if (workloads.empty()) return Verdict::inconclusive;
  auto any = [&](Verdict v) {
    return std::any_of(workloads.begin(), workloads.end(), [&](const WorkloadResult& w) { return w.verdict == v; });
  };
  if (any(Verdict::invalid)) return Verdict::invalid;
  if (any(Verdict::fail)) return Verdict::fail;
  const bool all_pass = std::all_of(workloads.begin(), workloads.end(),
                                    [](const WorkloadResult& w) { return w.verdict == Verdict::pass; });
  return all_pass ? Verdict::pass : Verdict::inconclusive;
}

nlohmann::json to_json(const WorkloadResult& w) {
  nlohmann::json j = {{"name", w.name},
                      {"verdict", w.verdict},
                      {"reason", w.reason},
                      {"blocks", w.blocks},
                      {"samples", w.timed_samples},
                      {"samples_per_visit", w.samples_per_visit},
                      {"seed", w.seed},
                      {"warmups_per_visit", w.warmups_per_visit},
                      {"seconds", w.seconds},
                      {"stopped_by_budget", w.stopped_by_budget}};
  if (w.estimate) {
    const stats::EffectEstimate& e = *w.estimate;
    j["improvement_pct"] = e.improvement_pct;
    j["ci_low_pct"] = e.ci_low_pct;
    j["ci_high_pct"] = e.ci_high_pct;
    j["confidence"] = e.confidence;
    j["method"] = std::string(stats::to_string(e.method));
    j["heavy_tailed"] = e.heavy_tailed;
    j["t_ci_pct"] = {e.t_ci_low_pct, e.t_ci_high_pct};
    j["bootstrap_ci_pct"] = {e.boot_ci_low_pct, e.boot_ci_high_pct};
    j["mde_pct"] = e.mde_pct;
    j["sd_log_ratio"] = e.sd_log_ratio;
  } else {
    for (const char* k : {"improvement_pct", "ci_low_pct", "ci_high_pct", "mde_pct"}) j[k] = nullptr;
  }
  if (w.faster_verdict) j["faster_verdict"] = *w.faster_verdict;
  nlohmann::json looks = nlohmann::json::array();
  for (const Look& l : w.looks) {
    looks.push_back({{"blocks", l.blocks}, {"confidence", l.confidence}, {"improvement_pct", l.improvement_pct},
                     {"ci_low_pct", l.ci_low_pct}, {"ci_high_pct", l.ci_high_pct},
                     {"verdict", l.verdict}});
  }
  j["looks"] = looks;
  j["block_median_ns"] = {{"reference", w.block_median_a}, {"other", w.block_median_b}};
  j["layouts"] = w.layouts;
  nlohmann::json sens = nlohmann::json::array();
  for (const auto& l : w.layout_sensitivity) sens.push_back(to_json(l));
  j["layout_sensitivity"] = sens;
  j["log_ratios"] = w.log_ratios;
  nlohmann::json failures = nlohmann::json::array();
  for (const Failure& f : w.failures) {
    failures.push_back(to_json(f));
  }
  j["failures"] = failures;
  return j;
}

nlohmann::json to_json(const CompareReport& r) {
  nlohmann::json arms = nlohmann::json::array();
  for (size_t i = 0; i < r.arm_labels.size(); ++i) {
    nlohmann::json layouts = nlohmann::json::array();
    if (i < r.arm_layouts.size()) {
      for (size_t v = 0; v < r.arm_layouts[i].size(); ++v) {
        layouts.push_back({{"layout", v}, {"pad_bytes", layout_pad_bytes(r.arm_layouts[i][v].layout_variant)},
                           {"artifact_sha256", r.arm_layouts[i][v].artifact_sha256}});
      }
    }
    arms.push_back({{"label", r.arm_labels[i]}, {"path", r.arm_paths[i]}, {"identity", to_json(r.arm_identities[i])},
                    {"layouts", layouts}});
  }
  nlohmann::json workloads = nlohmann::json::array();
  for (const WorkloadResult& w : r.workloads) workloads.push_back(to_json(w));
  size_t samples = 0;
  for (const Sample& s : r.samples) samples += !s.warmup && s.block >= 0;
  nlohmann::json j = {{"schema", k_compare_schema},
                       {"schema_version", k_compare_schema_version},
                       {"mode", r.mode == CompareMode::aa ? "aa" : "ab"},
                       {"gate",
                        {{"kind", r.gate.kind == stats::GateKind::ci ? "ci" : "point"},
                         {"min_improvement_pct", r.gate.min_improvement_pct},
                         {"max_aa_difference_pct", r.gate.max_aa_difference_pct},
                         {"alpha", r.gate.alpha},
                         {"stopping", "alpha spending, alpha_k = alpha * 6 / (pi^2 k^2), geometric looks x1.5"}}},
                       {"budgets",
                        {{"min_blocks", r.budget.min_blocks},
                         {"max_blocks", r.budget.max_blocks},
                         {"max_seconds_per_workload", r.budget.max_seconds},
                         {"warmups", r.timing.warmups},
                         {"samples", r.timing.samples == 0 ? nlohmann::json("auto") : nlohmann::json(r.timing.samples)},
                         {"timeout_seconds", static_cast<double>(r.timing.timeout.count()) / 1000.0},
                         {"timed_samples_used", samples}}},
                       {"seed", r.seed},
                       {"backend", to_string(r.timing.backend)},
                       {"cold", r.timing.cold},
                       {"arms", arms},
                       {"refused", r.refused},
                       {"checks", r.checks},
                       {"workloads", workloads},
                       {"verdict", r.verdict}};
  if (!r.interrupted.empty()) j["interrupted"] = r.interrupted;
  if (r.timing_lock) {
    const TimingLockRecord& l = *r.timing_lock;
    j["timing_lock"] = {{"path", l.path},
                        {"arrived_unix_ns", l.arrived_unix_ns},
                        {"ticket", l.ticket},
                        {"waiters_ahead", l.waiters_ahead},
                        {"waited_seconds", l.waited_s},
                        {"waited_for", l.waited_for},
                        {"acquired_unix_ns", l.acquired_unix_ns},
                        {"released_unix_ns", l.released_unix_ns}};
  }
  return j;
}

stats::LayoutSensitivity layout_sensitivity_of(const std::vector<Sample>& samples, const std::string& workload,
                                               const std::string& arm, int layouts, uint64_t seed) {
  // Visits are (block, arm): their timed, validated samples and the build they ran.
  std::map<int, std::pair<int, std::vector<double>>> visits;
  for (const Sample& s : samples) {
    if (s.workload != workload || s.arm != arm || s.block < 0 || s.warmup || !s.output_valid) continue;
    auto& v = visits[s.block];
    v.first = s.layout;
    v.second.push_back(static_cast<double>(s.ns));
  }
  std::vector<std::pair<int, double>> medians;
  for (const auto& [block, v] : visits) medians.emplace_back(v.first, stats::median(v.second));
  return stats::layout_sensitivity(medians, layouts, seed);
}

bool layout_offsets(BackendKind backend, int layouts) { return !is_device(backend) && layouts > 1; }

int default_layouts(BackendKind backend) {
  return !is_device(backend) ? stats::k_cpu_layouts : stats::k_device_layouts;
}

nlohmann::json to_json(const stats::LayoutSensitivity& l) {
  nlohmann::json j = {{"available", l.available}, {"variant_median_ns", l.variant_median_ns},
                      {"variant_visits", l.variant_visits}};
  if (l.available) {
    j["observed_spread_pct"] = l.observed_spread_pct;
    j["spread_pct"] = l.spread_pct;
    j["ci_low_pct"] = l.ci_low_pct;
    j["ci_high_pct"] = l.ci_high_pct;
    j["null_spread_pct"] = l.null_spread_pct;
    j["p_value"] = l.p_value;
  }
  return j;
}

}  // namespace kwb
