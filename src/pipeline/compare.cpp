#include "pipeline/compare.h"

#include "stats/alpha_spending_rule.h"
#include "stats/descriptive.h"
#include "stats/random.h"
#include "stats/sequential.h"
#include "util/cpu_watch.h"
#include "util/data_secret.h"
#include "util/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

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

stats::AgingVisit aging_visit(const ArmVisit& visit) {
  stats::AgingVisit out;
  for (const Sample& s : visit.samples) {
    if (!s.warmup && s.output_valid) out.emplace_back(s.sample_index, static_cast<double>(s.ns));
  }
  return out;
}

stats::OutsideVisit outside_visit(const ArmVisit& visit) {
  stats::OutsideVisit out;
  for (const Sample& s : visit.samples) {
    if (s.warmup || !s.output_valid || s.outside_wall_ns < 0) continue;
    out.ns.push_back(static_cast<double>(s.ns));
    out.outside_ns.push_back(static_cast<double>(s.outside_wall_ns));
  }
  return out;
}

stats::UntimedVisit untimed_visit(const ArmVisit& visit) {
  stats::UntimedVisit out;
  for (const Sample& s : visit.samples) {
    if (!s.output_valid) continue;
    (s.warmup ? out.untimed_ns : out.timed_ns).push_back(static_cast<double>(s.ns));
  }
  return out;
}

stats::SequentialGate sequential_gate(const GateConfig& g, const Budget& budget) {
  stats::SequentialGate s;
  s.aa = g.mode == CompareMode::aa;
  s.kind = g.kind;
  s.min_improvement_pct = g.min_improvement_pct;
  s.max_aa_difference_pct = g.max_aa_difference_pct;
  s.same_margin_pct = g.mode == CompareMode::aa ? 0.0 : g.same_margin_pct;
  s.alpha = g.alpha;
  s.min_blocks = budget.min_blocks;
  s.layouts = g.mode == CompareMode::aa ? 1 : g.layouts;
  return s;
}

namespace {

std::string verdict_reason(const stats::EffectEstimate& e, const GateConfig& g, stats::Verdict v) {
  const std::string ci = fmt::format("{:+.2f}% [{:+.2f}%, {:+.2f}%] at {:.2f}% confidence over {} blocks",
                                     e.improvement_pct, e.ci_low_pct, e.ci_high_pct, 100 * e.confidence, e.blocks);
  if (g.mode == CompareMode::aa) {
    switch (v) {
      case stats::Verdict::pass:
        return fmt::format("A' vs A {}: within +-{}%", ci, g.max_aa_difference_pct);
      case stats::Verdict::fail:
        return fmt::format("A' vs A {}: outside +-{}%", ci, g.max_aa_difference_pct);
      case stats::Verdict::inconclusive:
        return fmt::format("A' vs A {}: interval not resolved within +-{}% (MDE {:.2f}%)", ci, g.max_aa_difference_pct,
                           e.mde_pct);
      case stats::Verdict::same:
      case stats::Verdict::invalid:
      case stats::Verdict::refused:
      case stats::Verdict::interrupted:
        break;
    }
  }
  if (g.kind == stats::GateKind::point) {
    return fmt::format("improvement {} ({} the point gate >= {}%)", ci, v == stats::Verdict::pass ? "passes" : "fails",
                       g.min_improvement_pct);
  }
  switch (v) {
    case stats::Verdict::pass:
      return fmt::format("improvement {}: whole interval >= {}%", ci, g.min_improvement_pct);
    case stats::Verdict::fail:
      return fmt::format("improvement {}: whole interval < {}%", ci, g.min_improvement_pct);
    case stats::Verdict::same:
      return fmt::format("improvement {}: whole interval within +-{}%: no practical difference", ci, g.same_margin_pct);
    case stats::Verdict::inconclusive:
      return fmt::format("improvement {}: interval straddles {}% (MDE {:.2f}%)", ci, g.min_improvement_pct, e.mde_pct);
    case stats::Verdict::invalid:
    case stats::Verdict::refused:
    case stats::Verdict::interrupted:
      break;
  }
  throw InternalError(fmt::format("verdict_reason: a gate never answers {}", stats::to_string(v)));
}

// The decision procedure verify replays (stats/sequential.h), charged this workload's A/A bias if any.
stats::SequentialGate workload_gate(const GateConfig& gate, const Budget& budget, const std::string& workload) {
  stats::SequentialGate sg = sequential_gate(gate, budget);
  if (const auto bias = gate.aa_bias_log.find(workload); bias != gate.aa_bias_log.end() && !sg.aa) {
    sg.aa_bias_log = bias->second;
  }
  return sg;
}

// One workload's sequential comparison: its blocks, what they found so far, and the procedure that says when to
// stop (run_sequential_comparison).
class SequentialRun {
public:
  SequentialRun(const std::string& workload, const std::vector<std::string>& arm_labels, Clock& clock,
                const GateConfig& gate, const Budget& budget, uint64_t seed)
      : m_labels(arm_labels),
        m_clock(clock),
        m_gate(gate),
        m_budget(budget),
        m_sg(workload_gate(gate, budget, workload)),
        m_procedure(m_sg, seed),
        m_order_rng(seed),
        m_start(clock.seconds()) {
    m_res.name = workload;
    m_res.seed = seed;
    m_res.aa_bias_log = m_sg.aa_bias_log;
  }

