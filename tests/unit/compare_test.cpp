// The sequential comparison protocol on synthetic arms and a fake clock: deterministic, no processes, no timing.
#include "pipeline/compare.h"
#include "stats/random.h"
#include "util/cpu_watch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

namespace kwb {
namespace {

class FakeClock final : public Clock {
public:
  double seconds() override { return m_now; }
  void advance(double s) { m_now += s; }

private:
  double m_now = 1000.0;
};

// Arm 0 takes `base_ns`, arm 1 takes base_ns * ratio, each sample with multiplicative noise of `noise` (sd of the
// log). Each visit costs `visit_seconds` on the fake clock.
class SyntheticRunner final : public ArmRunner {
public:
  SyntheticRunner(FakeClock& clock, double ratio, double noise, uint64_t seed)
      : m_clock(clock), m_ratio(ratio), m_noise(noise), m_rng(seed) {}

  ArmVisit visit(const std::string& workload, size_t arm, int block, int order_position, bool long_visit) override {
    m_clock.advance(visit_seconds);
    ArmVisit v;
    v.pid = 1000 + static_cast<int64_t>(++m_visits);
    const double mean = arm == 0 ? base_ns : base_ns * m_ratio;
    const int timed = long_samples > 0 && long_visit ? long_samples : samples;
    long_blocks_run += long_visit && order_position == 0;
    for (int i = 0; i < warmups + timed; ++i) {
      Sample s{workload, block, arm == 0 ? "A" : "B", order_position, v.pid, i, i < warmups, i % 2, 0, true};
      const bool ages_here = disturbed_blocks.empty() || disturbed_blocks.count(block) != 0;
      const double aged = arm == 1 && young_calls >= 0 && i >= young_calls && ages_here ? 30.0 : 1.0;
      s.ns = static_cast<int64_t>(mean * aged * std::exp(m_noise * normal()));
      if (outside_ns >= 0) {  // a device row: its uploads and read-back, arm 1's with the extra it moved there
        s.outside_wall_ns =
            static_cast<int64_t>((outside_ns + (arm == 1 ? moved_ns : 0.0)) * std::exp(m_noise * normal()));
      }
      v.samples.push_back(s);
    }
    if (fail_at_block >= 0 && block == fail_at_block && arm == 1) {
      v.valid = false;
      v.samples.back().output_valid = false;
      v.failures.push_back({workload, samples - 1, "within_tolerance:y", FailureReason::numeric_mismatch, "synthetic"});
    }
    ++produced;
    produced_samples += v.samples.size();
    order_first[block] = order_position == 0 ? arm : order_first[block];
    return v;
  }

  double base_ns = 100000.0;
  double visit_seconds = 0.05;
  int warmups = 2;
  int samples = 9;
  int fail_at_block = -1;
  int long_samples = 0;            // > 0: the visits of long blocks (stats/aging.h) have this many timed calls
  int young_calls = -1;            // >= 0: arm 1 takes 30x as long from this call index on
  std::set<int> disturbed_blocks;  // not empty: only in these blocks (a burst of the machine, not the code)
  double outside_ns = -1;          // >= 0: device rows, with this much wall time outside each window
  double moved_ns = 0;             // arm 1's extra wall time outside the window
  size_t produced = 0;
  size_t produced_samples = 0;
  size_t long_blocks_run = 0;
  std::map<int, size_t> order_first;

private:
  double normal() {
    double u1 = std::max(m_rng.uniform_open01(), 1e-300);
    double u2 = m_rng.uniform_open01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  FakeClock& m_clock;
  double m_ratio, m_noise;
  stats::Xoshiro256StarStar m_rng;
  size_t m_visits = 0;
};

struct Outcome {
  WorkloadResult result;
  std::vector<Sample> samples;
};

Outcome run(SyntheticRunner& runner, FakeClock& clock, GateConfig gate, Budget budget = {10, 100000, 60.0}) {
  Outcome r;
  r.result = run_sequential_comparison("w", {"A", "B"}, runner, clock, gate, budget, 7, r.samples);
  return r;
}

TEST(compare_test, clear_improvement_passes_at_the_first_look) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.8, 0.01, 1);  // B is 20% faster
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05});
  EXPECT_EQ(r.result.verdict, stats::Verdict::pass) << r.result.reason;
  EXPECT_EQ(r.result.blocks, 10u);
  ASSERT_TRUE(r.result.estimate);
  EXPECT_NEAR(r.result.estimate->improvement_pct, 20.0, 0.5);
  EXPECT_GE(r.result.estimate->ci_low_pct, 10.0);
  EXPECT_FALSE(r.result.stopped_by_budget);
}

