// `kwb experiment report`: storage/report.md and storage/report.html, both rendered from the analysis
// (experiment/analysis.h) and the trajectory records: the verdict with its interval, each arm's fast_p, cost and
// rejections by category, and each task's trajectories side by side, seed by seed, with links to the final bundles.
// The HTML page is self-contained: inline style, no script, no external resource.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace kwb {

struct ExperimentReportInput {
  const nlohmann::json* plan = nullptr;                  // kwb.experiment
  const nlohmann::json* analysis = nullptr;              // kwb.experiment_analysis
  const std::vector<nlohmann::json>* records = nullptr;  // kwb.trajectory
  std::filesystem::path storage;                         // links are relative to it
};

std::string experiment_markdown(const ExperimentReportInput& in);
std::string experiment_html(const ExperimentReportInput& in);

}  // namespace kwb
