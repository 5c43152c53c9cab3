// kwb compare-saved OLD NEW [--old-arm L] [--new-arm L] [--seed N] [--json]: two saved timing results compared
// offline, labelled indicative (record/saved_comparison.h). Only an interleaved compare or validate decides.
#include "cli/commands.h"
#include "cli/comparison_text.h"
#include "record/saved_comparison.h"
#include "util/json_text.h"
#include "util/units.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

namespace kwb::cli {

namespace {

struct CompareSavedArgs {
  std::string old_dir, new_dir, old_arm, new_arm;
  uint64_t seed = 1;
  bool json = false;
};

std::string describe(const SavedResult& r) {
  return fmt::format("{} ({}, arm {}: {}{})", r.dir.string(), r.kind, r.arm, r.arm_path,
                     r.arm_artifact_sha256.empty() ? "" : ", artifact " + r.arm_artifact_sha256.substr(0, 16));
}

std::string pct(const std::optional<double>& v) { return v ? fmt::format("{:+.2f}%", *v) : "-"; }

void print_human(const SavedComparison& c) {
  std::cout << "kwb compare-saved: INDICATIVE ONLY, the two results were not interleaved\n";
  std::cout << "  old  " << describe(c.old_result) << "\n";
  std::cout << "  new  " << describe(c.new_result) << "\n\n";
  std::cout << fmt::format("  {:<16} {:>12} {:>12} {:>12} {:>22} {:>18}\n", "workload", "old per call", "new per call",
                           "new vs old", fmt::format("{:.0f}% interval", c.confidence * 100), "speedup");
  for (const SavedWorkload& w : c.workloads) {
    const std::string interval =
        w.ci_low_pct ? fmt::format("[{:+.2f}%, {:+.2f}%]", *w.ci_low_pct, *w.ci_high_pct) : "(too few visits)";
    std::cout << fmt::format("  {:<16} {:>12} {:>12} {:>12} {:>22} {:>18}\n", w.name, time_text(w.old_ns),
                             time_text(w.new_ns), pct(w.improvement_pct), interval,
                             w.improvement_pct ? speedup_text(*w.improvement_pct) : "-");
  }
  for (const std::string& name : c.only_in_old) std::cout << fmt::format("  {}: only in the old result\n", name);
  for (const std::string& name : c.only_in_new) std::cout << fmt::format("  {}: only in the new result\n", name);
  std::cout << warning_block(c.warnings, "these two results are less comparable than the runs alone make them");
  std::cout
      << "\nThe runs were measured at different times: drift between them (load, frequency, thermal state) is in\n"
         "the difference and not in the interval, which covers sampling noise only. To decide, run kwb compare\n"
         "or kwb validate, which interleave the two arms.\n";
}

}  // namespace

Action add_compare_saved(CLI::App& root) {
  auto a = std::make_shared<CompareSavedArgs>();
  CLI::App* app = root.add_subcommand("compare-saved",
                                      "Compare two saved timing results offline (indicative only: "
                                      "not interleaved)");
  app->add_option("old", a->old_dir, "A folder written by compare --output-dir, or a validate bundle")->required();
  app->add_option("new", a->new_dir, "A folder written by compare --output-dir, or a validate bundle")->required();
  app->add_option("--old-arm", a->old_arm, "The old result's arm (A, B or A'; default: its candidate arm)");
  app->add_option("--new-arm", a->new_arm, "The new result's arm (A, B or A'; default: its candidate arm)");
  app->add_option("--seed", a->seed, "Seed of the bootstrap interval");
  app->add_flag("--json", a->json, "Print the comparison as JSON");
  return [a]() {
    SavedResult old_result = read_saved_result(a->old_dir, a->old_arm);
    SavedResult new_result = read_saved_result(a->new_dir, a->new_arm);
    const SavedComparison c = compare_saved(std::move(old_result), std::move(new_result), a->seed);
    if (a->json) {
      std::cout << json_text(to_json(c), 2) << "\n";
    } else {
      print_human(c);
    }
    return 0;
  };
}

}  // namespace kwb::cli
