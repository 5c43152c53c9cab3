#include "stats/aging.h"

#include "stats/descriptive.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kwb::stats {

namespace {

// The medians of the earlier and the later half of a visit's calls, by call index; NaN under 4 calls.
std::pair<double, double> halves(AgingVisit v) {
  if (v.size() < 4) return {std::nan(""), std::nan("")};
  std::sort(v.begin(), v.end());
  const size_t half = v.size() / 2;
  std::vector<double> early, late;
  for (size_t i = 0; i < v.size(); ++i) (i < half ? early : late).push_back(v[i].second);
  const double e = median(early), l = median(late);
  if (!(e > 0.0 && l > 0.0)) return {std::nan(""), std::nan("")};
  return {e, l};
}

}  // namespace

AgingCheck aging_check(const std::vector<std::array<AgingVisit, 2>>& blocks) {
  AgingCheck out;
  std::vector<double> da, dother, diff;
  const double bar = std::log1p(k_aging_bar);
  size_t up = 0, down = 0;
  for (const auto& b : blocks) {
    const auto [ea, la] = halves(b[0]);
    const auto [eo, lo] = halves(b[1]);
    if (std::isnan(ea) || std::isnan(eo)) continue;
    const double a = std::log(la / ea), o = std::log(lo / eo);
    da.push_back(a);
    dother.push_back(o);
    diff.push_back(o - a);
    // An arm ages in this block when its drift passes the other's by the bar both in ratio and in time: a machine
    // that slows both arms' late calls by a factor moves neither ratio against the other, and one that adds a
    // fixed time to both moves neither difference; only what one arm does to itself moves both.
    const double extra = (lo - eo) - (la - ea);  // the other arm's late-minus-early time beyond A's, ns
    up += o - a > bar && extra > k_aging_bar * eo;
    down += a - o > bar && -extra > k_aging_bar * ea;
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
