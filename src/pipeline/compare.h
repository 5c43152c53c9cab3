// `kwb compare`: randomized interleaved blocks (RMIT, Abedi & Brecht ICPE 2017). Each block gives every arm a visit
// in a fresh worker process (so layout and ASLR are sampled, not frozen: Mytkowicz et al. ASPLOS 2009; Kalibera &
// Jones ISMM 2013 treat the process as the replicate), the workers started in a fresh random order and their calls
// taking turns, one worker running at a time (docs/timing.md, "The protocol"). The effect is estimated from
// per-block log ratios of per-arm medians and judged by a gate at alpha-spending looks. docs/timing.md explains
// every choice.
#pragma once

#include "builder/builder.h"
#include "pipeline/defaults.h"
#include "record/samples.h"
#include "record/schema.h"
#include "session/worker_session.h"
#include "stats/aging.h"
#include "stats/effect.h"
#include "stats/gate.h"
#include "stats/layout.h"
#include "stats/outside_window.h"
#include "stats/sequential.h"
#include "task/task.h"
#include "util/timing_lock.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kwb {

enum class CompareMode { ab, aa };

// One timing sample exactly as measured; every one is kept (warm-ups and pilot calls too, marked as such).
// One arm's visit in one block: a fresh worker, warm-ups, timed calls.
struct ArmVisit {
  int64_t pid = 0;
  std::vector<Sample> samples;
  bool valid = true;  // every call answered and every output passed validation
  std::vector<Failure> failures;
};

// One block: a visit of each arm. `samples` holds both visits' samples in the order the calls ran.
struct ArmBlock {
  ArmVisit visits[2];  // by arm index
  std::vector<Sample> samples;
  bool valid() const { return visits[0].valid && visits[1].valid; }
};

// The seam between the protocol and the processes it runs: tests substitute synthetic arms.
class ArmRunner {
public:
  virtual ~ArmRunner() = default;
  // `long_visit`: one of the steady state's long visits (stats/aging.h), which the comparison schedules.
  virtual ArmVisit visit(const std::string& workload, size_t arm, int block, int order_position, bool long_visit) = 0;
  // One block, the arms started in `order`. By default one visit after the other, stopping at the first invalid
  // visit; WorkerArmRunner interleaves the two visits' calls instead (docs/timing.md, "Interleaved calls").
  virtual ArmBlock block(const std::string& workload, const size_t order[2], int block, bool long_visits);
};