  WorkloadResult run(ArmRunner& runner, std::vector<Sample>& samples_out, const ProgressSink& progress) {
    // Block 0's floor: the pilot's calls of the reference arm, when compare ran one (record/samples.h).
    std::vector<const Sample*> pilot;
    for (const Sample& s : samples_out) {
      if (s.workload == m_res.name && s.block < 0 && s.arm == m_labels[0]) pilot.push_back(&s);
    }
    m_floor = block_floor(pilot);
    while (!budget_spent()) {
      const int block = static_cast<int>(m_res.blocks);
      // A fresh random order per block: neither arm always goes first (RMIT); over blocks this balances AB and BA.
      size_t order[2] = {0, 1};
      if (m_order_rng.next() & 1) std::swap(order[0], order[1]);
      const bool long_visits = stats::next_block_long(block, m_aging);
      ArmBlock measured = runner.block(m_res.name, order, block, long_visits);
      charge_beyond_floor(measured);
      // Kept the moment the block is over: an interruption or a failure in the next block loses none of it.
      samples_out.insert(samples_out.end(), measured.samples.begin(), measured.samples.end());
      for (const Sample& s : measured.samples) m_res.timed_samples += !s.warmup;
      if (!measured.valid()) return failed(measured, order, block);
      count(measured, long_visits);
      const bool stop = look(progress);
      // An arm found to age settles the comparison (INVALID, in finish): no further block could undo it. A
      // suspicion outlives a decision: the blocks it asks for (long ones) run while the budget lasts; the decision
      // stands.
      if (m_aging.ages || (stop && !m_aging.suspected)) break;
    }
    return finish();
  }

private:
  bool budget_spent() {
    const double elapsed = m_clock.seconds() - m_start;
    if (m_res.blocks >= m_budget.max_blocks) {
      m_res.stopped_by_budget = true;
      return true;
    }
    // Start a block only if one more of the average length still fits in the budget; --repetitions is a floor the
    // budget cannot cut (a verdict from fewer blocks than asked for would be a surprise).
    if (m_res.blocks >= m_budget.min_blocks &&
        elapsed + elapsed / static_cast<double>(m_res.blocks) > m_budget.max_seconds) {
      m_res.stopped_by_budget = true;
      return true;
    }
    return false;
  }

  // Each host sample charged only the CPU outside its window beyond its block's floor: the medians over the
  // reference arm's (A's) timed calls of the block before (block 0: of the pilot), record/samples.h, block_floor;
  // docs/timing.md, "What a sample charges". From calls neither charged sample is one of, so it favours neither arm
  // (a floor from the block's own calls of A read A' 1% slower than A in an A/A on decode), and from A's only, so the
  // candidate cannot lower it (pooled with B's calls, a candidate whose wake-ups were cheap would have lowered the
  // floor and made every A call dearer).
  void charge_beyond_floor(ArmBlock& measured) {
    m_floor_pre.push_back(m_floor.pre_ns);
    m_floor_post.push_back(m_floor.post_ns);
    for (Sample& s : measured.samples) charge_beyond(s, m_floor);
    for (ArmVisit& v : measured.visits) {
      for (Sample& s : v.samples) charge_beyond(s, m_floor);
    }
    std::vector<const Sample*> reference;
    for (const Sample& s : measured.visits[0].samples) reference.push_back(&s);
    m_floor = block_floor(reference);  // the next block's
  }

  // An output failed validation during timing: no metric may come from this comparison. Which arm, why and where,
  // in the words of its first failure: what a reader of the decision needs.
  WorkloadResult failed(const ArmBlock& measured, const size_t order[2], int block) {
    std::string failed_arm;
    for (size_t pos = 0; pos < 2 && failed_arm.empty(); ++pos) {
      const ArmVisit& v = measured.visits[order[pos]];
      if (v.valid) continue;
      failed_arm = m_labels[order[pos]];
      m_res.failures.insert(m_res.failures.end(), v.failures.begin(), v.failures.end());
    }
    m_res.verdict = stats::Verdict::invalid;
    std::string why = "?";
    if (!m_res.failures.empty()) {
      const Failure& f = m_res.failures.front();
      std::string detail = f.detail.size() > 200 ? f.detail.substr(0, 200) + "..." : f.detail;
      why = fmt::format("{} at {} call {}{}{}", to_string(f.reason), f.case_name, f.call, detail.empty() ? "" : ": ",
                        detail);
    }
    m_res.reason = fmt::format("block {}: arm {} failed validation during timing ({}); no metric is reported", block,
                               failed_arm, why);
    m_res.seconds = m_clock.seconds() - m_start;
    m_res.block_floor = {cpu_watch::median_ns(m_floor_pre), cpu_watch::median_ns(m_floor_post)};
    m_res.estimate.reset();
    m_res.aging = m_aging;  // over the blocks counted, for the record
    m_res.outside = stats::outside_window_check(m_outside_visits);
    m_res.untimed = stats::untimed_check(m_untimed_visits);
    return m_res;
  }

