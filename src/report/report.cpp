#include "report/report.h"

#include "record/decision.h"
#include "report/svg.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/text.h"
#include "util/units.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <map>

namespace kwb {

namespace {

using nlohmann::json;

std::string str(const json& j, const char* key, const std::string& fallback = "-") {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

// The oracle a bundle's plan names: its source file and the start of its SHA-256.
std::string oracle_text(const Plan* plan) {
  if (plan == nullptr) return "-";
  const std::string& sha = plan->task.oracle.source_sha256;
  return fmt::format("{}, SHA-256 {}", plan->task.oracle.source, sha.size() > 12 ? sha.substr(0, 12) + "..." : sha);
}

std::string pct(const json& w, const char* key) {
  if (!w.contains(key) || !w[key].is_number()) return "-";
  return fmt::format("{:+.2f}%", w[key].get<double>());
}

std::string interval(const json& w) {
  if (!w.contains("ci_low_pct") || !w["ci_low_pct"].is_number()) return "-";
  return fmt::format("[{}, {}]", pct(w, "ci_low_pct"), pct(w, "ci_high_pct"));
}

std::string short_hash(const std::string& h) { return h.size() > 12 ? h.substr(0, 12) : h; }

const json* find_workload(const std::optional<json>& cmp, const std::string& name) {
  if (!cmp || !cmp->contains("workloads")) return nullptr;
  for (const json& w : (*cmp)["workloads"]) {
    if (w.value("name", "") == name) return &w;
  }
  return nullptr;
}

// One table in both formats: Markdown rows, or HTML rows.
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;

  std::string markdown() const {
    auto line = [](const std::vector<std::string>& cells) {
      std::string s = "|";
      for (const std::string& c : cells) s += fmt::format(" {} |", escape_markdown(c));
      return s + "\n";
    };
    std::string out = line(header) + "|";
    for (size_t i = 0; i < header.size(); ++i) out += "---|";
    out += "\n";
    for (const auto& r : rows) out += line(r);
    return out;
  }

  std::string html() const {
    std::string out = "<table><thead><tr>";
    for (const std::string& h : header) out += "<th>" + escape_html(h) + "</th>";
    out += "</tr></thead><tbody>\n";
    for (const auto& r : rows) {
      out += "<tr>";
      for (const std::string& c : r) out += "<td>" + escape_html(c) + "</td>";
      out += "</tr>\n";
    }
    return out + "</tbody></table>\n";
  }
};

// Everything both formats show, derived once from the bundle.
struct ReportModel {
  std::string decision, title, scope_line, digest;
  std::vector<std::string> reasons;
  Table workloads, layouts, stages, checks, controls, profile, implementations, environment;
  std::vector<std::string> limits;
  std::vector<std::string> warnings;
};

std::string impl_label(const BundleData& b, ImplRole role) {
  const PlannedImpl* im = b.plan ? b.plan->impl(role) : nullptr;
  return im ? im->source : "?";
}

// The decision's scope; a bundle without a readable decision has none (every field "-").
DecisionScope scope_of(const BundleData& b) {
  if (b.decision) return b.decision->scope;
  return {"-", "-", "-", "-", "", {}, {}};
}

std::string dtypes_of(const DecisionScope& scope) { return fmt::format("{}", fmt::join(scope.dtypes, ", ")); }

// The title, the decision, its reasons and the scope line.
void add_summary(ReportModel& m, const BundleData& b, const Plan* plan) {
  m.decision = b.decision ? std::string(to_string(b.decision->decision)) : "NO DECISION (incomplete bundle)";
  if (b.decision) m.reasons = b.decision->reasons;
  if (!b.decision_problem.empty()) m.warnings.push_back("decision.json: " + b.decision_problem);
  m.title = fmt::format("kwb validate: {} on task {}", m.decision, plan ? plan->task.name : "-");
  // An interrupted run has no decision, but its plan was frozen: the digest is plan.json's own hash.
  std::string why;
  m.digest = b.decision ? b.decision->plan_digest : (b.fs ? b.fs->sha256("plan.json", why).value_or("-") : "-");
  const DecisionScope scope = scope_of(b);
  const std::string dtypes = dtypes_of(scope);
  const std::string workloads = fmt::format("{}", fmt::join(scope.workloads, ", "));
  m.scope_line = fmt::format("machine {} ({}), backend {}{}, dtype {}, workloads {}", scope.machine, scope.host,
                             scope.backend, scope.device.empty() ? "" : " (" + scope.device + ")",
                             dtypes.empty() ? "-" : dtypes, workloads.empty() ? "none" : workloads);
}

// One row per workload: A/B beside A/A.
void add_workloads(ReportModel& m, const BundleData& b) {
  m.workloads.header = {"workload", "improvement (B vs A)", "interval",     "MDE",        "blocks",
                        "verdict",  "A/A (A' vs A)",        "A/A interval", "A/A verdict"};
  std::vector<std::string> names;
  for (const auto* cmp : {&b.ab, &b.aa}) {
    if (!*cmp) continue;
    for (const json& w : (**cmp).value("workloads", json::array())) {
      const std::string n = w.value("name", "?");
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
  }
  for (const std::string& n : names) {
    const json* ab = find_workload(b.ab, n);
    const json* aa = find_workload(b.aa, n);
    const json none = json::object();
    const json& x = ab ? *ab : none;
    const json& y = aa ? *aa : none;
    m.workloads.rows.push_back(
        {n, pct(x, "improvement_pct"), interval(x),
         x.contains("mde_pct") && x["mde_pct"].is_number() ? fmt::format("{:.2f}%", x["mde_pct"].get<double>()) : "-",
         str(x, "blocks"), str(x, "verdict", "not run"), pct(y, "improvement_pct"), interval(y),
         str(y, "verdict", "not run")});
  }
}

// How much each arm's speed depends on where its code, stack and data landed (docs/timing.md, "Layout").
void add_layouts(ReportModel& m, const BundleData& b) {
  m.layouts.header = {"comparison",
                      "workload",
                      "arm",
                      "layouts",
                      "observed spread of per-layout medians (max/min - 1)",
                      "bias-corrected spread",
                      "95% interval",
                      "noise alone (permutation median)",
                      "p (no layout effect)"};
  for (const auto& [tag, cmp] : {std::pair{"A/B", &b.ab}, std::pair{"A/A", &b.aa}}) {
    if (!*cmp) continue;
    for (const json& w : (**cmp).value("workloads", json::array())) {
      const json sens = w.value("layout_sensitivity", json::array());
      for (size_t arm = 0; arm < sens.size() && arm < 2; ++arm) {
        const json& l = sens[arm];
        const bool ok = l.value("available", false);
        m.layouts.rows.push_back(
            {tag, w.value("name", "?"), arm == 0 ? "A" : (std::string(tag) == "A/A" ? "A'" : "B"), str(w, "layouts"),
             ok ? fmt::format("{:.2f}%", l.value("observed_spread_pct", 0.0)) : "too few visits",
             ok ? fmt::format("{:.2f}%", l.value("spread_pct", 0.0)) : "-",
             ok ? fmt::format("[{:.2f}%, {:.2f}%]", l.value("ci_low_pct", 0.0), l.value("ci_high_pct", 0.0)) : "-",
             ok ? fmt::format("{:.2f}%", l.value("null_spread_pct", 0.0)) : "-",
             ok ? fmt::format("{:.4f}", l.value("p_value", 1.0)) : "-"});
      }
    }
  }
}

void add_stages_checks_and_controls(ReportModel& m, const BundleData& b) {
  m.stages.header = {"stage", "status", "seconds", "summary"};
  for (const json& s : b.stages.value("stages", json::array())) {
    m.stages.rows.push_back({str(s, "name"), str(s, "status"),
                             s.contains("seconds") ? fmt::format("{:.1f}", s["seconds"].get<double>()) : "-",
                             str(s, "summary", "")});
  }

  m.checks.header = {"check", "verdict", "assertions passed", "failed", "failure reasons"};
  for (const char* key : {"baseline", "candidate", "candidate_final"}) {
    auto it = b.checks.find(key);
    if (it == b.checks.end()) continue;
    const json& c = it->second;
    std::vector<std::string> reasons;
    for (const json& f : c.value("failures", json::array())) {
      const std::string r = f.value("reason", "?");
      if (std::find(reasons.begin(), reasons.end(), r) == reasons.end()) reasons.push_back(r);
    }
    // A check that stopped at a worker failure says how many cases it did not run.
    const size_t not_run = c.value("not_run", json::array()).size();
    std::string why = reasons.empty() ? "-" : fmt::format("{}", fmt::join(reasons, ", "));
    if (not_run > 0) why += fmt::format("; {} case(s) not run", not_run);
    m.checks.rows.push_back({key, str(c, "verdict"), str(c.value("assertions", json::object()), "passed"),
                             str(c.value("assertions", json::object()), "failed"), why});
  }

  m.controls.header = {"control", "must provoke", "rejected", "reasons found", "metric"};
  for (const json& c : b.controls.value("controls", json::array())) {
    std::string reasons;
    for (const json& r : c.value("reasons", json::array()))
      reasons += (reasons.empty() ? "" : ", ") + r.get<std::string>();
    m.controls.rows.push_back({str(c, "name"), str(c, "expect"), c.value("rejected", false) ? "yes" : "NO",
                               reasons.empty() ? "-" : reasons,
                               c.value("timing_refused", false) ? "none (refused)" : "TIMED"});
  }
}

// One profile row: structural counts per call, and the top functions (or, on a device backend, its kernels).
std::vector<std::string> profile_row(const std::string& stem, const json& w) {
  const json ins = w.value("instructions", json::object());
  const json alloc = w.value("allocations", json::object());
  const json roof = w.value("roofline", json::object());
  std::string top;
  int shown = 0;
  for (const json& f : ins.value("functions", json::array())) {
    if (shown++ == 7) break;
    top += fmt::format("{}{} {:.0f}%", top.empty() ? "" : ", ", f.value("short_name", f.value("name", "?")),
                       100.0 * f.value("self_share", 0.0));
  }
  auto num = [](const json& j, const char* k, const char* f) {
    return j.value("available", j.value("measured", false)) && j.contains(k) && j[k].is_number()
               ? fmt::format(fmt::runtime(f), j[k].get<double>())
               : std::string("unavailable");
  };
  // Device backends: the kernel trace takes the place of callgrind's functions.
  const json dev = w.value("device", json::object());
  if (dev.value("available", false)) {
    std::vector<std::string> kernels;
    for (const json& k : dev.value("kernels", json::array())) {
      kernels.push_back(fmt::format("{} {}", k.value("name", "?"), time_text(k.value("median_device_ns", 0.0))));
    }
    top = fmt::format("{:g} device command(s)/call: {}", dev.value("commands_per_call", 0.0), fmt::join(kernels, ", "));
  }
  return std::vector<std::string>(
      {stem, w.value("name", "?"), num(ins, "instructions_per_call", "{:.0f}"),
       num(ins, "d1_misses_per_call", "{:.0f}"), num(alloc, "count_per_call", "{:.1f}"),
       roof.value("measured", false)
           ? (roof.contains("fraction_of_probe") ? fmt::format("{:.2f} ({:.2f})", roof.value("achieved_gb_per_s", 0.0),
                                                               roof.value("fraction_of_probe", 0.0))
                                                 : fmt::format("{:.2f}", roof.value("achieved_gb_per_s", 0.0)))
           : "unavailable",
       top.empty() ? "-" : top});
}

void add_profile(ReportModel& m, const BundleData& b) {
  m.profile.header = {"implementation",
                      "workload",
                      "instructions/call",
                      "D1 misses/call",
                      "allocations/call",
                      "GB/s (of probe)",
                      "functions (share of instructions) or device kernels (time per launch)"};
  for (const auto& [stem, p] : b.profiles) {
    for (const json& w : p.value("workloads", json::array())) m.profile.rows.push_back(profile_row(stem, w));
  }
}

void add_implementations_and_environment(ReportModel& m, const BundleData& b, const Plan* plan) {
  m.implementations.header = {"role", "source", "source sha256", "artifact sha256", "built"};
  for (const PlannedImpl& im : plan ? plan->implementations : std::vector<PlannedImpl>{}) {
    m.implementations.rows.push_back(
        {std::string(to_string(im.role)) + (im.role == ImplRole::control ? " " + im.name : ""), im.source,
         short_hash(im.source_sha256()), short_hash(im.artifact_sha256()), im.built ? "yes" : "NO"});
  }
  m.environment.header = {"item", "value"};
  for (const char* k : {"cpu_model", "logical_cores", "governor", "kernel", "compiler", "memory_total"}) {
    m.environment.rows.push_back({k, str(b.environment, k)});
  }
  if (plan) {
    m.environment.rows.push_back(
        {"kwb", fmt::format("{} (git {}, binary {})", plan->kwb.version, short_hash(plan->kwb.git_sha),
                            short_hash(plan->kwb.binary_sha256))});
    if (std::optional<std::string> w = provenance_warning(*plan)) m.warnings.push_back(*w);
  } else {
    m.warnings.push_back("plan.json: " + b.plan_problem);
  }
  for (const json& w : b.environment.value("warnings", json::array())) m.warnings.push_back(w.get<std::string>());
}

// Each output's tolerance, in words: "within rtol 0.0001 and atol 1e-06" for one output, "y within ..., idx
// exactly" for several.
std::string tolerance_text(const Plan* plan) {
  if (plan == nullptr || plan->task.tolerances.empty()) return "within its tolerance";
  std::vector<std::string> parts;
  for (const PlannedTolerance& t : plan->task.tolerances) {
    std::string rule = t.mode == "exact" ? "exactly"
                       : t.mode == "ulp" ? fmt::format("within {} ulp", t.ulp)
                                         : fmt::format("within rtol {} and atol {}", t.rtol, t.atol);
    parts.push_back(plan->task.tolerances.size() == 1 ? rule : fmt::format("{} {}", t.output, rule));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// What the decision does not cover.
void add_limits(ReportModel& m, const BundleData& b, const Plan* plan) {
  const DecisionScope scope = scope_of(b);
  const std::string dtypes = dtypes_of(scope);
  m.limits = {
      fmt::format("Holds for this machine ({}), the {} backend, dtype {} and the workloads above only; other shapes, "
                  "dtypes or machines were not measured.",
                  scope.machine, scope.backend, dtypes.empty() ? "-" : dtypes),
      fmt::format("Correctness is judged against the task's oracle ({}) {} on the task's cases and on fresh data "
                  "at final validation; inputs outside those cases were not tried.",
                  oracle_text(plan), tolerance_text(plan)),
      fmt::format("Intervals are per-block log-ratio intervals at the confidence each look spent (alpha {} spread "
                  "over looks); an effect smaller than the MDE shown could go undetected.",
                  plan ? fmt::format("{}", plan->gates.alpha) : "-"),
      "Timings are host wall-clock times of single calls with warm caches for inputs that fit in them; the profile "
      "section is descriptive and never part of the decision."};
}

ReportModel build_model(const BundleData& b) {
  ReportModel m;
  const Plan* plan = b.plan ? &*b.plan : nullptr;
  add_summary(m, b, plan);
  add_workloads(m, b);
  add_layouts(m, b);
  add_stages_checks_and_controls(m, b);
  add_profile(m, b);
  add_implementations_and_environment(m, b, plan);
  add_limits(m, b, plan);
  return m;
}

}  // namespace

std::string render_markdown(const BundleData& b) {
  // Every string that came from the bundle (and so, possibly, from a candidate: its file name, its failure details)
  // is escaped: the report shows it, it never becomes Markdown structure.
  const ReportModel m = build_model(b);
  auto md = [](const std::string& t) { return escape_markdown(t); };
  std::string out = fmt::format("# {}\n\n", md(m.title));
  out += fmt::format("**Decision: {}**  \n", md(m.decision));
  out += fmt::format("Candidate {} vs baseline {}.  \n", md(impl_label(b, ImplRole::candidate)),
                     md(impl_label(b, ImplRole::baseline)));
  out += fmt::format("Scope: {}.  \nPlan digest: {}\n\n", md(m.scope_line), md(m.digest));
  for (const std::string& r : m.reasons) out += fmt::format("- {}\n", escape_markdown(r, true));
  out += "\n## Workloads\n\n" + m.workloads.markdown();
  if (!m.layouts.rows.empty()) out += "\n## Layout sensitivity\n\n" + m.layouts.markdown();
  out += "\n## Stages\n\n" + m.stages.markdown();
  out += "\n## Correctness checks\n\n" + m.checks.markdown();
  out +=
      "\n## Error controls\n\nEach control is a deliberately broken implementation; each must be rejected for "
      "the reason named, and none may be timed.\n\n" +
      m.controls.markdown();
  if (!m.profile.rows.empty()) out += "\n## Profile (descriptive, never a verdict)\n\n" + m.profile.markdown();
  out += "\n## Identity\n\n" + m.implementations.markdown();
  out += "\n## Environment\n\n" + m.environment.markdown();
  if (!m.warnings.empty()) {
    out += "\nWarnings about this machine:\n\n";
    for (const std::string& w : m.warnings) out += fmt::format("- {}\n", escape_markdown(w, true));
  }
  out += "\n## Limits of this claim\n\n";
  for (const std::string& l : m.limits) out += fmt::format("- {}\n", escape_markdown(l, true));
  out += "\nRe-check everything above from the raw data with `kwb verify <bundle>`.\n";
  return out;
}

namespace {

std::vector<double> timed_ns(const BundleData& b, const std::string& cmp, const std::string& workload,
                             const std::string& arm) {
  std::vector<double> v;
  for (const SampleRow& s : b.samples) {
    if (s.comparison == cmp && s.workload == workload && s.arm == arm && !s.warmup && s.block >= 0 && s.output_valid) {
      v.push_back(static_cast<double>(s.ns));
    }
  }
  return v;
}

std::string ratio_panel(const json& w, const std::string& title, const std::vector<svg::Line>& lines) {
  std::vector<double> per_block;
  for (const json& d : w.value("log_ratios", json::array()))
    per_block.push_back((1.0 - std::exp(d.get<double>())) * 100.0);
  svg::Band band;
  if (w.contains("ci_low_pct") && w["ci_low_pct"].is_number() && w.contains("ci_high_pct") &&
      w["ci_high_pct"].is_number()) {
    band = {
        w["ci_low_pct"].get<double>(), w["ci_high_pct"].get<double>(),
        fmt::format("interval [{:+.2f}%, {:+.2f}%]", w["ci_low_pct"].get<double>(), w["ci_high_pct"].get<double>())};
  }
  return svg::index_plot(title, "improvement per block (%)", per_block, band, lines);
}

}  // namespace

std::string render_html(const BundleData& b) {
  const ReportModel m = build_model(b);
  const double bar = b.plan ? b.plan->gates.min_improvement_pct : 0.0;
  const double aa_bound = b.plan ? b.plan->gates.max_aa_difference_pct : 1.0;
  // Red for INVALID and for anything the bundle says that is not a decision.
  const std::optional<DecisionKind> decision = parse_decision(m.decision);
  const std::string color = decision == DecisionKind::keep_candidate  ? "#1a7f37"
                            : decision == DecisionKind::keep_baseline ? "#9a6700"
                            : decision == DecisionKind::inconclusive  ? "#57606a"
                                                                      : "#cf222e";
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape_html(m.title) +
      "</title>\n<style>body{font:14px/1.45 system-ui,sans-serif;max-width:980px;margin:24px auto;padding:0 16px;"
      "color:#1f2328}table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #d0d7de;padding:4px 8px;"
      "text-align:left;vertical-align:top}th{background:#f6f8fa}.badge{display:inline-block;padding:6px 14px;"
      "border-radius:6px;color:#fff;font-weight:700;font-size:20px}code{background:#f6f8fa;padding:1px 4px}"
      "svg{display:block;margin:8px 0 18px;border:1px solid #eee}svg .t{font-weight:600;font-size:13px}"
      "svg .tick{font-size:11px;fill:#555}svg .lab{font-size:12px}svg .ax{stroke:#555}svg .grid{stroke:#eee}</style>"
      "</head><body>\n";
  out += fmt::format("<h1>{}</h1>\n<p><span class=\"badge\" style=\"background:{}\">{}</span></p>\n",
                     escape_html(m.title), color, escape_html(m.decision));
  out += fmt::format(
      "<p>Candidate <code>{}</code> vs baseline <code>{}</code><br>Scope: {}<br>Plan digest: "
      "<code>{}</code></p>\n<ul>",
      escape_html(impl_label(b, ImplRole::candidate)), escape_html(impl_label(b, ImplRole::baseline)),
      escape_html(m.scope_line), escape_html(m.digest));
  for (const std::string& r : m.reasons) out += "<li>" + escape_html(r) + "</li>";
  out += "</ul>\n<h2>Workloads</h2>\n" + m.workloads.html();
  for (const auto& row : m.workloads.rows) {
    const std::string& n = row[0];
    out += fmt::format("<h3>{}</h3>\n", escape_html(n));
    std::vector<svg::Series> series = {{"A (A/A)", "#4a90d9", timed_ns(b, "aa", n, "A")},
                                       {"A' (A/A)", "#7b61ff", timed_ns(b, "aa", n, "A'")},
                                       {"A (A/B)", "#4a90d9", timed_ns(b, "ab", n, "A")},
                                       {"B (A/B)", "#e8590c", timed_ns(b, "ab", n, "B")}};
    out += svg::strip_plot(fmt::format("{}: time per call, every timed sample (log scale)", n), "ns", series);
    if (const json* ab = find_workload(b.ab, n)) {
      out += ratio_panel(*ab, fmt::format("{}: B vs A per block, with the decision interval and the gate", n),
                         {{bar, fmt::format("gate {:+g}%", bar), "#cf222e"}, {0.0, "no change", "#888"}});
    }
    if (const json* aa = find_workload(b.aa, n)) {
      out += ratio_panel(*aa, fmt::format("{}: A/A panel, A' vs A per block (must stay within +-{}%)", n, aa_bound),
                         {{aa_bound, fmt::format("+{}%", aa_bound), "#9a6700"},
                          {-aa_bound, fmt::format("-{}%", aa_bound), "#9a6700"}});
    }
  }
  if (!m.layouts.rows.empty()) out += "<h2>Layout sensitivity</h2>\n" + m.layouts.html();
  out += "<h2>Stages</h2>\n" + m.stages.html();
  out += "<h2>Correctness checks</h2>\n" + m.checks.html();
  out += "<h2>Error controls</h2>\n" + m.controls.html();
  if (!m.profile.rows.empty()) out += "<h2>Profile (descriptive, never a verdict)</h2>\n" + m.profile.html();
  out += "<h2>Identity</h2>\n" + m.implementations.html();
  out += "<h2>Environment</h2>\n" + m.environment.html();
  if (!m.warnings.empty()) {
    out += "<ul>";
    for (const std::string& w : m.warnings) out += "<li>" + escape_html(w) + "</li>";
    out += "</ul>\n";
  }
  out += "<h2>Limits of this claim</h2>\n<ul>";
  for (const std::string& l : m.limits) out += "<li>" + escape_html(l) + "</li>";
  out +=
      "</ul>\n<p>Re-check everything above from the raw data with <code>kwb verify &lt;bundle&gt;</code>.</p>\n"
      "</body></html>\n";
  return out;
}

void write_reports(const std::filesystem::path& dir) {
  BundleData b = read_bundle(dir);
  if (!b.fs || !b.fs->ok()) throw Error(ExitCode::io_error, b.problems.empty() ? dir.string() : b.problems.front());
  // A bundle with a symlink (or a FIFO, a device) is not one kwb wrote, and writing into it could land elsewhere.
  for (const BundleFs::Entry& e : b.entries) {
    if (e.kind == BundleFs::Kind::symlink || e.kind == BundleFs::Kind::other) {
      throw Error(ExitCode::invalid,
                  fmt::format("{}: {} is {}; kwb writes only into bundles of regular files and "
                              "folders (run kwb verify {})",
                              dir.string(), e.rel,
                              e.kind == BundleFs::Kind::symlink ? "a symlink" : "not a regular file", dir.string()));
    }
  }
  std::string md, html;
  try {
    md = render_markdown(b);
    html = render_html(b);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ExitCode::invalid, fmt::format("{}: a value in the bundle has the wrong type ({}); run kwb verify {} "
                                               "for the file and field",
                                               dir.string(), e.what(), dir.string()));
  }
  write_file_atomic(dir / "report.md", md);
  write_file_atomic(dir / "report.html", html);
}

}  // namespace kwb
