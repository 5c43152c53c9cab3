#include "record/saved_comparison.h"

#include "record/bundle_reader.h"
#include "record/schema.h"
#include "stats/descriptive.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/seed.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace kwb {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string read_regular(const fs::path& file, const std::string& fix) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(file, ec))) {
    throw DataError(fmt::format("{}: missing or not a regular file; {}", file.string(), fix));
  }
  return read_file(file);
}

json parse_comparison(const std::string& text, const fs::path& file) {
  json j = json::parse(text, nullptr, false);
  // Versions 1 and 2 of kwb.compare hold the same arms, budgets and samples; they differ in layout sensitivity only,
  // which an offline comparison does not read.
  if (j.is_discarded() || !j.is_object() || j.value("schema", json()) != k_compare_schema ||
      !j.contains("schema_version") || !j["schema_version"].is_number_integer() || j["schema_version"].get<int>() < 1 ||
      j["schema_version"].get<int>() > k_compare_schema_version) {
    throw DataError(
        fmt::format("{}: not a kwb.compare result of version 1 to {} (written by another kwb, or "
                    "edited); give a folder written by compare --output-dir or validate",
                    file.string(), k_compare_schema_version));
  }
  if (!j.contains("arms") || !j["arms"].is_array() || j["arms"].size() != 2) {
    throw DataError(fmt::format("{}: field 'arms' must list the comparison's two arms", file.string()));
  }
  return j;
}

// The arm's label, path and artifact from the comparison's "arms"; the candidate arm (the second) when none is asked.
void take_arm(SavedResult& r, const json& comparison, const fs::path& file, const std::string& arm) {
  std::vector<std::string> labels;
  for (const json& a : comparison["arms"]) labels.push_back(a.is_object() ? a.value("label", "") : "");
  r.arm = arm.empty() ? labels[1] : arm;
  const auto at = std::find(labels.begin(), labels.end(), r.arm);
  if (at == labels.end()) {
    throw DataError(fmt::format("{}: the comparison has no arm '{}'; its arms are {}", file.string(), r.arm,
                                fmt::join(labels, ", ")));
  }
  const json& a = comparison["arms"][static_cast<size_t>(at - labels.begin())];
  r.arm_path = a.value("path", "");
  if (a.contains("identity") && a["identity"].is_object())
    r.arm_artifact_sha256 = a["identity"].value("artifact_sha256", "");
  r.backend = comparison.value("backend", "");
  const json budgets = comparison.value("budgets", json::object());
  r.timing = {{"warmups", budgets.value("warmups", json())},
              {"samples", budgets.value("samples", json())},
              {"cold", comparison.value("cold", json())}};
}

void keep_arm_rows(SavedResult& r, std::vector<SampleRow> rows, const std::string& comparison) {
  for (SampleRow& row : rows) {
    if (row.comparison == comparison && row.arm == r.arm) r.rows.push_back(std::move(row));
  }
}

void require_no_problems(const std::vector<std::string>& problems, const fs::path& file) {
  if (problems.empty()) return;
  throw DataError(fmt::format("{}: {}{}", file.string(), problems.front(),
                              problems.size() > 1 ? fmt::format(" (and {} more problems)", problems.size() - 1) : ""));
}

// Per visit (block), the median of its timed, validated samples.
std::map<std::string, std::vector<double>> visit_medians(const std::vector<SampleRow>& rows,
                                                         std::vector<std::string>& order) {
  std::map<std::string, std::map<int, std::vector<double>>> by;
  for (const SampleRow& s : rows) {
    if (s.block < 0 || s.warmup || !s.output_valid || s.ns <= 0) continue;
    if (!by.contains(s.workload)) order.push_back(s.workload);
    by[s.workload][s.block].push_back(static_cast<double>(s.ns));
  }
  std::map<std::string, std::vector<double>> out;
  for (const auto& [workload, blocks] : by) {
    for (const auto& [block, ns] : blocks) out[workload].push_back(stats::median(ns));
  }
  return out;
}