  // A valid block counts: its visits join the steady-state, outside-window and untimed-work logs, its medians the
  // block's log ratio.
  void count(ArmBlock& measured, bool long_visits) {
    ArmVisit* visits = measured.visits;
    if (long_visits) {
      m_long_visit_log.push_back({aging_visit(visits[0]), aging_visit(visits[1])});
      m_aging = stats::aging_check(m_long_visit_log);
    }
    m_outside_visits.push_back({outside_visit(visits[0]), outside_visit(visits[1])});
    m_untimed_visits.push_back({untimed_visit(visits[0]), untimed_visit(visits[1])});
    const double a = visit_statistic(visits[0]);
    const double b = visit_statistic(visits[1]);
    m_res.block_median_a.push_back(a);
    m_res.block_median_b.push_back(b);
    m_res.log_ratios.push_back(std::log(b / a));
    ++m_res.blocks;
  }

  // The procedure sees the new block; a look it takes is recorded and reported. Whether it says stop.
  bool look(const ProgressSink& progress) {
    Progress p{m_res.name, m_res.blocks, m_clock.seconds() - m_start, m_budget.max_seconds, {}, {}, {}};
    const size_t looks_before = m_procedure.looks().size();
    const bool stop = m_procedure.add(m_res.log_ratios.back());
    if (m_procedure.looks().size() > looks_before) {
      const stats::SequentialLook& l = m_procedure.looks().back();
      m_res.looks.push_back({l.blocks, l.confidence, l.estimate.improvement_pct, l.estimate.ci_low_pct,
                             l.estimate.ci_high_pct, l.verdict});
      p.estimate_pct = l.estimate.improvement_pct;
      p.ci_low_pct = l.estimate.ci_low_pct;
      p.ci_high_pct = l.estimate.ci_high_pct;
    }
    if (progress) progress(p);
    return stop;
  }

  WorkloadResult finish() {
    m_res.seconds = m_clock.seconds() - m_start;
    m_res.block_floor = {cpu_watch::median_ns(m_floor_pre), cpu_watch::median_ns(m_floor_post)};
    // An arm whose speed changes as its process ages is judged on no part of its life: INVALID, no metric.
    m_res.aging = m_aging;
    m_res.outside = stats::outside_window_check(m_outside_visits);
    m_res.untimed = stats::untimed_check(m_untimed_visits);
    if (m_res.aging.ages || m_res.outside.moved || m_res.untimed.untimed_work) {
      m_res.verdict = stats::Verdict::invalid;
      m_res.reason = (m_res.aging.ages      ? stats::describe_aging(m_res.aging, m_labels[1])
                      : m_res.outside.moved ? stats::describe_outside(m_res.outside, m_labels[1])
                                            : stats::describe_untimed(m_res.untimed, m_labels[1])) +
                     "; no metric is reported";
      m_res.estimate.reset();
      return m_res;
    }
    const size_t looks_before = m_procedure.looks().size();
    const std::optional<stats::SequentialLook> outcome = m_procedure.finish();
    if (!outcome) {
      m_res.verdict = stats::Verdict::inconclusive;
      m_res.reason = fmt::format("only {} block(s) fit in the budget of {:.0f} s; no interval can be formed",
                                 m_res.blocks, m_budget.max_seconds);
      m_res.estimate.reset();
      return m_res;
    }
    if (m_procedure.looks().size() > looks_before) {  // the final analysis
      m_res.looks.push_back({outcome->blocks, outcome->confidence, outcome->estimate.improvement_pct,
                             outcome->estimate.ci_low_pct, outcome->estimate.ci_high_pct, outcome->verdict});
    }
    decided(*outcome);
    return m_res;
  }

  // The final analysis's verdict, unless an aging suspicion the budget could not settle holds it back, and its words.
  void decided(const stats::SequentialLook& outcome) {
    m_res.estimate = outcome.estimate;
    const bool aa = m_gate.mode == CompareMode::aa;
    const stats::Verdict decided = stats::aging_unresolved(outcome.verdict, m_res.aging, aa);
    m_res.verdict = decided;
    m_res.reason = decided == outcome.verdict
                       ? verdict_reason(*m_res.estimate, m_gate, decided)
                       : fmt::format("{}; but {}, and the budget ended before enough long visits could settle it",
                                     verdict_reason(*m_res.estimate, m_gate, outcome.verdict),
                                     stats::describe_aging(m_res.aging, m_labels[1]));
    if (const stats::LayoutFloor& floor = m_res.estimate->layout; floor.applied) {
      m_res.reason += fmt::format(
          "; the arms' builds explain part of the blocks (layout floor: +-{:.2f}% sd of the mean, {:.1f} degrees of "
          "freedom, counted in the interval), which more blocks do not narrow: more layouts (--layouts) do",
          100.0 * std::sqrt(floor.variance_log), floor.df);
    }
    if (m_res.aa_bias_log > 0.0) {
      m_res.reason += fmt::format("; charged the A/A's unsettled bias (up to x{:.4f}) it improves by at least {:+.2f}%",
                                  std::exp(m_res.aa_bias_log),
                                  stats::improvement_net_of_bias_pct(m_res.estimate->ci_low_pct, m_res.aa_bias_log));
    }
    if (m_res.stopped_by_budget && decided == stats::Verdict::inconclusive) {
      m_res.reason += fmt::format("; budget ended after {:.1f} s", m_res.seconds);
    }
    if (aa) {
      m_res.faster_verdict =
          stats::improvement_verdict(*m_res.estimate, m_gate.min_improvement_pct, stats::GateKind::ci);
    }
  }

