#include "stats/aging.h"

#include "stats/descriptive.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kwb::stats {

namespace {

// One arm's long visit, split by call index into an earlier and a later half: each half's median, and the standard
// error of the log of the drift, log(late / early), from the halves' own spread (1.4826 MAD of log ns, times 1.2533
// / sqrt(n) for a median). NaN medians when a half would hold fewer than k_aging_min_half_calls calls.
struct Halves {
  double early = std::nan(""), late = std::nan(""), se_log = 0.0;
};

double log_median_se(const std::vector<double>& ns) {
  std::vector<double> logs;
  logs.reserve(ns.size());
  for (const double x : ns) logs.push_back(std::log(x));
  const double centre = median(logs);
  std::vector<double> dev;
  dev.reserve(logs.size());
  for (const double l : logs) dev.push_back(std::fabs(l - centre));
  return 1.4826 * median(dev) * 1.2533 / std::sqrt(static_cast<double>(ns.size()));
}

Halves halves(AgingVisit v) {
  Halves out;
  if (v.size() < 2 * k_aging_min_half_calls) return out;
  std::sort(v.begin(), v.end());
  const size_t half = v.size() / 2;
  std::vector<double> early, late;
  for (size_t i = 0; i < v.size(); ++i) (i < half ? early : late).push_back(v[i].second);
  const double e = median(early), l = median(late);
  if (!(e > 0.0 && l > 0.0)) return out;
  out.early = e;
  out.late = l;
  out.se_log = std::hypot(log_median_se(early), log_median_se(late));
  return out;
}

}  // namespace

AgingCheck aging_check(const std::vector<std::array<AgingVisit, 2>>& blocks) {
  AgingCheck out;
  std::vector<double> da, dother, diff;
  const double bar = std::log1p(k_aging_bar);
  size_t up = 0, down = 0;
  for (const auto& b : blocks) {
    const Halves ha = halves(b[0]), ho = halves(b[1]);
    if (std::isnan(ha.early) || std::isnan(ho.early)) continue;
    const double ea = ha.early, la = ha.late, eo = ho.early, lo = ho.late;
    const double a = std::log(la / ea), o = std::log(lo / eo);
    da.push_back(a);
    dother.push_back(o);
    diff.push_back(o - a);
    // An arm ages in this block when its drift passes the other's by the bar both in ratio and in time: a machine
    // that slows both arms' late calls by a factor moves neither ratio against the other, and one that adds a
    // fixed time to both moves neither difference; only what one arm does to itself moves both. And past the bar by
    // more than the halves' own noise (k_aging_noise_se standard errors of the drifts' difference): calls that
    // scatter by a third move a median of 8 by more than the bar.
    const double margin = bar + k_aging_noise_se * std::hypot(ha.se_log, ho.se_log);
    const double extra = (lo - eo) - (la - ea);  // the other arm's late-minus-early time beyond A's, ns
    up += o - a > margin && extra > k_aging_bar * eo;
    down += a - o > margin && -extra > k_aging_bar * ea;
  }
  out.long_blocks = diff.size();
  if (diff.empty()) return out;
  out.drift_a_log = median(da);
  out.drift_other_log = median(dother);
  out.difference_log = median(diff);
  out.aging_blocks = std::max(up, down);
  const bool share = out.aging_blocks > 0 &&
                     static_cast<double>(out.aging_blocks) >= k_aging_share * static_cast<double>(out.long_blocks);
  out.ages = share && out.aging_blocks >= k_aging_min_trips;
  out.suspected = share && !out.ages;
  return out;
}

std::string describe_aging(const AgingCheck& a, const std::string& other_label) {
  const bool other_ages = std::fabs(a.drift_other_log) >= std::fabs(a.drift_a_log);
  const std::string who = other_ages ? other_label : "A";
  const double own = other_ages ? a.drift_other_log : a.drift_a_log;
  const double ref = other_ages ? a.drift_a_log : a.drift_other_log;
  return fmt::format(
      "arm {}'s speed {} as its process ages: its late timed calls ran {:.2f}x its early ones "
      "(arm {}'s {:.2f}x) in {} of {} long visits, past the {:.0f}% bar",
      who, a.ages ? "changes" : "may change", std::exp(own), other_ages ? "A" : other_label, std::exp(ref),
      a.aging_blocks, a.long_blocks, 100.0 * k_aging_bar);
}

}  // namespace kwb::stats
