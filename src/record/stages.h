// validate's stages, declared once (docs/evidence-bundle.md, "Stages"): their order, what each needs, the
// comparisons it runs and the evidence it writes. validate's loop, its progress line and its budget figure follow
// this table, and so do verify's checks of stages.json: a stage that should have run and did not, a stage that ran
// without what it needs, and a stage that ran without its evidence.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

enum class Stage {
  freeze,
  check_baseline,
  profile,
  check_candidate,
  controls,
  aa,
  ab,
  final_validation,
  decision,
  // A stage with no work of its own: it records its place in the run and that its needs held. Nothing in kwb's own
  // declaration uses it; tests add one to show that validate and verify follow the declaration.
  marker,
};

struct StageSpec {
  Stage stage = Stage::marker;
  std::string name;
  // The stages that must have ended "ok" for this one to run; when one did not, it is skipped and says which.
  std::vector<Stage> needs;
  // Nothing is judged against the baseline for a candidate that does not build, or that builds to the baseline's own
  // artifact (the same code): such stages are skipped with candidate_skip_reason's words.
  bool needs_candidate_built = false;
  bool optional = false;  // runs only when the plan asks for it (the profile: --no-profile)
  int comparisons = 0;    // timed comparisons it runs per workload (the budget figure)
  // The files it writes whenever it runs (ok or failed); "{control}" stands for each planned control's name.
  std::vector<std::string> evidence;
};

// The table, in run order. The order is the dependency order: every need comes before the stage that needs it.
class StageGraph {
public:
  explicit StageGraph(std::vector<StageSpec> specs);
  const std::vector<StageSpec>& specs() const { return m_specs; }
  size_t size() const { return m_specs.size(); }
  const StageSpec& at(size_t i) const { return m_specs.at(i); }
  // The spec of a stage; nullptr when the graph does not hold it.
  const StageSpec* find(Stage s) const;
  std::optional<size_t> index_of(Stage s) const;
  std::vector<std::string> names() const;
  // Comparisons per workload that this stage and those after it run: what the budget figure still has ahead.
  int comparisons_from(size_t index) const;
  // The spec with `extra` inserted before the stage `before` (tests: a marker stage).
  StageGraph with(StageSpec extra, Stage before) const;

private:
  std::vector<StageSpec> m_specs;
};

// kwb's own declaration: freeze -> check baseline -> profile -> check candidate -> controls -> A/A -> A/B ->
// final validation -> decision.
const StageGraph& validate_stages();

// Why there is nothing to judge the candidate by: it does not build, or it builds to the baseline's code (what the
// loader maps of the two artifacts is the same, util/elf_code.h: the same source, or another source that compiles
// to the same code); "" when there is something to judge.
std::string candidate_skip_reason(bool candidate_built, bool identical_to_baseline);

// Why a stage does not run, given what the stages before it ended with (their stages.json status by stage), why
// there is nothing to judge the candidate by (candidate_skip_reason; "" for a candidate to judge) and whether the
// plan asks for a profile; nullopt when it must run.
std::optional<std::string> stage_skip_reason(const StageGraph& graph, const StageSpec& spec,
                                             const std::vector<std::pair<Stage, std::string>>& ended,
                                             const std::string& nothing_to_judge, bool profile_asked);

}  // namespace kwb