  const std::vector<std::string>& m_labels;
  Clock& m_clock;
  const GateConfig& m_gate;
  const Budget& m_budget;
  WorkloadResult m_res;
  stats::SequentialGate m_sg;
  stats::SequentialProcedure m_procedure;
  stats::Xoshiro256StarStar m_order_rng;
  double m_start;
  std::vector<std::array<stats::AgingVisit, 2>> m_long_visit_log;  // the long blocks' timed calls, per arm
  stats::AgingCheck m_aging;  // their finding so far, which also says whether the next block is long
  std::vector<std::array<stats::OutsideVisit, 2>> m_outside_visits;  // every block's, with their outside times
  std::vector<std::array<stats::UntimedVisit, 2>> m_untimed_visits;  // every block's, timed and untimed calls
  cpu_watch::Floor m_floor;                                          // the next block's floor
  std::vector<int64_t> m_floor_pre, m_floor_post;                    // every block's floor
};

}  // namespace

WorkloadResult run_sequential_comparison(const std::string& workload, const std::vector<std::string>& arm_labels,
                                         ArmRunner& runner, Clock& clock, const GateConfig& gate, const Budget& budget,
                                         uint64_t seed, std::vector<Sample>& samples_out,
                                         const ProgressSink& progress) {
  if (arm_labels.size() != 2) throw InternalError("run_sequential_comparison: exactly two arms");
  return SequentialRun(workload, arm_labels, clock, gate, budget, seed).run(runner, samples_out, progress);
}

// ---- real arms ------------------------------------------------------------------------------------------------

WorkerArmRunner::WorkerArmRunner(const Task& task, std::vector<std::vector<const Artifact*>> arms,
                                 std::vector<std::string> labels, TimingOptions options)
    : m_task(task), m_arms(std::move(arms)), m_labels(std::move(labels)), m_options(options) {
  if (m_options.nonce == 0) m_options.nonce = DataSecret::draw().nonce("timing");
}

WorkerArmRunner::~WorkerArmRunner() = default;

size_t input_set_bytes(const Task& task, const Case& workload) {
  size_t bytes = 0;
  for (const TensorSpec& s : task.signature.inputs) {
    if (!s.shared) bytes += resolve_shape(s, workload).elements() * dtype_size(s.dtype);
  }
  for (const TensorSpec& s : task.signature.outputs) bytes += resolve_shape(s, workload).elements() * sizeof(double);
  return bytes;
}

size_t shared_input_bytes(const Task& task, const Case& workload) {
  size_t bytes = 0;
  for (const TensorSpec& s : task.signature.inputs) {
    if (s.shared) bytes += resolve_shape(s, workload).elements() * dtype_size(s.dtype);
  }
  return bytes;
}

std::string pool_misfit(const Task& task, const Case& workload, uint64_t machine_bytes) {
  const size_t per_set = input_set_bytes(task, workload);
  const size_t shared = shared_input_bytes(task, workload);
  const uint64_t least = uint64_t{WorkerArmRunner::k_min_pool_sets} * per_set + shared;
  if (least <= machine_bytes / 2) return "";
  constexpr double mib = 1024.0 * 1024.0;
  return fmt::format(
      "{}: workload '{}': an input set takes {:.1f} MiB (its inputs, and its expected outputs as doubles){}, and "
      "timing keeps at least {} sets at once ({:.1f} MiB), more than half of this machine's {:.1f} MiB of memory; "
      "time it on a larger machine, or give the workload smaller dims",
      task.manifest.string(), workload.name, static_cast<double>(per_set) / mib,
      shared == 0 ? std::string()
                  : fmt::format(", beside {:.1f} MiB of shared inputs, one copy for the pool",
                                static_cast<double>(shared) / mib),
      WorkerArmRunner::k_min_pool_sets, static_cast<double>(least) / mib, static_cast<double>(machine_bytes) / mib);
}

