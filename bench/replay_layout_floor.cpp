// What the layout floor (src/stats/layout_floor.h) changes in comparisons already run: each A/B workload of the
// compare --json files given is replayed through the decision procedure twice on its recorded log ratios, without
// the floor (as compare ran before compare.json version 8; the replay must give the recorded verdict) and with it
// (the recorded pool of layouts). Built and run by bench/replay_layout_floor.sh.
//
// A replay with the floor can only be followed as far as the blocks that were timed. Per file it prints one of:
//   same       the same verdict at the same block
//   changed    the floor decides otherwise within the recorded blocks (e.g. SAME -> INCONCLUSIVE at a budget's end)
//   longer     the recorded run stopped at a decision the floor does not reach there: it would have timed on, and
//              how it would have ended is not in the file
// and a summary line per folder: counts, how often the floor applied at the last look, and its median size.
//
// With --as BAR MARGIN first, each workload is replayed instead under another rule (min_improvement_pct BAR,
// same_margin_pct MARGIN), without and with the floor: what that rule decides on the same blocks. A session recorded
// under a rule that stopped it early (a PASS at its first look) can end undecided under the other; it is counted as
// "undecided", since how it would have gone on is not in the file. Sessions that ran their whole budget give the
// other rule every block it would have had, the budget being the same.
#include "stats/sequential.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

using kwb::stats::SequentialGate;
using kwb::stats::SequentialLook;
using kwb::stats::SequentialProcedure;
using kwb::stats::Verdict;

struct Replayed {
  std::size_t blocks = 0;  // where it stopped (decided) or the recorded blocks (not decided)
  bool decided = false;
  std::optional<SequentialLook> outcome;
};

Replayed replay(const std::vector<double>& d, const SequentialGate& gate, std::uint64_t seed) {
  SequentialProcedure p(gate, seed);
  Replayed r;
  for (const double x : d) {
    ++r.blocks;
    if (p.add(x)) {
      r.decided = true;
      break;
    }
  }
  r.outcome = p.finish();
  return r;
}

std::string verdict_of(const std::optional<SequentialLook>& o) {
  return o ? std::string(kwb::stats::to_string(o->verdict)) : "-";
}

struct Tally {
  int files = 0, same = 0, changed = 0, longer = 0, mismatched = 0, floored = 0;
  std::vector<double> floor_sd_pct;
  std::map<std::string, int> changes;
};

// The recorded gate of a compare.json and one of its workloads.
SequentialGate recorded_gate(const nlohmann::json& j, const nlohmann::json& w) {
  const nlohmann::json& g = j["gate"];
  SequentialGate gate;
  gate.kind = g.value("kind", "ci") == "ci" ? kwb::stats::GateKind::ci : kwb::stats::GateKind::point;
  gate.min_improvement_pct = g.value("min_improvement_pct", 0.0);
  gate.same_margin_pct = g.value("same_margin_pct", 0.0);
  gate.alpha = g.value("alpha", 0.05);
  gate.min_blocks = j["budgets"].value("min_blocks", std::size_t{10});
  gate.aa_bias_log = w.value("aa_bias_log", 0.0);
  return gate;
}

// Calls fn(path, compare.json, workload) for every A/B workload with recorded log ratios in the files given.
template <typename Fn>
void for_each_ab_workload(int first, int argc, char** argv, Fn fn) {
  for (int i = first; i < argc; ++i) {
    std::ifstream in(argv[i]);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || j.value("mode", "") != "ab" || !j.contains("workloads")) continue;
    for (const nlohmann::json& w : j["workloads"]) {
      if (!w.contains("log_ratios") || w["log_ratios"].size() < 2 || w.value("verdict", "") == "INVALID") continue;
      fn(argv[i], j, w);
    }
  }
}