// The seam for time: budgets and ETAs read this, so tests run on a fake clock.
class Clock {
public:
  virtual ~Clock() = default;
  virtual double seconds() = 0;  // monotonic
};
class SteadyClock final : public Clock {
public:
  double seconds() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

// Defaults: pipeline/defaults.h.
struct GateConfig {
  CompareMode mode = CompareMode::ab;
  stats::GateKind kind = defaults::k_gate;
  double min_improvement_pct = defaults::k_min_improvement_pct;
  double max_aa_difference_pct = defaults::k_max_aa_difference_pct;
  // A/B: an interval wholly within +-same_margin_pct is SAME, no practical difference (stats::ab_verdict).
  double same_margin_pct = defaults::k_same_margin_pct;
  double alpha = defaults::k_alpha;
  // A/B per workload: the bias its A/A could not rule out (record/decision.h, aa_bias_log), which a PASS must clear
  // the bar net of (stats/sequential.h). Absent: none.
  std::map<std::string, double> aa_bias_log;
  // A/B: the arms' layout pool size; above 1 the interval includes the layout floor (stats/layout_floor.h). compare
  // sets it from the pools it built; 1 (the default) for none.
  int layouts = 1;
};

struct Budget {
  size_t min_blocks = defaults::k_repetitions;  // --repetitions: the first look
  size_t max_blocks = defaults::k_max_blocks;
  double max_seconds = defaults::k_max_minutes * 60.0;  // per workload comparison
};

struct Look {
  size_t blocks = 0;
  double confidence = 0.0;
  double improvement_pct = 0.0, ci_low_pct = 0.0, ci_high_pct = 0.0;
  stats::Verdict verdict = stats::Verdict::inconclusive;
};

struct WorkloadResult {
  std::string name;
  stats::Verdict verdict = stats::Verdict::inconclusive;  // pass, fail, same (A/B), inconclusive or invalid
  std::string reason;                                     // why, for people
  std::optional<stats::EffectEstimate> estimate;          // absent when no metric may be reported (INVALID) or no data
  std::optional<stats::Verdict> faster_verdict;  // A/A only: what the improvement gate at min_improvement_pct would say
  size_t blocks = 0;
  size_t timed_samples = 0;
  int samples_per_visit = 0;
  int long_samples_per_visit = 0;  // in the long blocks (stats/aging.h)
  uint64_t seed = 0;               // block orders; the bootstrap cross-check uses seed ^ blocks
  int warmups_per_visit = 0;
  // The medians over blocks of each block's floor (record/samples.h, block_floor): what a typical call was charged
  // less, for the record; verify re-derives every block's from samples.csv.
  cpu_watch::Floor block_floor;
  std::vector<double> block_median_a, block_median_b;  // per block, arm order A then B (or A')
  int layouts = 1;                                     // builds in each arm's layout pool
  // Per arm (A, then B or A'): how much the arm's speed depends on its layout, from the visit medians of each build.
  std::vector<stats::LayoutSensitivity> layout_sensitivity;
  std::vector<double> log_ratios;
  std::vector<Look> looks;
  double seconds = 0.0;
  bool stopped_by_budget = false;
  double aa_bias_log = 0.0;  // A/B: the A/A bias its PASS was charged (GateConfig::aa_bias_log), 0 for none
  // The long blocks' early-against-late test (stats/aging.h); `ages` makes the workload INVALID.
  stats::AgingCheck aging;
  // Device backends: the other arm's wall time outside the window against A's (stats/outside_window.h); `moved`
  // makes the workload INVALID.
  stats::OutsideCheck outside;
  // Each arm's untimed calls against its timed ones, relative to the other arm's (stats/outside_window.h).
  stats::UntimedCheck untimed;
  std::vector<Failure> failures;
};

// Progress for anything longer than a moment.
struct Progress {
  std::string workload;
  size_t blocks = 0;
  double elapsed = 0.0, budget = 0.0;
  std::optional<double> estimate_pct, ci_low_pct, ci_high_pct;
};
using ProgressSink = std::function<void(const Progress&)>;

// The sequential protocol for one workload, over any ArmRunner. arm_labels[0] is the reference (A); arm_labels[1]
// is compared against it. Samples of every visit go to `samples_out` as they are measured.
WorkloadResult run_sequential_comparison(const std::string& workload, const std::vector<std::string>& arm_labels,
                                         ArmRunner& runner, Clock& clock, const GateConfig& gate, const Budget& budget,
                                         uint64_t seed, std::vector<Sample>& samples_out,
                                         const ProgressSink& progress = {});

// The gate and first look of a comparison, as the decision procedure (stats/sequential.h) takes them.
stats::SequentialGate sequential_gate(const GateConfig& gate, const Budget& budget);

// The block statistic of one visit: the median of its timed, validated samples.
double visit_statistic(const ArmVisit& visit);
// A visit's timed, validated calls as the aging test takes them (call index, ns).
stats::AgingVisit aging_visit(const ArmVisit& visit);
// A visit's timed, validated calls with the wall time outside their windows (device rows only; empty on cpu).
stats::OutsideVisit outside_visit(const ArmVisit& visit);
// A visit's validated calls, timed and untimed (the pilot excluded).
stats::UntimedVisit untimed_visit(const ArmVisit& visit);

// Real arms: built implementations run in fresh kwb-worker processes on pools of sealed input sets.
struct TimingOptions {
  BackendKind backend = BackendKind::cpu;
  std::chrono::milliseconds timeout{defaults::k_timeout};
  int warmups = defaults::k_warmups;
  int samples = defaults::k_samples;  // timed calls per visit; 0: sized per workload by a pilot (docs/timing.md)
  // The timed data's nonce. 0 (the default): WorkerArmRunner draws one from a fresh DataSecret, so that no option
  // and no seed a candidate could know chooses the data (util/data_secret.h); validate passes its own.
  uint64_t nonce = 0;
  bool cold = defaults::k_cold;  // flush caches before every timed call, outside the timer (docs/timing.md)
};

// What one input set of `workload` holds in the parent: its inputs, and its expected outputs as doubles (the
// oracle's). Timing keeps a pool of such sets (WorkerArmRunner::k_pool_bytes, at least k_min_pool_sets of them).
// Inputs declared `shared` are one buffer for the whole pool: not in a set's bytes, but in shared_input_bytes.
size_t input_set_bytes(const Task& task, const Case& workload);
size_t shared_input_bytes(const Task& task, const Case& workload);

// Why timing `workload` cannot fit a machine of `machine_bytes` of memory ("" when it can): its smallest pool
// (k_min_pool_sets sets) would take more than half of it. The message gives the figures and the ways out.
std::string pool_misfit(const Task& task, const Case& workload, uint64_t machine_bytes);

class WorkerArmRunner final : public ArmRunner {
public:
  // Each arm is a layout pool: index 0 the plain build (the one checked), then the padded builds. A visit runs the
  // build, stack offset and tensor offsets stats::visit_layout draws for it from the workload's seed.
  // The input pool of one workload holds at most this many bytes (inputs plus expected outputs); a visit needs one
  // set per call.
  static constexpr size_t k_pool_bytes = size_t{4} << 30;
  static constexpr size_t k_min_pool_sets = 6;
  static constexpr int k_min_samples_per_visit = 3;
  // In an interleaved block every timed call follows an untimed call of its own worker (block()).
  static constexpr int k_rewarm_calls = 1;
  // Calls that look alike (docs/timing.md, "Calls that look alike"): each visit draws, from a secret, up to this many
  // warm-ups beyond --warmups, and each turn a second re-warm call with probability 1/k_extra_rewarm_odds, while its
  // share of the pool lasts; so no call index tells a worker whether a call is timed.
  static constexpr int k_extra_warmups = 2;
  static constexpr int k_extra_rewarm_odds = 3;
  WorkerArmRunner(const Task& task, std::vector<std::vector<const Artifact*>> arms, std::vector<std::string> labels,
                  TimingOptions options);
  ~WorkerArmRunner() override;
  // Builds the input-set pool for a workload and runs the pilot (its samples are returned, marked block -1).
  // `workload_seed` draws every visit's layout.
  std::vector<Sample> prepare(const Case& workload, uint64_t workload_seed);
  ArmVisit visit(const std::string& workload, size_t arm, int block, int order_position, bool long_visit) override;
  // Both arms' workers live at once: warm-ups of each, then the timed calls in pairs, each pair's order a coin flip,
  // the worker not called frozen (WorkerSession::freeze) while the other's call runs.
  ArmBlock block(const std::string& workload, const size_t order[2], int block, bool long_visits) override;
  int samples_per_visit() const { return m_samples; }
  int long_samples_per_visit() const { return m_long_samples; }
  int warmups_per_visit() const { return m_warmups; }

private:
  struct LiveVisit;
  LiveVisit start_visit(size_t arm, int block, int order_position);
  // The visit's next call: its sample is appended to the visit and to `in_order`; false when the visit is invalid.
  bool call_next(LiveVisit& lv, std::vector<Sample>& in_order);
  void finish_visit(LiveVisit& lv);
  ArmVisit run_visit(size_t arm, int block, int order_position, int warmups, int samples);