std::vector<Sample> WorkerArmRunner::prepare(const Case& workload, uint64_t workload_seed) {
  m_case = &workload;
  m_workload_seed = workload_seed;
  m_pool.clear();
  // No input content repeats within a worker's lifetime: each call of a visit (warm-ups included) runs on a set of
  // its own, in a fresh order per visit, so no memo of any kind (by pointer, by content, by mapping state) can hit
  // inside a worker. The pool is bounded in memory (k_pool_bytes): where a workload's sets are large, visits get
  // fewer calls instead (docs/timing.md).
  const size_t bytes_per_set = input_set_bytes(m_task, workload);
  const size_t shared_bytes = shared_input_bytes(m_task, workload);
  const size_t room_bytes = k_pool_bytes > shared_bytes ? k_pool_bytes - shared_bytes : 0;
  const size_t max_sets = std::max<size_t>(room_bytes / std::max<size_t>(bytes_per_set, 1), k_min_pool_sets);
  m_warmups = std::max(1, m_options.warmups);
  auto grow_pool = [&](size_t sets) {
    if (m_pool.size() >= sets) return;
    for (InputSet& set : make_input_sets(m_task, workload, 1000 + m_pool.size(), sets - m_pool.size(), m_options.nonce,
                                         m_pool.empty() ? nullptr : m_pool.front().get())) {
      m_pool.push_back(std::make_unique<InputSet>(std::move(set)));
    }
  };
  const int room = (static_cast<int>(max_sets) - m_warmups) / (1 + k_rewarm_calls);
  auto fit = [&](int samples) { return std::max(k_min_samples_per_visit, std::min(samples, room)); };
  // The pool a block's visits draw from: a long visit's warm-ups and turns at two calls each, plus what the secret
  // extra warm-ups and re-warms may take where the memory bound leaves room (block() spends no more than this).
  // A long visit needs about three times the sets; where a set is dear to make (gemm's oracle in long double: half a
  // second a set here), the long visits get only as many more turns as the ordinary pool's own making time buys
  // again, so that the steady state costs a workload at most about twice its pool.
  auto size_pool = [&]() {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t before = m_pool.size();
    const int ordinary = m_warmups + k_extra_warmups + m_samples * (1 + k_rewarm_calls);
    grow_pool(static_cast<size_t>(std::min(ordinary, static_cast<int>(max_sets))));
    const double made = static_cast<double>(m_pool.size() - before);
    const double per_set =
        made > 0 ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / made : 0.0;
    int affordable = room;
    if (per_set > 0.0) {
      const double allowance = std::max(1.0, per_set * static_cast<double>(m_pool.size()));  // seconds
      affordable =
          static_cast<int>((static_cast<double>(m_pool.size()) + allowance / per_set - m_warmups - k_extra_warmups) /
                           (1 + k_rewarm_calls));
    }
    // Three times the turns, and never fewer than the aging test needs to count the block (stats/aging.h).
    const int wanted =
        std::max(stats::k_long_visit_factor * m_samples, 2 * static_cast<int>(stats::k_aging_min_half_calls));
    m_long_samples = std::max(m_samples, std::min({wanted, room, affordable}));
    const int plain = m_warmups + m_long_samples * (1 + k_rewarm_calls);
    const int extra = k_extra_warmups + (m_long_samples + k_extra_rewarm_odds - 1) / k_extra_rewarm_odds + 1;
    grow_pool(static_cast<size_t>(std::max(plain, std::min(plain + extra, static_cast<int>(max_sets)))));
  };
  m_samples = m_options.samples > 0 ? fit(m_options.samples) : 0;
  if (m_samples > 0) {
    size_pool();
    return {};
  }
  // Pilot: a few calls of the reference arm size the visits so each lasts ~50 ms of kernel time, between 5 and
  // 100 calls (enough calls for a stable median, few enough for many blocks in the budget).
  constexpr int k_pilot_calls = 3;
  grow_pool(static_cast<size_t>(m_warmups) + k_pilot_calls);
  ArmVisit pilot = run_visit(0, -1, 0, m_warmups, k_pilot_calls);
  if (!pilot.valid) {
    m_samples = fit(5);
  } else {
    const double t = visit_statistic(pilot) * 1e-9;
    m_samples = fit(static_cast<int>(std::clamp(std::round(0.05 / std::max(t, 1e-9)), 5.0, 100.0)));
  }
  size_pool();
  return pilot.samples;
}

ArmVisit WorkerArmRunner::visit(const std::string&, size_t arm, int block, int order_position, bool long_visit) {
  return run_visit(arm, block, order_position, m_warmups, long_visit ? m_long_samples : m_samples);
}

// A visit in progress: its worker, its layout and its order of the pool.
struct WorkerArmRunner::LiveVisit {
  ArmVisit v;
  size_t arm = 0;
  int block = 0;
  int order_position = 0;
  int warmups = 0;
  std::set<int> untimed;  // calls after the warm-ups that are not timed either: the re-warm calls of block()
  int calls = 0;          // every call of the visit
  int next = 0;           // the next call's index
  stats::VisitLayout layout;
  std::vector<size_t> order;
  std::unique_ptr<WorkerSession> session;
};

