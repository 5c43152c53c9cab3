#include "pipeline/compare.h"

#include "stats/alpha_spending_rule.h"
#include "stats/descriptive.h"
#include "stats/random.h"
#include "util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

namespace {

stats::Verdict judge(const stats::EffectEstimate& e, const GateConfig& g) {
  if (g.mode == CompareMode::aa) return stats::aa_verdict(e, g.max_aa_difference_pct);
  return stats::improvement_verdict(e, g.min_improvement_pct, g.kind);
}

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
  }
  return "";
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
  const size_t first_look = std::max(budget.min_blocks, stats::AlphaSpendingRule::k_smallest_min_blocks);
  const stats::AlphaSpendingRule rule(gate.alpha, first_look);
  stats::Xoshiro256StarStar order_rng(seed);
  const double start = clock.seconds();
  std::optional<stats::Verdict> decided;

  auto estimate = [&](double confidence) {
    return stats::estimate_effect(res.log_ratios, confidence, seed ^ res.blocks);
  };

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
    for (int pos = 0; pos < 2 && ok; ++pos) {
      ArmVisit v = runner.visit(workload, order[static_cast<size_t>(pos)], block, pos);
      samples_out.insert(samples_out.end(), v.samples.begin(), v.samples.end());
      for (const Sample& s : v.samples) res.timed_samples += !s.warmup;
      if (!v.valid) {
        ok = false;
        res.failures.insert(res.failures.end(), v.failures.begin(), v.failures.end());
      }
      visits[order[static_cast<size_t>(pos)]] = std::move(v);
    }
    if (!ok) {
      // An output failed validation during timing: no metric may come from this comparison.
      res.verdict = "INVALID";
      res.reason = fmt::format("block {}: an arm failed validation during timing ({}); no metric is reported",
                               block, res.failures.empty() ? "?" : res.failures.front().reason);
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
    if (rule.is_look(res.blocks)) {
      const double conf = rule.confidence_at_look(rule.look_index(res.blocks));
      stats::EffectEstimate e = estimate(conf);
      stats::Verdict v = judge(e, gate);
      res.looks.push_back({res.blocks, conf, e.improvement_pct, e.ci_low_pct, e.ci_high_pct, v});
      res.estimate = e;
      p.estimate_pct = e.improvement_pct;
      p.ci_low_pct = e.ci_low_pct;
      p.ci_high_pct = e.ci_high_pct;
      // The point gate is the simple legacy rule: one decision at the first look, no sequential testing.
      if (v != stats::Verdict::inconclusive || gate.kind == stats::GateKind::point) {
        decided = v;
        if (progress) progress(p);
        break;
      }
    }
    if (progress) progress(p);
  }

  res.seconds = clock.seconds() - start;
  if (res.blocks < 2) {
    res.verdict = "INCONCLUSIVE";
    res.reason = fmt::format("only {} block(s) fit in the budget of {:.0f} s; no interval can be formed", res.blocks,
                             budget.max_seconds);
    res.estimate.reset();
    return res;
  }
  if (!decided) {
    // The final analysis spends like one more look (stopping.h), unless the last block was itself a look.
    if (!rule.is_look(res.blocks)) {
      const double conf = rule.confidence_for_final(rule.look_index(res.blocks));
      stats::EffectEstimate e = estimate(conf);
      stats::Verdict v = judge(e, gate);
      res.looks.push_back({res.blocks, conf, e.improvement_pct, e.ci_low_pct, e.ci_high_pct, v});
      res.estimate = e;
      decided = v;
    } else {
      decided = res.looks.back().verdict;
    }
  }
  res.verdict = std::string(stats::to_string(*decided));
  res.reason = verdict_reason(*res.estimate, gate, *decided);
  if (res.stopped_by_budget && *decided == stats::Verdict::inconclusive) {
    res.reason += fmt::format("; budget ended after {:.1f} s", res.seconds);
  }
  if (gate.mode == CompareMode::aa) {
    res.faster_verdict = std::string(
        stats::to_string(stats::improvement_verdict(*res.estimate, gate.min_improvement_pct, stats::GateKind::ci)));
  }
  return res;
}