  const Task& m_task;
  std::vector<std::vector<const Artifact*>> m_arms;
  uint64_t m_workload_seed = 0;
  std::vector<std::string> m_labels;
  TimingOptions m_options;
  const Case* m_case = nullptr;
  std::vector<std::unique_ptr<InputSet>> m_pool;
  int m_samples = 0;
  int m_long_samples = 0;  // timed calls of a long block's visits (stats/aging.h)
  int m_warmups = 0;
  uint64_t m_visits = 0;
  Rng m_twin_secret{unpredictable_seed()};     // the twins' changes (WorkerSession's trap secret, made here)
  Rng m_pattern_secret{unpredictable_seed()};  // each visit's warm-ups and re-warm calls
};

struct CompareReport {
  CompareMode mode = CompareMode::ab;
  GateConfig gate;
  Budget budget;
  TimingOptions timing;
  uint64_t seed = 0;
  std::vector<std::string> arm_labels;
  std::vector<std::string> arm_paths;
  std::vector<BuildIdentity> arm_identities;            // the plain build of each arm
  std::vector<std::vector<BuildIdentity>> arm_layouts;  // each arm's layout pool, the plain build first
  std::vector<WorkloadResult> workloads;
  std::vector<Sample> samples;
  // pass when every workload passes; else invalid > fail > inconclusive by precedence (overall_verdict); refused
  // when an arm failed its check, interrupted when kwb was.
  stats::Verdict verdict = stats::Verdict::inconclusive;
  std::vector<std::string> refused;                 // reasons timing was refused (an arm failed its check)
  nlohmann::json checks = nlohmann::json::array();  // the pre-timing check of each arm (cached by identity or not)
  // The signal's name when kwb was interrupted during the comparison (verdict INTERRUPTED): what is here was
  // measured before it, and no verdict comes from it.
  std::string interrupted;
  // This comparison's hold of the timing lock; absent when nothing was timed (an arm refused).
  std::optional<TimingLockRecord> timing_lock;
};

stats::Verdict overall_verdict(const std::vector<WorkloadResult>& workloads);

// Builds per arm in a layout pool by default: stats::k_cpu_layouts on cpu, stats::k_device_layouts on devices.
int default_layouts(BackendKind backend);
// Whether visits also draw stack and tensor offsets (cpu with more than one layout; device tensors are the
// driver's).
bool layout_offsets(BackendKind backend, int layouts);
nlohmann::json to_json(const stats::LayoutSensitivity& l);
// The layout sensitivity of one arm in one workload, from its visits' medians (verify re-derives it the same way
// from samples.csv). The seed is the workload's, xor the arm's index.
stats::LayoutSensitivity layout_sensitivity_of(const std::vector<Sample>& samples, const std::string& workload,
                                               const std::string& arm, int layouts, uint64_t seed);

nlohmann::json to_json(const stats::AgingCheck& a);
nlohmann::json to_json(const stats::OutsideCheck& o);
nlohmann::json to_json(const stats::UntimedCheck& u);
// An A/B estimate's layout floor (stats/layout_floor.h): compare.json's workloads[].layout_floor.
nlohmann::json to_json(const stats::LayoutFloor& f);
nlohmann::json to_json(const WorkloadResult& w);
nlohmann::json to_json(const CompareReport& r);

}  // namespace kwb