WorkerArmRunner::LiveVisit WorkerArmRunner::start_visit(size_t arm, int block, int order_position) {
  LiveVisit lv;
  lv.arm = arm;
  lv.block = block;
  lv.order_position = order_position;
  const std::vector<const Artifact*>& pool = m_arms.at(arm);
  const size_t tensors = m_task.signature.inputs.size() + m_task.signature.outputs.size();
  // The pilot (block -1) runs the reference arm's plain build at the plain layout.
  lv.layout = block < 0 ? stats::VisitLayout{0, 0, std::vector<uint32_t>(tensors, 0)}
                        : stats::visit_layout(m_workload_seed, arm, block, static_cast<int>(pool.size()), tensors,
                                              layout_offsets(m_options.backend, static_cast<int>(pool.size())));
  SessionOptions so;
  so.backend = m_options.backend;
  so.timeout = m_options.timeout;
  so.cold = m_options.cold;
  so.poison_seed = mix_seed(m_options.nonce, ++m_visits);
  so.stack_offset = lv.layout.stack_offset;
  so.tensor_offsets = lv.layout.tensor_offsets;
  so.twins_made_between_visits = true;
  lv.session = std::make_unique<WorkerSession>(m_task, *pool.at(static_cast<size_t>(lv.layout.variant)), so);
  // This visit's order of the pool: every call on a set of its own.
  lv.order.resize(m_pool.size());
  for (size_t i = 0; i < lv.order.size(); ++i) lv.order[i] = i;
  Rng shuffle(mix_seed(m_options.nonce, m_visits * 0x9E37 + 0x0DE5));
  for (size_t i = lv.order.size(); i > 1; --i) std::swap(lv.order[i - 1], lv.order[shuffle.next() % i]);
  LoadOutcome lo = lv.session->start();
  if (!lo.ok) {
    lv.v.valid = false;
    lv.v.failures.push_back({m_case->name, -1, "loads", lo.reason, lo.detail});
    return lv;
  }
  lv.v.pid = lv.session->pid();
  return lv;
}

bool WorkerArmRunner::call_next(LiveVisit& lv, std::vector<Sample>& in_order) {
  if (!lv.v.valid) return false;
  if (lv.order.size() < static_cast<size_t>(lv.calls)) {
    throw InternalError("compare: the input pool is smaller than a visit");
  }
  const int i = lv.next++;
  const size_t set = lv.order[static_cast<size_t>(i)];
  CallResult r = lv.session->call(*m_pool[set], i, CallMode::timing);
  Sample s;
  s.workload = m_case->name;
  s.block = lv.block;
  s.arm = m_labels.at(lv.arm);
  s.order_position = lv.order_position;
  s.pid = lv.v.pid;
  s.sample_index = i;
  s.warmup = i < lv.warmups || lv.untimed.count(i) != 0;
  s.input_set = static_cast<int>(set);
  s.ns = r.ns;
  s.device_ns = r.device_ns;
  s.output_valid = r.valid();
  s.layout = lv.layout.variant;
  s.stack_offset = lv.layout.stack_offset;
  s.tensor_offsets = lv.layout.tensor_offsets;
  s.pre_cpu_ns = r.pre_cpu_ns;
  s.post_cpu_ns = r.post_cpu_ns;
  s.window_ns = r.window_ns;
  s.gap_cpu_ns = r.gap_cpu_ns;
  s.outside_cpu_ns = r.outside_cpu_ns;
  s.outside_wall_ns = r.outside_wall_ns;
  lv.v.samples.push_back(s);
  in_order.push_back(s);
  if (!r.valid()) {
    lv.v.valid = false;
    lv.v.failures.insert(lv.v.failures.end(), r.failures.begin(), r.failures.end());
  }
  return lv.v.valid;
}

void WorkerArmRunner::finish_visit(LiveVisit& lv) {
  if (!lv.session || lv.v.pid == 0) return;  // never loaded: its failure is recorded
  // The inputs the worker could reach: the slots, holding the last call's set. The pool's other sets are the
  // parent's own memory, which no worker maps (re-hashing them cost a prefill block 12 ms of its ~150).
  if (lv.v.valid) {
    CallResult r = lv.session->verify_slots(lv.calls);
    if (!r.valid()) {
      lv.v.valid = false;
      lv.v.failures.insert(lv.v.failures.end(), r.failures.begin(), r.failures.end());
    }
  }
  // The worker must also say goodbye with the right call count: a forged answer followed by _exit(0) on the last
  // call of a visit is caught here even when its reported time looks plausible.
  if (!lv.session->shutdown() && lv.v.valid) {
    lv.v.valid = false;
    const auto death = lv.session->death();
    const FailureReason reason = death ? death->reason : FailureReason::exited;
    lv.v.failures.push_back({m_case->name, lv.calls, "said_goodbye", reason,
                             death ? death->detail : "the worker did not confirm its calls at shutdown"});
  }
  const std::vector<const InputSet*> wanted = lv.session->twins_wanted();
  lv.session.reset();
  // No worker is running now (the other visit's, if any, is frozen): the twins the visit's traps wanted are made
  // here, running the oracle where it slows no timed call (SessionOptions::twins_made_between_visits).
  for (const InputSet* set : wanted) {
    if (!set->twin) set->twin = std::make_unique<InputSet>(make_twin(m_task, *set, m_twin_secret.next()));
  }
}

ArmVisit WorkerArmRunner::run_visit(size_t arm, int block, int order_position, int warmups, int samples) {
  LiveVisit lv = start_visit(arm, block, order_position);
  lv.warmups = warmups;
  lv.calls = warmups + samples;
  std::vector<Sample> in_order;
  while (lv.next < lv.calls && call_next(lv, in_order)) {
  }
  finish_visit(lv);
  return std::move(lv.v);
}

