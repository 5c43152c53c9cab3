#include "campaign/campaign_report.h"

#include "util/text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace kwb {

namespace fs = std::filesystem;

namespace {

using Row = ReportRow;
using Table = ReportTable;

struct TaskSection {
  std::string task;
  std::string backend;
  std::string mixed;  // a warning when the ranking's jobs were timed on different machines; "" when not
  Table ranking;      // decided jobs
  Table undecided;    // every other current job
  Table lineage;
};

struct Report {
  std::string name;
  Table keys;  // the trusted keys
  std::string campaign_file;
  std::string updated;
  std::vector<std::pair<std::string, size_t>> counts;
  std::vector<TaskSection> tasks;
  Table rejected;  // every attempt whose bundle was refused
};

int decision_rank(const std::string& d) {
  static const std::vector<std::string> order = {"KEEP_CANDIDATE", "INCONCLUSIVE", "KEEP_BASELINE", "INVALID"};
  const auto it = std::find(order.begin(), order.end(), d);
  return static_cast<int>(it - order.begin());
}

// A factor as a person reads it: "1.06x" faster, "1.01x slower" (1/f) when below one.
std::string speedup_text(double f) {
  return f >= 1.0 ? fmt::format("{:.2f}x", f) : fmt::format("{:.2f}x slower", 1.0 / f);
}

std::string workload_text(const LedgerWorkload& w) {
  if (!w.improvement_pct) return fmt::format("{}: {}", w.name, w.verdict.empty() ? "no estimate" : w.verdict);
  std::string s = fmt::format("{}: {:+.2f}%", w.name, *w.improvement_pct);
  if (w.ci_low_pct && w.ci_high_pct) s += fmt::format(" [{:+.2f}, {:+.2f}]", *w.ci_low_pct, *w.ci_high_pct);
  if (*w.improvement_pct < 100.0) s += ", " + speedup_text(speedup_factor(*w.improvement_pct));
  // The interval's bounds as factors, in the same order (a higher improvement is a larger factor).
  // (plain factors: below 1x is slower).
  if (w.ci_low_pct && w.ci_high_pct && *w.ci_high_pct < 100.0) {
    s += fmt::format(" [{:.2f}x, {:.2f}x]", speedup_factor(*w.ci_low_pct), speedup_factor(*w.ci_high_pct));
  }
  return s + " " + w.verdict;
}

std::string link_of(const fs::path& storage, const std::string& bundle) {
  if (bundle.empty() || !fs::exists(bundle)) return "";
  const fs::path target =
      fs::exists(fs::path(bundle) / "report.html") ? fs::path(bundle) / "report.html" : fs::path(bundle);
  return target.lexically_relative(storage).string();
}

// A signer as the report names it: the trusted key's name, or its first 16 hex digits when no trusted key is it.
std::string signer_name(const std::string& key, const std::vector<std::pair<std::string, std::string>>& trusted) {
  if (key.empty()) return "-";
  for (const auto& [name, hex] : trusted) {
    if (hex == key) return name;
  }
  return key.substr(0, 16);
}

Table ranking(const std::vector<const Job*>& jobs, const fs::path& storage,
              const std::vector<std::pair<std::string, std::string>>& trusted) {
  std::vector<const Job*> ranked;
  for (const Job* j : jobs) {
    if (j->outcome == JobOutcome::decided) ranked.push_back(j);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Job* a, const Job* b) {
    if (decision_rank(a->decision) != decision_rank(b->decision)) {
      return decision_rank(a->decision) < decision_rank(b->decision);
    }
    return summary_improvement_pct(a->workloads) > summary_improvement_pct(b->workloads);
  });
  Table t{
      {"rank", "candidate", "decision", "improvement (geomean)",
       "workloads: improvement [95% interval], speedup [interval], verdict", "node", "machine", "signed by", "bundle"},
      {}};
  for (size_t i = 0; i < ranked.size(); ++i) {
    const Job& j = *ranked[i];
    std::vector<std::string> ws;
    for (const LedgerWorkload& w : j.workloads) ws.push_back(workload_text(w));
    const double g = summary_improvement_pct(j.workloads);
    t.rows.push_back({{std::to_string(i + 1), fs::path(j.candidate).filename().string(), j.decision,
                       j.workloads.empty() ? "-" : fmt::format("{:+.2f}% ({})", g, speedup_text(speedup_factor(g))),
                       ws.empty() ? "- (not timed)" : fmt::format("{}", fmt::join(ws, "; ")),
                       j.node.empty() ? (j.host.empty() ? "-" : j.host) : j.node, j.machine.empty() ? "-" : j.machine,
                       signer_name(j.signer, trusted)},
                      link_of(storage, j.bundle)});
  }
  return t;
}