// A kernel fast only for its first 12 calls: the ordinary visits (11 calls) never see it slow, the long blocks' visits
// (29 calls) do, and the comparison is INVALID with no metric, naming the arm.
TEST(compare_test, an_arm_that_slows_as_its_process_ages_is_invalid) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.5, 0.01, 11);
  runner.long_samples = 27;
  runner.young_calls = 12;
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05});
  EXPECT_EQ(r.result.verdict, stats::Verdict::invalid) << r.result.reason;
  EXPECT_FALSE(r.result.estimate.has_value());
  EXPECT_TRUE(r.result.aging.ages);
  // Block 1 (long by the schedule) trips; the suspicion makes blocks 2 and 3 long, both trip, and the comparison
  // stops there with k_aging_min_trips long blocks, as it would at a decision.
  EXPECT_EQ(r.result.aging.long_blocks, 3u);
  EXPECT_EQ(r.result.aging.aging_blocks, 3u);
  EXPECT_EQ(runner.long_blocks_run, 3u);
  EXPECT_EQ(r.result.blocks, 4u);
  EXPECT_NE(r.result.reason.find("arm B's speed changes as its process ages"), std::string::npos) << r.result.reason;
  // Its control, young forever, passes with the same visits; only the schedule's blocks (1, 5, 9) are long.
  FakeClock clock2;
  SyntheticRunner control(clock2, 0.5, 0.01, 11);
  control.long_samples = 27;
  Outcome c = run(control, clock2, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05});
  EXPECT_EQ(c.result.verdict, stats::Verdict::pass) << c.result.reason;
  EXPECT_FALSE(c.result.aging.ages);
  EXPECT_FALSE(c.result.aging.suspected);
  EXPECT_EQ(control.long_blocks_run, 3u);
  EXPECT_EQ(c.result.blocks, 10u);
}

// Long visits of 27 timed calls in which arm 1's calls from index 20 on (the late half, not the most of the visit) are
// 30x slower in `blocks` only: a burst of the machine, not the code.
void burst(SyntheticRunner& runner, std::set<int> blocks) {
  runner.long_samples = 27;
  runner.young_calls = 20;
  runner.disturbed_blocks = std::move(blocks);
}

// A burst of the machine that slows arm B's late calls in one long visit (block 1) is not the code: the next block is
// long as well, the burst does not recur, and the comparison passes on the schedule's blocks.
TEST(compare_test, a_burst_in_one_long_visit_is_followed_up_and_dismissed) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.5, 0.01, 13);
  burst(runner, {1});
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05});
  EXPECT_EQ(r.result.verdict, stats::Verdict::pass) << r.result.reason;
  EXPECT_FALSE(r.result.aging.ages);
  EXPECT_FALSE(r.result.aging.suspected);
  EXPECT_EQ(r.result.aging.aging_blocks, 1u);
  // Blocks 1 (tripped) and 2 (the follow-up), then 5 and 9 by the schedule.
  EXPECT_EQ(r.result.aging.long_blocks, 4u);
  EXPECT_EQ(runner.long_blocks_run, 4u);
}

// A burst in the budget's last long blocks leaves the suspicion unresolved: the comparison that would have passed
// reads INCONCLUSIVE, keeps its metric and says why; it never reads INVALID on so little.
TEST(compare_test, a_suspicion_the_budget_cannot_settle_is_inconclusive_not_invalid) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.5, 0.01, 14);
  burst(runner, {1, 2});
  // Three blocks fit (0.05 s a visit, 0.1 s a block: the fourth would end past 0.35 s).
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05}, {2, 100000, 0.35});
  EXPECT_EQ(r.result.blocks, 3u);
  EXPECT_FALSE(r.result.aging.ages);
  EXPECT_TRUE(r.result.aging.suspected);
  EXPECT_EQ(r.result.verdict, stats::Verdict::inconclusive) << r.result.reason;
  ASSERT_TRUE(r.result.estimate);
  EXPECT_NE(r.result.reason.find("arm B's speed may change as its process ages"), std::string::npos) << r.result.reason;
  // An A/A's calibration is about the machine: the same suspicion leaves its PASS standing.
  FakeClock clock2;
  SyntheticRunner aa(clock2, 1.0, 0.01, 14);
  burst(aa, {1, 2});
  Outcome a = run(aa, clock2, {CompareMode::aa, stats::GateKind::ci, 0.0, 25.0, 0.05}, {2, 100000, 0.35});
  EXPECT_TRUE(a.result.aging.suspected);
  EXPECT_EQ(a.result.verdict, stats::Verdict::pass) << a.result.reason;
}

