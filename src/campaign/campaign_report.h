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
  // The keys whose bundles this machine accepts, as (name, 64 hex digits): its own ("this machine") and each
  // trusted/<name>.pub. Listed in the report; each decided job's signer is named from them.
  std::vector<std::pair<std::string, std::string>> trusted_keys;
};

// One line of a report table, as plain text per column; each view escapes it its own way.
struct ReportRow {
  std::vector<std::string> cells;
  std::string link;  // a relative path, rendered in the last column (a table with links)
  std::string link_text = "bundle";
};

struct ReportTable {
  std::vector<std::string> header;  // with links: the last column's header too
  std::vector<ReportRow> rows;
  bool links = true;  // whether the rows end with a link column
};

// A table as Markdown ("(none)" when it has no rows) and as HTML, every cell escaped.
std::string md_table(const ReportTable& t);
std::string html_table(const ReportTable& t);

// A speedup factor (A's time over B's) from an improvement in percent: 100 / (100 - improvement).
double speedup_factor(double improvement_pct);

std::string campaign_markdown(const CampaignReportInput& in);
std::string campaign_html(const CampaignReportInput& in);

}  // namespace kwb
