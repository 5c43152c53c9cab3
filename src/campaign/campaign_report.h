// `kwb campaign report`: storage/report.md and storage/report.html, both rendered from one table of rows built from
// the campaign's state and the ledger's lineages (JSON state is canonical; the two files are views). Per task: the
// candidates ranked by decision (KEEP_CANDIDATE, INCONCLUSIVE, KEEP_BASELINE, INVALID) and then by improvement
// (the geometric mean over workloads), each workload's improvement with its interval and as a speedup factor; the
// jobs without a decision, with why; rejected evidence; the incumbent lineage; a link to every bundle. The HTML
// page is self-contained: inline style, no script, no external resource.
#pragma once

#include "campaign/campaign_state.h"
#include "ledger/ledger.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace kwb {

struct CampaignReportInput {
  const CampaignState* state = nullptr;
  std::filesystem::path storage;                           // links are relative to it
  std::map<std::string, std::vector<Incumbent>> lineages;  // by task name
};

// A speedup factor (A's time over B's) from an improvement in percent: 100 / (100 - improvement).
double speedup_factor(double improvement_pct);

std::string campaign_markdown(const CampaignReportInput& in);
std::string campaign_html(const CampaignReportInput& in);

}  // namespace kwb