double median_log(std::vector<double>& logs) { return stats::median(logs); }

SavedWorkload compare_workload(const std::string& name, const std::vector<double>& old_visits,
                               const std::vector<double>& new_visits, double confidence, uint64_t seed) {
  SavedWorkload w;
  w.name = name;
  w.old_visits = old_visits.size();
  w.new_visits = new_visits.size();
  w.old_ns = stats::median(old_visits);
  w.new_ns = stats::median(new_visits);
  if (old_visits.size() < k_min_saved_visits || new_visits.size() < k_min_saved_visits) return w;
  std::vector<double> lo, ln;
  for (double v : old_visits) lo.push_back(std::log(v));
  for (double v : new_visits) ln.push_back(std::log(v));
  const double d = median_log(ln) - median_log(lo);
  // Percentile bootstrap of the difference of medians, visits resampled within each result (the two results are
  // independent samples; Efron & Tibshirani 1993, ch. 13).
  constexpr int k_resamples = 4000;
  Xoshiro256StarStar rng(seed);
  std::vector<double> diffs, a(lo.size()), b(ln.size());
  diffs.reserve(k_resamples);
  for (int r = 0; r < k_resamples; ++r) {
    for (double& x : a) x = lo[rng.uniform_below(lo.size())];
    for (double& x : b) x = ln[rng.uniform_below(ln.size())];
    diffs.push_back(median_log(b) - median_log(a));
  }
  std::sort(diffs.begin(), diffs.end());
  const double tail = (1.0 - confidence) / 2.0;
  const double d_lo = stats::quantile(diffs, tail), d_hi = stats::quantile(diffs, 1.0 - tail);
  w.improvement_pct = (1.0 - std::exp(d)) * 100.0;
  w.ci_low_pct = (1.0 - std::exp(d_hi)) * 100.0;
  w.ci_high_pct = (1.0 - std::exp(d_lo)) * 100.0;
  return w;
}

json result_json(const SavedResult& r) {
  return {{"dir", r.dir.string()},
          {"kind", r.kind},
          {"arm", r.arm},
          {"path", r.arm_path},
          {"artifact_sha256", r.arm_artifact_sha256},
          {"backend", r.backend},
          {"timing", r.timing},
          {"machine", r.machine}};
}

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

SavedResult read_saved_result(const fs::path& dir, const std::string& arm) {
  SavedResult r;
  r.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw DataError(
        fmt::format("{}: no such folder; give a folder written by compare --output-dir or validate", dir.string()));
  }
  const std::string fix = "give a folder written by compare --output-dir (compare.json, samples.csv) or validate";
  std::vector<std::string> problems;
  if (fs::exists(dir / "compare.json", ec)) {
    r.kind = "compare";
    const json comparison = parse_comparison(read_regular(dir / "compare.json", fix), dir / "compare.json");
    take_arm(r, comparison, dir / "compare.json", arm);
    std::vector<SampleRow> rows = parse_compare_samples_csv(read_regular(dir / "samples.csv", fix), problems);
    require_no_problems(problems, dir / "samples.csv");
    keep_arm_rows(r, std::move(rows), "");
    return r;
  }
  if (!fs::exists(dir / "comparisons" / "ab.json", ec)) {
    throw DataError(fmt::format("{}: holds neither compare.json nor comparisons/ab.json; {}", dir.string(), fix));
  }
  // A bundle: read as verify reads it (never following a link out of it); its A/B comparison.
  r.kind = "bundle";
  BundleData b = read_bundle(dir);
  if (!b.ab) {
    require_no_problems(b.problems, dir / "comparisons" / "ab.json");
    throw DataError(fmt::format("{}: does not parse; {}", (dir / "comparisons" / "ab.json").string(), fix));
  }
  const json comparison = parse_comparison(b.ab->dump(), dir / "comparisons" / "ab.json");
  take_arm(r, comparison, dir / "comparisons" / "ab.json", arm);
  r.machine = b.environment.is_object() ? b.environment.value("cpu_model", "") : "";
  if (b.samples.empty()) require_no_problems(b.problems, dir / "samples.csv");
  keep_arm_rows(r, std::move(b.samples), "ab");
  return r;
}