// On a device backend, a gain paid for by work moved into the uploads before go: B reads 50% faster inside the window
// and spends 40 us of its 50 us gain outside it. INVALID, no metric; the same gain with the same uploads passes.
TEST(compare_test, a_gain_paid_for_outside_the_window_is_invalid) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.5, 0.01, 12);
  runner.outside_ns = 20000.0;
  runner.moved_ns = 40000.0;
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05});
  EXPECT_EQ(r.result.verdict, stats::Verdict::invalid) << r.result.reason;
  EXPECT_FALSE(r.result.estimate.has_value());
  EXPECT_TRUE(r.result.outside.moved);
  EXPECT_NE(r.result.reason.find("work_outside_window"), std::string::npos) << r.result.reason;
  FakeClock clock2;
  SyntheticRunner honest(clock2, 0.5, 0.01, 12);
  honest.outside_ns = 20000.0;
  Outcome h = run(honest, clock2, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05});
  EXPECT_EQ(h.result.verdict, stats::Verdict::pass) << h.result.reason;
  EXPECT_FALSE(h.result.outside.moved);
  EXPECT_EQ(h.result.outside.blocks, h.result.blocks);
}

TEST(compare_test, improvement_below_the_bar_fails) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.8, 0.01, 2);
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 30.0, 1.0, 0.05});
  EXPECT_EQ(r.result.verdict, stats::Verdict::fail) << r.result.reason;
  EXPECT_LT(r.result.estimate->ci_high_pct, 30.0);
}

TEST(compare_test, effect_at_the_bar_is_inconclusive_when_the_budget_ends) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.9, 0.02, 3);  // exactly 10% faster: no interval can clear or miss 10%
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05}, {10, 100000, 5.0});
  EXPECT_EQ(r.result.verdict, stats::Verdict::inconclusive) << r.result.reason;
  EXPECT_TRUE(r.result.stopped_by_budget);
  EXPECT_LE(clock.seconds() - 1000.0, 5.0 + 1e-9);  // never starts a block that cannot finish in the budget
  EXPECT_NE(r.result.reason.find("MDE"), std::string::npos);
  EXPECT_GT(r.result.estimate->mde_pct, 0.0);
}

// Charged an unsettled A/A's bias (validate's A/B), a PASS must clear the bar net of it: B is 16% faster, which
// clears 10% at the first look, but not once a bias of up to 5% is charged on a noisy first look; the comparison
// keeps timing until the interval's lower end, less the bias, clears the bar, and records what it was charged.
TEST(compare_test, a_pass_charged_an_aa_bias_clears_the_bar_net_of_it) {
  const double bias = std::log(1.05);
  FakeClock plain_clock, charged_clock;
  SyntheticRunner plain(plain_clock, 0.84, 0.06, 5), charged(charged_clock, 0.84, 0.06, 5);
  GateConfig gate{CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05};
  const Outcome without = run(plain, plain_clock, gate);
  gate.aa_bias_log["w"] = bias;
  const Outcome with = run(charged, charged_clock, gate);
  ASSERT_EQ(without.result.verdict, stats::Verdict::pass) << without.result.reason;
  EXPECT_DOUBLE_EQ(without.result.aa_bias_log, 0.0);
  ASSERT_EQ(with.result.verdict, stats::Verdict::pass) << with.result.reason;
  EXPECT_GT(with.result.blocks, without.result.blocks);
  EXPECT_DOUBLE_EQ(with.result.aa_bias_log, bias);
  EXPECT_GE(stats::improvement_net_of_bias_pct(with.result.estimate->ci_low_pct, bias), 10.0);
  EXPECT_NE(with.result.reason.find("charged the A/A's unsettled bias"), std::string::npos) << with.result.reason;
  // A FAIL needs no charge: the bar is missed however the harness leans.
  FakeClock slow_clock;
  SyntheticRunner slow(slow_clock, 0.95, 0.01, 6);
  EXPECT_EQ(run(slow, slow_clock, gate).result.verdict, stats::Verdict::fail);
  // An A/A workload is never charged.
  FakeClock aa_clock;
  SyntheticRunner same(aa_clock, 1.0, 0.01, 7);
  GateConfig aa_gate{CompareMode::aa, stats::GateKind::ci, 10.0, 5.0, 0.05};
  aa_gate.aa_bias_log["w"] = bias;
  EXPECT_DOUBLE_EQ(run(same, aa_clock, aa_gate).result.aa_bias_log, 0.0);
}