ArmBlock ArmRunner::block(const std::string& workload, const size_t order[2], int block, bool long_visits) {
  ArmBlock b;
  for (int pos = 0; pos < 2; ++pos) {
    ArmVisit v = visit(workload, order[pos], block, pos, long_visits);
    b.samples.insert(b.samples.end(), v.samples.begin(), v.samples.end());
    const bool ok = v.valid;
    b.visits[order[pos]] = std::move(v);
    if (!ok) break;
  }
  return b;
}

// Interleaved calls (docs/timing.md): the machine's speed drifts on every time scale from milliseconds to minutes
// (a shared host), and pairing calls a call apart cancels far more of that drift than pairing visits a visit apart.
// Each arm still gets a fresh worker, layout and placement per block; only one worker runs at a time.
ArmBlock WorkerArmRunner::block(const std::string&, const size_t order[2], int block, bool long_visits) {
  ArmBlock b;
  LiveVisit live[2];
  auto fail = [&](LiveVisit& lv, const char* assertion) {
    if (!lv.v.valid) return;
    lv.v.valid = false;
    const auto death = lv.session->death();
    lv.v.failures.push_back({m_case->name, lv.next, assertion, death ? death->reason : FailureReason::exited,
                             death ? death->detail : "the worker ended between calls"});
  };
  auto finish = [&]() {
    for (int pos = 0; pos < 2; ++pos) finish_visit(live[pos]);
    for (int pos = 0; pos < 2; ++pos) b.visits[order[pos]] = std::move(live[pos].v);
    return b;
  };
  // Each visit's calls, drawn from a secret: its warm-ups, and its turns' re-warm calls (one, sometimes two), within
  // the pool; a long block's visits have m_long_samples turns (stats/aging.h). Both arms get the same number of turns.
  const int turns = long_visits ? m_long_samples : m_samples;
  std::vector<int> rewarms[2];
  for (int pos = 0; pos < 2; ++pos) {
    const int pool = static_cast<int>(m_pool.size());
    int warmups = m_warmups;
    for (int i = 0; i < k_extra_warmups; ++i) {
      if ((m_pattern_secret.next() & 1) != 0 && warmups + 1 + turns * (1 + k_rewarm_calls) <= pool) ++warmups;
    }
    int calls = warmups;
    for (int t = 0; t < turns; ++t) {
      const int left = turns - t - 1;  // turns after this one, each needing its plain calls
      const bool extra =
          m_pattern_secret.next() % k_extra_rewarm_odds == 0 && calls + 2 + (1 + k_rewarm_calls) * (left + 1) <= pool;
      rewarms[pos].push_back(k_rewarm_calls + (extra ? 1 : 0));
      calls += rewarms[pos].back() + 1;
    }
    live[pos] = start_visit(order[pos], block, pos);
    live[pos].warmups = warmups;
    live[pos].calls = calls;
    if (!live[pos].v.valid) return finish();
    // Frozen while the other worker starts and runs.
    if (!live[pos].session->freeze()) {
      fail(live[pos], "stops_between_calls");
      return finish();
    }
  }
  int running = -1;  // the position whose worker is thawed, -1 for none
  auto call = [&](int pos) {
    if (running >= 0 && running != pos && !live[running].session->freeze()) {
      fail(live[running], "stops_between_calls");
      return false;
    }
    running = pos;
    return call_next(live[pos], b.samples);
  };
  for (int pos = 0; pos < 2; ++pos) {
    for (int i = 0; i < live[pos].warmups; ++i) {
      if (!call(pos)) return finish();
    }
  }
  // Each pair's order is a coin flip from the workload's seed: over a block's pairs both arms go first equally
  // often in expectation, and the sequence is recorded by the order of the rows in samples.csv.
  Rng pairs(mix_seed(m_workload_seed, 0x9A175EEDull + static_cast<uint64_t>(block)));
  // A turn: the arm's re-warm call (untimed), then its timed call, so that whatever the other arm's call left in
  // the core's caches and TLB is paid by an untimed call of this arm (k_rewarm_calls).
  auto turn = [&](int pos, int t) {
    for (int r = 0; r < rewarms[pos][static_cast<size_t>(t)]; ++r) {
      live[pos].untimed.insert(live[pos].next);
      if (!call(pos)) return false;
    }
    return call(pos);
  };
  for (int i = 0; i < turns; ++i) {
    const int first = static_cast<int>(pairs.next() & 1);
    if (!turn(first, i) || !turn(1 - first, i)) return finish();
  }
  return finish();
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
  // A workload with no practical difference settles that the candidate is not kept, whatever the others say.
  if (any(Verdict::same)) return Verdict::same;
  const bool all_pass = std::all_of(workloads.begin(), workloads.end(),
                                    [](const WorkloadResult& w) { return w.verdict == Verdict::pass; });
  return all_pass ? Verdict::pass : Verdict::inconclusive;
}

nlohmann::json to_json(const stats::AgingCheck& a) {
  return {{"long_blocks", a.long_blocks},
          {"aging_blocks", a.aging_blocks},
          {"drift_a_log", a.drift_a_log},
          {"drift_other_log", a.drift_other_log},
          {"difference_log", a.difference_log},
          {"ages", a.ages},
          {"suspected", a.suspected}};
}