namespace kwb {

// Told once a comparison holds the timing lock after waiting for it: its hold (waited_s, waited_for) and the timing
// budget still ahead, in seconds, counted from that moment.
using LockWaited = std::function<void(const TimingLockRecord& hold, double budget_ahead_s)>;

// Everything `kwb compare` does after parsing: check every arm (refusing to time any that fails), then the
// sequential comparison per workload. Raw samples and the summary are rewritten into output_dir (when given) after
// every workload, so an interrupted run keeps what it measured.
struct CompareRequest {
  CompareMode mode = CompareMode::ab;
  std::vector<const Artifact*> arms;  // [A, B] or [A, A']: the plain builds, which are checked
  // Each arm's layout pool (the plain build first, then padded builds, builder.h layout_pad_bytes); empty: one
  // layout per arm. A/A passes the baseline's pool for both arms.
  std::vector<std::vector<const Artifact*>> layouts;
  // Builds the rest of each arm's layout pool once every arm has passed its check, so that a candidate refused at
  // its check costs one build, not a pool. It returns the pools (each one's plain build first, the arms' order), or
  // appends to `refused` why an arm's pool cannot be built (a padded build its code breaks), and the comparison is
  // refused. Unset: `layouts` is the whole pool.
  std::function<std::vector<std::vector<const Artifact*>>(std::vector<std::string>& refused)> build_layouts;
  std::vector<std::string> labels;     // ["A", "B"] or ["A", "A'"]
  std::vector<std::string> workloads;  // empty: every timing case
  GateConfig gate;
  Budget budget;
  TimingOptions timing;
  uint64_t seed = defaults::k_compare_seed;
  std::string output_dir;                           // empty: nothing written
  bool skip_checks = false;                         // only when the caller has already checked these exact artifacts
  bool exhaustive_checks = defaults::k_exhaustive;  // the arms' checks run every case (CheckOptions::exhaustive)
  // When kwb is interrupted during the comparison (util/interrupt.h): called with what was measured so far, verdict
  // INTERRUPTED (written to output_dir too), before the Interrupted exception goes on.
  std::function<void(const CompareReport&)> on_interrupted;
  // The timing lock (util/timing_lock.h): taken around the timed phase, after the arms' checks. `lock_what` says
  // what is timed, for whoever waits next; `lock_notice` is told when this run must wait, and by whom;
  // `lock_waited`, once it holds the lock after a wait, with its hold and the timing budget ahead from then on (every
  // workload's max_seconds). Past `lock_timeout_s` of waiting it gives up (Error lock_timeout); none: it waits.
  std::filesystem::path lock_path;  // empty: timing_lock_path()
  std::string lock_what;
  TimingLock::WaitNotice lock_notice;
  LockWaited lock_waited;
  std::optional<double> lock_timeout_s;
  // A hold of the lock the caller keeps across several comparisons (validate's A/A through A/B, so that both
  // measure the same machine with nothing timed between them); null: this comparison takes the lock and releases it.
  const TimingLock* held_lock = nullptr;
};

CompareReport run_compare(const Task& task, const CompareRequest& request, const ProgressSink& progress);

// Writes samples.csv and compare.json into `dir` atomically.
void write_compare_outputs(const std::string& dir, const CompareReport& report);

}  // namespace kwb