TEST(compare_test, every_sample_is_kept_including_warmups) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.8, 0.01, 4);
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05});
  EXPECT_EQ(r.samples.size(), runner.produced_samples);
  EXPECT_EQ(r.result.timed_samples, runner.produced * static_cast<size_t>(runner.samples));
  size_t warm = 0;
  for (const Sample& s : r.samples) warm += s.warmup;
  EXPECT_EQ(warm, runner.produced * static_cast<size_t>(runner.warmups));
  EXPECT_EQ(r.result.log_ratios.size(), r.result.blocks);
}

TEST(compare_test, block_statistic_is_the_median_of_timed_valid_samples) {
  ArmVisit v;
  for (int64_t ns : {900, 5, 100, 300, 200}) {
    Sample s;
    s.ns = ns;
    s.output_valid = true;
    s.warmup = ns == 900 || ns == 5;  // warm-ups never count
    v.samples.push_back(s);
  }
  EXPECT_DOUBLE_EQ(visit_statistic(v), 200.0);
}

TEST(compare_test, invalid_output_during_timing_gives_invalid_and_no_metric) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.8, 0.01, 5);
  runner.fail_at_block = 3;
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05});
  EXPECT_EQ(r.result.verdict, stats::Verdict::invalid);
  EXPECT_FALSE(r.result.estimate);
  ASSERT_EQ(r.result.failures.size(), 1u);
  EXPECT_EQ(r.result.failures[0].reason, FailureReason::numeric_mismatch);
  // The samples measured up to and including the failing visit are all still there.
  EXPECT_EQ(r.samples.size(), runner.produced_samples);
  nlohmann::json j = to_json(r.result);
  EXPECT_TRUE(j["improvement_pct"].is_null());
}

TEST(compare_test, aa_identical_arms_pass_equivalence_and_are_not_faster) {
  FakeClock clock;
  SyntheticRunner runner(clock, 1.0, 0.01, 6);
  Outcome r = run(runner, clock, {CompareMode::aa, stats::GateKind::ci, 0.0, 1.0, 0.05});
  EXPECT_EQ(r.result.verdict, stats::Verdict::pass) << r.result.reason;
  EXPECT_LE(r.result.estimate->ci_high_pct, 1.0);
  EXPECT_GE(r.result.estimate->ci_low_pct, -1.0);
  EXPECT_NE(r.result.faster_verdict, stats::Verdict::pass);
}

TEST(compare_test, aa_with_a_real_difference_fails_equivalence) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.95, 0.005, 7);  // "A'" 5% faster than A: the noise floor is broken
  Outcome r = run(runner, clock, {CompareMode::aa, stats::GateKind::ci, 0.0, 1.0, 0.05});
  EXPECT_EQ(r.result.verdict, stats::Verdict::fail) << r.result.reason;
}

TEST(compare_test, point_gate_decides_once_at_the_first_look) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.9, 0.05, 8);
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::point, 5.0, 1.0, 0.05});
  EXPECT_EQ(r.result.blocks, 10u);
  EXPECT_EQ(r.result.verdict, r.result.estimate->improvement_pct >= 5.0 ? stats::Verdict::pass : stats::Verdict::fail);
}

TEST(compare_test, repetitions_are_a_floor_the_budget_cannot_cut) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.8, 0.01, 9);
  runner.visit_seconds = 10.0;  // 20 s per block against a 25 s budget
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05}, {5, 100000, 25.0});
  EXPECT_EQ(r.result.blocks, 5u);
  EXPECT_EQ(r.result.verdict, stats::Verdict::pass) << r.result.reason;
}