nlohmann::json to_json(const stats::OutsideCheck& o) {
  return {{"blocks", o.blocks},
          {"excess_blocks", o.excess_blocks},
          {"excess_ns", o.excess_ns},
          {"gain_ns", o.gain_ns},
          {"moved", o.moved}};
}

nlohmann::json to_json(const stats::UntimedCheck& u) {
  return {{"blocks", u.blocks},
          {"excess_blocks", u.excess_blocks},
          {"ratio_a", u.ratio_a},
          {"ratio_other", u.ratio_other},
          {"untimed_work", u.untimed_work}};
}

nlohmann::json to_json(const stats::LayoutFloor& f) {
  nlohmann::json arms = nlohmann::json::array();
  for (const stats::BuildEffect& e : f.arm) {
    arms.push_back({{"builds", e.groups},
                    {"p_value", e.p_value},
                    {"variance_log", e.variance},
                    {"variance_df", e.variance_df},
                    {"weight", e.weight}});
  }
  return {{"applied", f.applied}, {"variance_log", f.variance_log}, {"df", f.df}, {"arms", arms}};
}

nlohmann::json to_json(const WorkloadResult& w) {
  nlohmann::json j = {{"name", w.name},
                      {"verdict", w.verdict},
                      {"reason", w.reason},
                      {"blocks", w.blocks},
                      {"samples", w.timed_samples},
                      {"samples_per_visit", w.samples_per_visit},
                      {"long_samples_per_visit", w.long_samples_per_visit},
                      {"seed", w.seed},
                      {"warmups_per_visit", w.warmups_per_visit},
                      {"block_floor_ns", {{"pre", w.block_floor.pre_ns}, {"post", w.block_floor.post_ns}}},
                      {"seconds", w.seconds},
                      {"stopped_by_budget", w.stopped_by_budget},
                      {"aa_bias_log", w.aa_bias_log},
                      {"aging", to_json(w.aging)},
                      {"outside_window", to_json(w.outside)},
                      {"untimed", to_json(w.untimed)}};
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
    j["layout_floor"] = to_json(e.layout);
  } else {
    for (const char* k : {"improvement_pct", "ci_low_pct", "ci_high_pct", "mde_pct"}) j[k] = nullptr;
  }
  if (w.faster_verdict) j["faster_verdict"] = *w.faster_verdict;
  nlohmann::json looks = nlohmann::json::array();
  for (const Look& l : w.looks) {
    looks.push_back({{"blocks", l.blocks},
                     {"confidence", l.confidence},
                     {"improvement_pct", l.improvement_pct},
                     {"ci_low_pct", l.ci_low_pct},
                     {"ci_high_pct", l.ci_high_pct},
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
        layouts.push_back({{"layout", v},
                           {"pad_bytes", layout_pad_bytes(r.arm_layouts[i][v].layout_variant)},
                           {"artifact_sha256", r.arm_layouts[i][v].artifact_sha256}});
      }
    }
    arms.push_back({{"label", r.arm_labels[i]},
                    {"path", r.arm_paths[i]},
                    {"identity", to_json(r.arm_identities[i])},
                    {"layouts", layouts}});
  }
  nlohmann::json workloads = nlohmann::json::array();
  for (const WorkloadResult& w : r.workloads) workloads.push_back(to_json(w));
  size_t samples = 0;
  for (const Sample& s : r.samples) samples += !s.warmup && s.block >= 0;
  nlohmann::json j = {
      {"schema", k_compare_schema},
      {"schema_version", k_compare_schema_version},
      {"mode", r.mode == CompareMode::aa ? "aa" : "ab"},
      {"gate",
       {{"kind", r.gate.kind == stats::GateKind::ci ? "ci" : "point"},
        {"min_improvement_pct", r.gate.min_improvement_pct},
        {"max_aa_difference_pct", r.gate.max_aa_difference_pct},
        {"same_margin_pct", r.gate.same_margin_pct},
        {"alpha", r.gate.alpha},
        {"stopping",
         "alpha spending, interim alpha_k = alpha / 2 * 6 / (pi^2 k^2), geometric looks x1.5; the final "
         "analysis spends the rest"},
        {"interleaving",
         "per block: a worker per arm, warm-ups, then pairs of turns (a coin flip "
         "orders each pair), a turn being an untimed re-warm call and a timed call"}}},
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
  medians.reserve(visits.size());
  for (const auto& [block, v] : visits) medians.emplace_back(v.first, stats::median(v.second));
  return stats::layout_sensitivity(medians, layouts, seed);
}

bool layout_offsets(BackendKind backend, int layouts) { return !is_device(backend) && layouts > 1; }

int default_layouts(BackendKind backend) {
  return !is_device(backend) ? stats::k_cpu_layouts : stats::k_device_layouts;
}

nlohmann::json to_json(const stats::LayoutSensitivity& l) {
  nlohmann::json j = {
      {"available", l.available}, {"variant_median_ns", l.variant_median_ns}, {"variant_visits", l.variant_visits}};
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