// "" when every decided job was timed on one machine; else the warning, with each machine and its count. A factor
// measured on one CPU says nothing about another's: rank within one (executor.constraint or nodelist).
std::string mixed_machines(const std::vector<const Job*>& jobs) {
  std::map<std::string, size_t> machines;
  for (const Job* j : jobs) {
    if (j->outcome == JobOutcome::decided) ++machines[j->machine.empty() ? "unknown" : j->machine];
  }
  if (machines.size() < 2) return "";
  std::vector<std::string> parts;
  parts.reserve(machines.size());
  for (const auto& [m, n] : machines) parts.push_back(fmt::format("{} on {}", n, m));
  return fmt::format(
      "WARNING: this ranking mixes machines ({}): each job compared its candidate with the baseline on its own node, "
      "so each decision stands, but improvements from different machines are not comparable with each other; pin "
      "the jobs to one kind of node with executor.constraint or executor.nodelist",
      fmt::join(parts, "; "));
}

Table undecided(const std::vector<const Job*>& jobs, const fs::path& storage) {
  Table t{{"candidate", "state", "attempt", "job", "Slurm state (reason)", "why", "bundle"}, {}};
  for (const Job* j : jobs) {
    if (j->outcome == JobOutcome::decided) continue;
    const std::string state =
        j->phase == JobPhase::ended ? std::string(to_string(j->outcome)) : std::string(to_string(j->phase));
    t.rows.push_back(
        {{fs::path(j->candidate).filename().string(), state, std::to_string(j->attempt),
          j->handle.empty() ? "-" : j->executor + " " + j->handle,
          j->scheduler_state.empty() ? "-" : fmt::format("{} ({})", j->scheduler_state, j->scheduler_reason),
          j->detail.empty() ? "-" : j->detail},
         link_of(storage, j->bundle)});
  }
  return t;
}

Table lineage_table(const std::vector<Incumbent>& line, const fs::path& storage) {
  Table t{{"generation", "source", "identity", "over parent", "over baseline", "kept", "bundle"}, {}};
  for (const Incumbent& i : line) {
    t.rows.push_back({{std::to_string(i.generation), i.source, i.identity.substr(0, 12),
                       i.generation == 0 ? "-" : fmt::format("{:+.2f}%", i.improvement_pct),
                       fmt::format("{:+.2f}%", i.cumulative_pct), i.kept.empty() ? "-" : i.kept},
                      link_of(storage, i.bundle)});
  }
  return t;
}

Report build(const CampaignReportInput& in) {
  const CampaignState& s = *in.state;
  Report r{s.name,
           {{"name", "public key"}, {}, false},
           s.campaign_file,
           s.updated,
           {},
           {},
           {{"candidate", "attempt", "why it was refused", "bundle"}, {}}};
  for (const auto& [name, hex] : in.trusted_keys) r.keys.rows.push_back({{name, hex}, ""});
  std::map<std::string, size_t> counts;
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Job*>> by_task;
  for (const Job& j : s.jobs) {
    for (const JobAttempt& a : j.earlier) {
      if (a.outcome == JobOutcome::rejected) {
        r.rejected.rows.push_back({{fs::path(j.candidate).filename().string(), std::to_string(a.attempt), a.detail},
                                   link_of(in.storage, a.bundle)});
      }
    }
    if (!j.current) continue;
    if (j.outcome == JobOutcome::rejected) {
      r.rejected.rows.push_back({{fs::path(j.candidate).filename().string(), std::to_string(j.attempt), j.detail},
                                 link_of(in.storage, j.bundle)});
    }
    ++counts[j.phase == JobPhase::ended ? std::string(to_string(j.outcome)) : std::string(to_string(j.phase))];
    if (!by_task.contains(j.task)) order.push_back(j.task);
    by_task[j.task].push_back(&j);
  }
  r.counts.assign(counts.begin(), counts.end());
  for (const std::string& task : order) {
    const std::vector<const Job*>& jobs = by_task[task];
    TaskSection t{task,
                  std::string(to_string(jobs.front()->backend)),
                  mixed_machines(jobs),
                  ranking(jobs, in.storage, in.trusted_keys),
                  undecided(jobs, in.storage),
                  {}};
    if (const auto it = in.lineages.find(task); it != in.lineages.end())
      t.lineage = lineage_table(it->second, in.storage);
    r.tasks.push_back(std::move(t));
  }
  return r;
}

}  // namespace

// ---- Markdown -------------------------------------------------------------------------------------------------------

std::string md_table(const Table& t) {
  if (t.rows.empty()) return "(none)\n";
  std::string out = "| " + fmt::format("{}", fmt::join(t.header, " | ")) + " |\n|";
  for (size_t i = 0; i < t.header.size(); ++i) out += "---|";
  out += "\n";
  for (const Row& r : t.rows) {
    out += "|";
    for (const std::string& c : r.cells) out += " " + escape_markdown(c) + " |";
    if (t.links) out += r.link.empty() ? " - |" : fmt::format(" [{}]({}) |", escape_markdown(r.link_text), r.link);
    out += "\n";
  }
  return out;
}