// --as BAR MARGIN: every workload replayed under that rule, without and with the floor; counts of what each decides
// within the recorded blocks.
int replay_as(double bar, double margin, int first, int argc, char** argv) {
  std::map<std::string, int> plain_counts, floored_counts;
  int files = 0;
  for_each_ab_workload(first, argc, argv, [&](const char* path, const nlohmann::json& j, const nlohmann::json& w) {
    SequentialGate gate = recorded_gate(j, w);
    gate.min_improvement_pct = bar;
    gate.same_margin_pct = margin;
    const std::vector<double> d = w["log_ratios"].get<std::vector<double>>();
    const auto seed = w["seed"].get<std::uint64_t>();
    const Replayed plain = replay(d, gate, seed);
    gate.layouts = w.value("layouts", 1);
    const Replayed floored = replay(d, gate, seed);
    // Undecided within the blocks a run stopped early recorded; a run that spent its budget ends at its last look.
    const bool whole = w.value("stopped_by_budget", false);
    const auto label = [whole](const Replayed& r) {
      return r.decided || whole ? verdict_of(r.outcome) : std::string("undecided");
    };
    ++files;
    ++plain_counts[label(plain)];
    ++floored_counts[label(floored)];
    const auto& e = floored.outcome;
    std::printf(
        "%s %s: recorded %s %zu blocks; as bar %.2f%% margin %.2f%%: %s at %zu, floored %s at %zu "
        "[%+.2f%%, %+.2f%%]\n",
        path, w.value("name", "?").c_str(), w.value("verdict", "").c_str(), d.size(), bar, margin, label(plain).c_str(),
        plain.blocks, label(floored).c_str(), floored.blocks, e ? e->estimate.ci_low_pct : 0.0,
        e ? e->estimate.ci_high_pct : 0.0);
  });
  std::printf("summary as bar %.2f%% margin %.2f%%: %d workloads\n", bar, margin, files);
  for (const auto& [name, counts] :
       {std::pair{"without the floor", &plain_counts}, {"with the floor", &floored_counts}}) {
    std::printf("  %s:", name);
    for (const auto& [verdict, count] : *counts) std::printf(" %s %d", verdict.c_str(), count);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "--as") {
    return replay_as(std::stod(argv[2]), std::stod(argv[3]), 4, argc, argv);
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: replay_layout_floor [--as BAR MARGIN] COMPARE.json...\n");
    return 2;
  }
  Tally t;
  for_each_ab_workload(1, argc, argv, [&t](const char* path, const nlohmann::json& j, const nlohmann::json& w) {
    SequentialGate gate = recorded_gate(j, w);
    const std::vector<double> d = w["log_ratios"].get<std::vector<double>>();
    const auto seed = w["seed"].get<std::uint64_t>();
    const Replayed plain = replay(d, gate, seed);
    gate.layouts = w.value("layouts", 1);
    const Replayed floored = replay(d, gate, seed);
    ++t.files;
    const std::string recorded = w.value("verdict", "");
    std::string what;
    if (verdict_of(plain.outcome) != recorded || plain.blocks != d.size()) {
      what = "mismatch";  // the replay without the floor is not what compare ran: the figures below are not valid
      ++t.mismatched;
    } else if (!floored.decided && plain.decided && floored.blocks == d.size()) {
      what = "longer";
      ++t.longer;
    } else if (verdict_of(floored.outcome) == recorded && floored.blocks == plain.blocks) {
      what = "same";
      ++t.same;
    } else {
      what = "changed";
      ++t.changed;
      ++t.changes[recorded + " -> " + verdict_of(floored.outcome)];
    }
    if (floored.outcome && floored.outcome->estimate.layout.applied) {
      ++t.floored;
      t.floor_sd_pct.push_back(100.0 * std::sqrt(floored.outcome->estimate.layout.variance_log));
    }
    const auto& e = floored.outcome;
    std::printf("%s %s: %s %zu blocks, floored %s %zu blocks [%+.2f%%, %+.2f%%]%s: %s\n", path,
                w.value("name", "?").c_str(), recorded.c_str(), d.size(), verdict_of(e).c_str(), floored.blocks,
                e ? e->estimate.ci_low_pct : 0.0, e ? e->estimate.ci_high_pct : 0.0,
                e && e->estimate.layout.applied ? " (floor applied)" : "", what.c_str());
  });
  std::sort(t.floor_sd_pct.begin(), t.floor_sd_pct.end());
  const double median_sd = t.floor_sd_pct.empty() ? 0.0 : t.floor_sd_pct[t.floor_sd_pct.size() / 2];
  std::printf(
      "summary: %d workloads: %d same, %d changed, %d would time longer, %d replay mismatches; floor applied "
      "at the last look in %d (median sd %.2f%%)\n",
      t.files, t.same, t.changed, t.longer, t.mismatched, t.floored, median_sd);
  for (const auto& [change, count] : t.changes) std::printf("  %s: %d\n", change.c_str(), count);
  return t.mismatched == 0 ? 0 : 1;
}