// ---- real arms ------------------------------------------------------------------------------------------------

WorkerArmRunner::WorkerArmRunner(const Task& task, std::vector<const Artifact*> arms, std::vector<std::string> labels,
                                 TimingOptions options)
    : m_task(task), m_arms(std::move(arms)), m_labels(std::move(labels)), m_options(std::move(options)) {}

WorkerArmRunner::~WorkerArmRunner() = default;

std::vector<Sample> WorkerArmRunner::prepare(const Case& workload) {
  m_case = &workload;
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
  SessionOptions so;
  so.backend = m_options.backend;
  so.timeout = m_options.timeout;
  so.cold = m_options.cold;
  so.poison_seed = mix_seed(m_options.nonce, ++m_visits);
  WorkerSession session(m_task, *m_arms.at(arm), so);
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
    v.failures.push_back({m_case->name, warmups + samples, "said_goodbye", death ? death->reason : "exited",
                          death ? death->detail : "the worker did not confirm its calls at shutdown"});
  }
  return v;
}

// ---- reporting ------------------------------------------------------------------------------------------------

std::string overall_verdict(const std::vector<WorkloadResult>& workloads) {
  if (workloads.empty()) return "INCONCLUSIVE";
  auto any = [&](const char* v) {
    return std::any_of(workloads.begin(), workloads.end(), [&](const WorkloadResult& w) { return w.verdict == v; });
  };
  if (any("INVALID")) return "INVALID";
  if (any("FAIL")) return "FAIL";
  if (any("INCONCLUSIVE")) return "INCONCLUSIVE";
  return "PASS";
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
  if (!w.faster_verdict.empty()) j["faster_verdict"] = w.faster_verdict;
  nlohmann::json looks = nlohmann::json::array();
  for (const Look& l : w.looks) {
    looks.push_back({{"blocks", l.blocks}, {"confidence", l.confidence}, {"improvement_pct", l.improvement_pct},
                     {"ci_low_pct", l.ci_low_pct}, {"ci_high_pct", l.ci_high_pct},
                     {"verdict", std::string(stats::to_string(l.verdict))}});
  }
  j["looks"] = looks;
  j["block_median_ns"] = {{"reference", w.block_median_a}, {"other", w.block_median_b}};
  j["log_ratios"] = w.log_ratios;
  nlohmann::json failures = nlohmann::json::array();
  for (const Failure& f : w.failures) {
    failures.push_back({{"case", f.case_name}, {"call", f.call}, {"assertion", f.assertion}, {"reason", f.reason},
                        {"detail", f.detail}});
  }
  j["failures"] = failures;
  return j;
}

nlohmann::json to_json(const CompareReport& r) {
  nlohmann::json arms = nlohmann::json::array();
  for (size_t i = 0; i < r.arm_labels.size(); ++i) {
    arms.push_back({{"label", r.arm_labels[i]}, {"path", r.arm_paths[i]}, {"identity", to_json(r.arm_identities[i])}});
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
                       {"backend", r.timing.backend},
                       {"cold", r.timing.cold},
                       {"arms", arms},
                       {"refused", r.refused},
                       {"checks", r.checks},
                       {"workloads", workloads},
                       {"verdict", r.verdict}};
  if (!r.interrupted.empty()) j["interrupted"] = r.interrupted;
  return j;
}

std::string_view samples_csv_header() {
  return "workload,block,arm,order_position,pid,sample_index,warmup,input_set,ns,output_valid,device_ns\n";
}

std::string samples_csv(const std::vector<Sample>& samples) {
  std::string out(samples_csv_header());
  for (const Sample& s : samples) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", s.workload, s.block, s.arm, s.order_position, s.pid,
                       s.sample_index, s.warmup ? 1 : 0, s.input_set, s.ns, s.output_valid ? 1 : 0, s.device_ns);
  }
  return out;
}

}  // namespace kwb