// ---- HTML -----------------------------------------------------------------------------------------------------------

std::string html_table(const Table& t) {
  if (t.rows.empty()) return "<p>(none)</p>\n";
  std::string out = "<table>\n<tr>";
  for (const std::string& h : t.header) out += "<th>" + escape_html(h) + "</th>";
  out += "</tr>\n";
  for (const Row& r : t.rows) {
    out += "<tr>";
    for (const std::string& c : r.cells) out += "<td>" + escape_html(c) + "</td>";
    if (t.links) {
      out += r.link.empty()
                 ? "<td>-</td>"
                 : fmt::format("<td><a href=\"{}\">{}</a></td>", escape_html(r.link), escape_html(r.link_text));
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

double speedup_factor(double improvement_pct) { return 100.0 / (100.0 - improvement_pct); }

std::string campaign_markdown(const CampaignReportInput& in) {
  const Report r = build(in);
  std::string out = fmt::format("# Campaign {}\n\ncampaign file: {}  \nstate updated: {}\n\n", escape_markdown(r.name),
                                escape_markdown(r.campaign_file), r.updated);
  std::vector<std::string> counts;
  for (const auto& [k, n] : r.counts) counts.push_back(fmt::format("{} {}", n, k));
  out += fmt::format("jobs: {}\n", counts.empty() ? "none" : fmt::format("{}", fmt::join(counts, ", ")));
  for (const TaskSection& t : r.tasks) {
    out += fmt::format("\n## Task {} ({})\n\n### Ranking\n\n", escape_markdown(t.task), t.backend);
    if (!t.mixed.empty()) out += "**" + escape_markdown(t.mixed) + "**\n\n";
    out += md_table(t.ranking);
    out += "\nImprovement is (A - B) / A for times per call, with its 95% interval; speedup is A / B.\n";
    out += "\n### Jobs without a decision\n\n" + md_table(t.undecided);
    out += "\n### Incumbent lineage (the ledger)\n\n" + md_table(t.lineage);
  }
  out +=
      "\n## Rejected evidence\n\nBundles that failed verify or authentication, or were not their job's: never in "
      "the ledger, never kept.\n\n" +
      md_table(r.rejected);
  out +=
      "\n## Trusted keys\n\nThe keys whose signed bundles this machine accepts (kwb campaign trust enrols a "
      "node's).\n\n" +
      md_table(r.keys);
  return out;
}

std::string campaign_html(const CampaignReportInput& in) {
  const Report r = build(in);
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Campaign {name}</title>\n"
      "<style>\nbody{{font-family:sans-serif;margin:2em;max-width:80em}}table{{border-collapse:collapse;margin:.5em 0}}"
      "th,td{{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top}}th{{background:#eee}}"
      "</style>\n</head>\n<body>\n<h1>Campaign {name}</h1>\n<p>campaign file: {file}<br>state updated: {updated}</p>\n",
      fmt::arg("name", escape_html(r.name)), fmt::arg("file", escape_html(r.campaign_file)),
      fmt::arg("updated", escape_html(r.updated)));
  std::vector<std::string> counts;
  for (const auto& [k, n] : r.counts) counts.push_back(fmt::format("{} {}", n, k));
  out += fmt::format("<p id=\"counts\">jobs: {}</p>\n", escape_html(fmt::format("{}", fmt::join(counts, ", "))));
  for (const TaskSection& t : r.tasks) {
    out += fmt::format("<h2>Task {} ({})</h2>\n<h3>Ranking</h3>\n", escape_html(t.task), escape_html(t.backend));
    if (!t.mixed.empty()) out += "<p class=\"warning\"><strong>" + escape_html(t.mixed) + "</strong></p>\n";
    out += html_table(t.ranking);
    out += "<p>Improvement is (A - B) / A for times per call, with its 95% interval; speedup is A / B.</p>\n";
    out += "<h3>Jobs without a decision</h3>\n" + html_table(t.undecided);
    out += "<h3>Incumbent lineage (the ledger)</h3>\n" + html_table(t.lineage);
  }
  out +=
      "<h2>Rejected evidence</h2>\n<p>Bundles that failed verify or authentication, or were not their job's: never "
      "in the ledger, never kept.</p>\n" +
      html_table(r.rejected);
  out +=
      "<h2>Trusted keys</h2>\n<p>The keys whose signed bundles this machine accepts (kwb campaign trust enrols a "
      "node's).</p>\n" +
      html_table(r.keys);
  return out + "</body>\n</html>\n";
}

}  // namespace kwb