SavedComparison compare_saved(SavedResult old_result, SavedResult new_result, uint64_t seed) {
  SavedComparison c;
  c.seed = seed;
  std::vector<std::string> old_order, new_order;
  const auto old_visits = visit_medians(old_result.rows, old_order);
  const auto new_visits = visit_medians(new_result.rows, new_order);
  for (size_t i = 0; i < old_order.size(); ++i) {
    const std::string& name = old_order[i];
    if (!new_visits.contains(name)) {
      c.only_in_old.push_back(name);
      continue;
    }
    c.workloads.push_back(compare_workload(name, old_visits.at(name), new_visits.at(name), c.confidence, seed + i));
  }
  for (const std::string& name : new_order) {
    if (!old_visits.contains(name)) c.only_in_new.push_back(name);
  }
  if (old_result.backend != new_result.backend) {
    c.warnings.push_back(
        fmt::format("the backends differ ({} and {}): the two times are of different machines' "
                    "work",
                    old_result.backend, new_result.backend));
  }
  if (old_result.timing != new_result.timing) {
    c.warnings.push_back(
        fmt::format("the timing settings differ (old {}, new {}): warm-ups, samples per visit or "
                    "cold caches change what a call's time measures",
                    old_result.timing.dump(), new_result.timing.dump()));
  }
  if (!old_result.machine.empty() && !new_result.machine.empty() && old_result.machine != new_result.machine) {
    c.warnings.push_back(
        fmt::format("the results come from different machines ({} and {})", old_result.machine, new_result.machine));
  } else if (old_result.machine.empty() || new_result.machine.empty()) {
    c.warnings.push_back("a compare folder records no machine: kwb cannot tell whether both ran on the same one");
  }
  for (const SavedWorkload& w : c.workloads) {
    if (!w.improvement_pct) {
      c.warnings.push_back(fmt::format("{}: fewer than {} visits in one result ({} old, {} new): no interval", w.name,
                                       k_min_saved_visits, w.old_visits, w.new_visits));
    }
  }
  if (c.workloads.empty()) {
    throw DataError(fmt::format("{} and {}: no workload has timed samples in both (old: {}; new: {})",
                                old_result.dir.string(), new_result.dir.string(), fmt::join(old_order, ", "),
                                fmt::join(new_order, ", ")));
  }
  c.old_result = std::move(old_result);
  c.new_result = std::move(new_result);
  return c;
}

json to_json(const SavedComparison& c) {
  json workloads = json::array();
  for (const SavedWorkload& w : c.workloads) {
    workloads.push_back({{"name", w.name},
                         {"old_visits", w.old_visits},
                         {"new_visits", w.new_visits},
                         {"old_median_ns", w.old_ns},
                         {"new_median_ns", w.new_ns},
                         {"improvement_pct", optional_number(w.improvement_pct)},
                         {"ci_low_pct", optional_number(w.ci_low_pct)},
                         {"ci_high_pct", optional_number(w.ci_high_pct)}});
  }
  return {{"schema", k_compare_saved_schema},
          {"schema_version", k_compare_saved_schema_version},
          {"indicative", true},
          {"why_indicative",
           "the two results were not interleaved: what changed between the runs is in the "
           "difference, and the interval covers sampling noise only"},
          {"confidence", c.confidence},
          {"seed", c.seed},
          {"old", result_json(c.old_result)},
          {"new", result_json(c.new_result)},
          {"workloads", workloads},
          {"only_in_old", c.only_in_old},
          {"only_in_new", c.only_in_new},
          {"warnings", c.warnings}};
}

}  // namespace kwb
