#include "record/stages.h"

#include "util/error.h"

#include <fmt/format.h>

namespace kwb {

StageGraph::StageGraph(std::vector<StageSpec> specs) : m_specs(std::move(specs)) {
  for (size_t i = 0; i < m_specs.size(); ++i) {
    for (Stage need : m_specs[i].needs) {
      const std::optional<size_t> at = index_of(need);
      if (!at || *at >= i) {
        throw InternalError(fmt::format("stage {} needs a stage that does not come before it", m_specs[i].name));
      }
    }
  }
}

const StageSpec* StageGraph::find(Stage s) const {
  for (const StageSpec& spec : m_specs) {
    if (spec.stage == s) return &spec;
  }
  return nullptr;
}

std::optional<size_t> StageGraph::index_of(Stage s) const {
  for (size_t i = 0; i < m_specs.size(); ++i) {
    if (m_specs[i].stage == s) return i;
  }
  return std::nullopt;
}

std::vector<std::string> StageGraph::names() const {
  std::vector<std::string> out;
  for (const StageSpec& s : m_specs) out.push_back(s.name);
  return out;
}

int StageGraph::comparisons_from(size_t index) const {
  int n = 0;
  for (size_t i = index; i < m_specs.size(); ++i) n += m_specs[i].comparisons;
  return n;
}

StageGraph StageGraph::with(StageSpec extra, Stage before) const {
  std::vector<StageSpec> specs = m_specs;
  const std::optional<size_t> at = index_of(before);
  specs.insert(at ? specs.begin() + static_cast<std::ptrdiff_t>(*at) : specs.end(), std::move(extra));
  return StageGraph(std::move(specs));
}

const StageGraph& validate_stages() {
  using S = Stage;
  static const StageGraph graph({
      {S::freeze, "freeze", {}, false, false, 0, {"plan.json", "environment.json"}},
      {S::check_baseline, "check_baseline", {S::freeze}, true, false, 0, {"checks/baseline.json"}},
      {S::profile, "profile", {S::freeze}, true, true, 0, {}},
      {S::check_candidate, "check_candidate", {S::freeze}, false, false, 0, {"checks/candidate.json"}},
      {S::controls, "controls", {S::freeze}, true, false, 0, {"controls.json", "checks/control_{control}.json"}},
      {S::aa, "aa", {S::check_baseline, S::check_candidate}, false, false, 1, {"comparisons/aa.json"}},
      {S::ab, "ab", {S::check_baseline, S::check_candidate, S::aa}, false, false, 1, {"comparisons/ab.json"}},
      {S::final_validation, "final_validation", {S::freeze}, false, false, 0, {"final.json"}},
      {S::decision, "decision", {}, false, false, 0, {"decision.json"}},
  });
  return graph;
}

std::string candidate_skip_reason(bool candidate_built, bool identical_to_baseline) {
  if (!candidate_built) {
    return "skipped: the candidate does not build (checks/candidate.json has the compiler's output); nothing is "
           "judged against the baseline";
  }
  if (identical_to_baseline) {
    return "skipped: the candidate builds to the baseline's code (the same mapped bytes, util/elf_code.h); the "
           "same code has nothing to be judged by";
  }
  return "";
}

std::optional<std::string> stage_skip_reason(const StageGraph& graph, const StageSpec& spec,
                                             const std::vector<std::pair<Stage, std::string>>& ended,
                                             const std::string& nothing_to_judge, bool profile_asked) {
  for (Stage need : spec.needs) {
    std::string status = "not run";
    for (const auto& [s, st] : ended) {
      if (s == need) status = st;
    }
    if (status != "ok") {
      const std::string& name = graph.find(need)->name;
      return status == "failed"    ? fmt::format("skipped: {} failed, and this stage needs it", name)
             : status == "error"   ? fmt::format("skipped: {} stopped on an error, and this stage needs it", name)
             : status == "skipped" ? fmt::format("skipped: {} was skipped, and this stage needs it", name)
                                   : fmt::format("skipped: {} is '{}', and this stage needs it", name, status);
    }
  }
  if (spec.needs_candidate_built && !nothing_to_judge.empty()) return nothing_to_judge;
  if (spec.optional && !profile_asked) {
    return "skipped: --no-profile (the profile is descriptive; the decision never depends on it)";
  }
  return std::nullopt;
}

}  // namespace kwb