TEST(compare_test, a_block_cap_below_two_reports_no_interval) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.8, 0.01, 9);
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05}, {1, 1, 25.0});
  EXPECT_EQ(r.result.verdict, stats::Verdict::inconclusive);
  EXPECT_EQ(r.result.blocks, 1u);
  EXPECT_FALSE(r.result.estimate);
}

TEST(compare_test, arm_order_is_randomized_per_block) {
  FakeClock clock;
  SyntheticRunner runner(clock, 0.9, 0.02, 10);
  Outcome r = run(runner, clock, {CompareMode::ab, stats::GateKind::ci, 10.0, 1.0, 0.05}, {10, 200, 1e9});
  size_t b_first = 0;
  for (const auto& [block, arm] : runner.order_first) b_first += arm == 1;
  // 200 fair coin flips: between 70 and 130 with overwhelming probability (and deterministic for this seed).
  EXPECT_GT(b_first, 70u);
  EXPECT_LT(b_first, 130u);
}

TEST(compare_test, samples_csv_has_a_row_per_sample) {
  std::vector<Sample> samples = {{"decode", 0, "A", 1, 42, 0, true, 0, 1234, true},
                                 {"decode", 0, "B", 0, 43, 3, false, 1, 999, false}};
  samples[1].layout = 5;
  samples[1].stack_offset = 160;
  samples[1].tensor_offsets = {64, 0, 4032};
  samples[1].pre_cpu_ns = 1500;
  samples[1].post_cpu_ns = 612000;
  samples[1].window_ns = 880;
  samples[1].gap_cpu_ns = 41000;
  samples[1].outside_cpu_ns = 930000;
  samples[1].outside_wall_ns = 1200000;
  std::string csv = samples_csv(samples);
  EXPECT_EQ(csv, samples_csv_header(false) +
                     "decode,0,A,1,42,0,1,0,1234,1,-1,0,0,,-1,-1,0,-1,-1,-1\n"
                     "decode,0,B,0,43,3,0,1,999,0,-1,5,160,64/0/4032,1500,612000,880,41000,930000,1200000\n");
}

// Device backends: the uploads before go and the read-back after done are kwb's own work, recorded and not charged;
// the CPU during the parent's capture of the read-back outputs (the worker sleeps then) is charged whole.
TEST(compare_test, a_device_sample_charges_the_cpu_during_the_capture_only) {
  EXPECT_EQ(cpu_watch::device_charged_ns(5000, 0), 5000);
  EXPECT_EQ(cpu_watch::device_charged_ns(5000, 70), 5070);
  EXPECT_EQ(cpu_watch::device_charged_ns(5000, -1), 5000);  // not watched
}

// A block's floor (record/samples.h): over its timed, valid, watched host rows, the lower-middle medians of the CPU
// before go and after done; a host sample is then charged only beyond them, a device sample as it was.
TEST(compare_test, a_host_sample_is_charged_only_beyond_its_blocks_floor) {
  auto row = [](bool warmup, bool valid, int64_t pre, int64_t post) {
    Sample s;
    s.arm = "A";
    s.warmup = warmup;
    s.output_valid = valid;
    s.pre_cpu_ns = pre;
    s.post_cpu_ns = post;
    s.window_ns = 1000;
    s.ns = cpu_watch::charged_ns(s.window_ns, pre, post);
    return s;
  };
  const std::vector<Sample> a = {row(false, true, 300, 20), row(false, true, 100, 0),   row(false, true, 200, 10),
                                 row(false, true, 250, 30), row(true, true, 9000, 900), row(false, false, 7000, 700)};
  std::vector<const Sample*> reference;
  for (const Sample& s : a) reference.push_back(&s);
  const cpu_watch::Floor f = block_floor(reference);
  EXPECT_EQ(f.pre_ns, 200);  // 100 200 250 300: the lower middle; the warm-up and the invalid call do not count
  EXPECT_EQ(f.post_ns, 10);  // 0 10 20 30
  Sample b = row(false, true, 1200, 5);
  charge_beyond(b, f);
  EXPECT_EQ(b.ns, 1000 + 1000 + 0);  // 1000 ns of CPU before go beyond the floor is charged whole
  Sample unwatched = row(false, true, -1, -1);
  charge_beyond(unwatched, f);
  EXPECT_EQ(unwatched.ns, 1000);
  Sample device = row(false, true, 1200, 5);
  device.outside_cpu_ns = 40;
  device.ns = cpu_watch::device_charged_ns(1000, 5);
  charge_beyond(device, f);
  EXPECT_EQ(device.ns, 1005);
  std::vector<const Sample*> none = {&a[4], &a[5]};
  EXPECT_EQ(block_floor(none).pre_ns, 0);
}

