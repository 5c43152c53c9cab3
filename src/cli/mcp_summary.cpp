// What kwb mcp's tools say in one line (mcp_tools.h, summary): the verdict with its figure and reasons first, so that
// an agent can branch on it without opening the output or the bundle.
#include "cli/comparison_text.h"
#include "cli/mcp_tools.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace kwb::cli::mcp {

namespace {

// A rejected check's first failure in its own words: for a source that does not compile, the compiler's lines.
std::string first_failure(const nlohmann::json& report) {
  if (!report.contains("failures") || !report["failures"].is_array() || report["failures"].empty() ||
      !report["failures"][0].is_object()) {
    return "";
  }
  const nlohmann::json& f = report["failures"][0];
  std::string detail = f.value("detail", std::string());
  if (detail.size() > 4000) detail = detail.substr(0, 4000) + "...";
  const std::string case_name = f.value("case", std::string());
  return fmt::format("\nfirst failure: {} ({}{}): {}", f.value("reason", std::string("?")),
                     f.value("assertion", std::string("?")), case_name.empty() ? "" : ", case " + case_name, detail);
}

}  // namespace

bool is_build_failure_verdict(const std::string& tool, const nlohmann::json& out) {
  if (tool != "check" || !out.is_object() || out.value("verdict", "") != "FAIL") return false;
  for (const nlohmann::json& f : out.value("failures", nlohmann::json::array())) {
    if (f.is_object() && f.value("reason", "") == "build_failed") return true;
  }
  return false;
}

namespace {

// The reasons an output lists under `key` (strings, or objects with a "reason"), sorted and unique.
std::vector<std::string> listed_reasons(const nlohmann::json& j, const char* key) {
  std::vector<std::string> r;
  if (j.contains(key) && j[key].is_array()) {
    for (const auto& x : j[key]) {
      if (x.is_string()) r.push_back(x.get<std::string>());
      if (x.is_object() && x.contains("reason")) r.push_back(x["reason"].get<std::string>());
    }
  }
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

std::string validate_summary(const std::string& tool, const nlohmann::json& args, const nlohmann::json& out) {
  const std::filesystem::path bundle = std::filesystem::absolute(args.value("output_dir", std::string()));
  // A candidate that does not compile: the compiler's lines, from the bundle's check of it, so the agent reads
  // them without opening the bundle.
  std::string compiler;
  const nlohmann::json codes = out.value("reason_codes", nlohmann::json::array());
  if (std::find(codes.begin(), codes.end(), "candidate_not_built") != codes.end()) {
    try {
      compiler = first_failure(nlohmann::json::parse(read_file(bundle / "checks" / "candidate.json")));
    } catch (const std::exception& e) {
      compiler =
          fmt::format("\n(the compiler's output is in checks/candidate.json, which could not be read: {})", e.what());
    }
  }
  // The figure first (issue 41): "validate KEEP_CANDIDATE decode +57.20% [+55.10, +59.30] (2.34x faster, PASS)".
  const std::string figures = decision_figures(out);
  return fmt::format("{} {}{}{} [{}]: {}. bundle: {}{}", tool, out.value("decision", "?"), figures.empty() ? "" : " ",
                     figures, fmt::join(codes, ", "), fmt::join(listed_reasons(out, "reasons"), "; "), bundle.string(),
                     compiler);
}

std::string campaign_summary(const std::string& tool, const nlohmann::json& out) {
  const nlohmann::json c = out.value("counts", nlohmann::json::object());
  std::string s =
      fmt::format("{} {}: {} queued, {} running, {} decided, {} ended without a decision", tool, out.value("name", "?"),
                  c.value("queued", 0), c.value("running", 0), c.value("decided", 0), c.value("failed", 0));
  if (tool == "campaign_report") return s + fmt::format(". report: {}", out.value("report_md", std::string()));
  for (const nlohmann::json& j : out.value("jobs", nlohmann::json::array())) {
    const std::string decision = j.value("decision", std::string());
    s += fmt::format(
        "\n- {}: {}{} ({})", std::filesystem::path(j.value("candidate", std::string())).filename().string(),
        j.value("outcome", std::string("?")), decision.empty() ? "" : " " + decision, j.value("detail", std::string()));
  }
  return s;
}

std::string record_summary(const std::string& tool, const nlohmann::json& out, int exit_code) {
  if (tool == "experiment_status") {
    std::vector<std::string> parts;
    for (const auto& [k, n] : out.value("counts", nlohmann::json::object()).items()) {
      parts.push_back(fmt::format("{} {}", n.dump(), k));
    }
    return fmt::format("experiment_status {}: {}", out.value("name", "?"), fmt::join(parts, ", "));
  }
  if (tool == "experiment_run" || tool == "experiment_report") {
    return fmt::format("{}: {}", tool, out.value("verdict", std::string("?")));
  }
  if (tool == "runs") {
    return fmt::format("runs: {} of {} recorded run(s) shown, most recent first",
                       out.value("runs", nlohmann::json::array()).size(), out.value("recorded", 0));
  }
  if (tool == "history") {
    const size_t n = out.contains("lineage") ? out["lineage"].size() : 0;
    return n == 0 ? "history: nothing kept yet; the incumbent is the task's baseline"
                  : fmt::format("history: the incumbent is generation {}", n - 1);
  }
  return fmt::format("kwb {} exited {}", tool, exit_code);
}

}  // namespace

std::string summary(const std::string& tool, const nlohmann::json& args, const nlohmann::json& out, int exit_code) {
  if (!out.is_object()) return fmt::format("kwb {} exited {} without a result", tool, exit_code);
  if (tool == "check") {
    const std::string verdict = out.value("verdict", "?");
    if (verdict == "PASS") return "check PASS: every assertion passed";
    return fmt::format("check {}: rejected for {}. Rejected code has no metric: it is never timed.{}", verdict,
                       fmt::join(listed_reasons(out, "failures"), ", "), first_failure(out));
  }
  if (tool == "validate" || tool == "revalidate") return validate_summary(tool, args, out);
  if (tool == "compare") {
    std::vector<std::string> parts;
    if (out.contains("workloads")) {
      for (const auto& w : out["workloads"]) parts.push_back(w.value("name", "?") + ": " + w.value("reason", ""));
    }
    for (const std::string& r : listed_reasons(out, "refused")) parts.push_back("refused: " + r);
    return fmt::format("compare {}: {}", out.value("verdict", "?"), fmt::join(parts, "; "));
  }
  if (tool == "verify") {
    const nlohmann::json auth = out.value("authenticity", nlohmann::json::object());
    return out.value("ok", false) ? fmt::format(
                                        "verify: the bundle is intact and its decision follows from its "
                                        "evidence; {}",
                                        auth.value("summary", std::string("authenticity unknown")))
                                  : fmt::format("verify: {} problem(s): {}", out["problems"].size(),
                                                fmt::join(listed_reasons(out, "problems"), "; "));
  }
  if (tool == "keep") return "keep: " + out.value("message", std::string());
  if (tool.rfind("campaign_", 0) == 0) return campaign_summary(tool, out);
  return record_summary(tool, out, exit_code);
}

}  // namespace kwb::cli::mcp