// Two arms whose windows differ by 10% and whose workers both spend 3 us of kwb's protocol before go on every call (a
// host with costly kernel entries): charged whole, the protocol dilutes the difference to about 2.5%; charged beyond
// the block's floor (A's calls of the block before; block 0, with no pilot here, is charged whole), the comparison
// reads the windows' 10%. Arm B moving 800 ns of its work before go on top gains nothing: the floor is A's.
class ProtocolRunner final : public ArmRunner {
public:
  ProtocolRunner(FakeClock& clock, int64_t moved_ns) : m_clock(clock), m_moved_ns(moved_ns) {}
  ArmVisit visit(const std::string& workload, size_t arm, int block, int order_position, bool) override {
    m_clock.advance(0.01);
    ArmVisit v;
    v.pid = 2000 + static_cast<int64_t>(++m_visits);
    for (int i = 0; i < 12; ++i) {
      Sample s{workload, block, arm == 0 ? "A" : "B", order_position, v.pid, i, i < 2, i, 0, true};
      s.window_ns = (arm == 0 ? 1000 : 1100 + (block % 3) * 4) - (arm == 1 ? m_moved_ns : 0) + (i % 3) * 5;
      s.pre_cpu_ns = 3000 + (i % 4) * 10 + (arm == 1 ? m_moved_ns : 0);
      s.post_cpu_ns = 200 + (i % 2) * 10;
      s.ns = cpu_watch::charged_ns(s.window_ns, s.pre_cpu_ns, s.post_cpu_ns);
      v.samples.push_back(s);
    }
    return v;
  }

private:
  FakeClock& m_clock;
  int64_t m_moved_ns;
  uint64_t m_visits = 0;
};

TEST(compare_test, kwbs_own_protocol_cpu_does_not_dilute_a_difference_and_moved_work_still_pays) {
  for (int64_t moved : {int64_t{0}, int64_t{800}}) {
    FakeClock clock;
    ProtocolRunner runner(clock, moved);
    std::vector<Sample> samples;
    const WorkloadResult r =
        run_sequential_comparison("w", {"A", "B"}, runner, clock,
                                  {CompareMode::ab, stats::GateKind::ci, 0.0, 1.0, 0.05}, {10, 200, 60.0}, 7, samples);
    ASSERT_TRUE(r.estimate) << r.reason;
    EXPECT_NEAR(r.estimate->improvement_pct, -10.0, 1.0) << "moved " << moved;
    // A's ten timed calls of a block: 3000 x2, 3010 x2, 3020 x3, 3030 x3 before go, and 200 x5, 210 x5 after done;
    // the lower middle, whatever B does.
    EXPECT_EQ(r.block_floor.pre_ns, 3020) << r.reason;
    EXPECT_EQ(r.block_floor.post_ns, 200);
    for (const Sample& s : samples) {
      // Free is at most how far the floor lies above the call's own protocol CPU (20 ns here), never the work.
      if (s.block >= 0 && s.arm == "B" && !s.warmup) {
        EXPECT_GE(s.ns - s.window_ns, moved - 20) << s.pre_cpu_ns;
      }
    }
  }
}

TEST(compare_test, overall_verdict_precedence) {
  using stats::Verdict;
  auto w = [](Verdict v) {
    WorkloadResult r;
    r.verdict = v;
    return r;
  };
  EXPECT_EQ(overall_verdict({w(Verdict::pass), w(Verdict::pass)}), Verdict::pass);
  EXPECT_EQ(overall_verdict({w(Verdict::pass), w(Verdict::inconclusive)}), Verdict::inconclusive);
  EXPECT_EQ(overall_verdict({w(Verdict::inconclusive), w(Verdict::fail)}), Verdict::fail);
  EXPECT_EQ(overall_verdict({w(Verdict::fail), w(Verdict::invalid)}), Verdict::invalid);
  EXPECT_EQ(overall_verdict({}), Verdict::inconclusive);
  // A verdict that is not a workload's (refused, interrupted) never reads as a pass.
  EXPECT_EQ(overall_verdict({w(Verdict::pass), w(Verdict::refused)}), Verdict::inconclusive);
}

}  // namespace
}  // namespace kwb
