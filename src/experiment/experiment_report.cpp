#include "experiment/experiment_report.h"

#include "campaign/campaign_report.h"
#include "util/text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <map>
#include <optional>

namespace kwb {

namespace fs = std::filesystem;

namespace {

// One letter per attempt category, for the attempt sequences.
const std::vector<std::pair<std::string, std::string>> k_letters = {
    {"kept", "K"},    {"slower", "S"},    {"inconclusive", "?"}, {"incorrect", "X"},
    {"cheat", "C"},   {"not_built", "B"}, {"controls", "T"},     {"invalid", "I"},
    {"sandbox", "V"}, {"budget", "$"},    {"no_candidate", "N"}, {"error", "E"}};

std::string letter(const std::string& category) {
  for (const auto& [c, l] : k_letters) {
    if (c == category) return l;
  }
  return "E";
}

std::string legend() {
  std::vector<std::string> parts;
  parts.reserve(k_letters.size());
  for (const auto& [c, l] : k_letters) parts.push_back(l + " " + c);
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string ratio_text(double log_value) { return fmt::format("{:.3f}x", std::exp(log_value)); }

std::string pct(double v) { return fmt::format("{:.0f}%", v * 100.0); }

struct Section {
  std::string title;
  std::string text;  // a paragraph before the table (plain)
  ReportTable table;
};

struct Doc {
  std::string title;
  std::vector<std::string> header_lines;
  std::string verdict;
  std::string verdict_text;
  std::vector<std::string> reasons;
  std::vector<Section> sections;
};

const nlohmann::json* record_of(const std::vector<nlohmann::json>& records, const std::string& id) {
  for (const nlohmann::json& r : records) {
    if (r.value("id", "") == id) return &r;
  }
  return nullptr;
}

std::string final_text(const nlohmann::json* r) {
  if (r == nullptr) return "no record";
  const nlohmann::json f = r->value("final", nlohmann::json());
  if (!f.is_object()) return r->value("status", "running");
  const std::string s = f.value("status", "");
  if (s == "baseline") {
    // No final comparison ran: say so, with the best of the attempts' own A/Bs against the baseline.
    std::optional<nlohmann::json> best;
    for (const nlohmann::json& a : r->value("attempts", nlohmann::json::array())) {
      const nlohmann::json sp = a.value("speedup", nlohmann::json());
      if (!sp.is_object() || !sp.value("log_speedup", nlohmann::json()).is_number()) continue;
      if (!best || sp["log_speedup"].get<double>() > (*best)["speedup"]["log_speedup"].get<double>()) best = a;
    }
    if (!best) return "nothing kept, not measured";
    const nlohmann::json& sp = (*best)["speedup"];
    return fmt::format("nothing kept, not measured (best attempt, {}: {} [{}, {}])", best->value("attempt", 0),
                       ratio_text(sp.value("log_speedup", 0.0)), ratio_text(sp.value("log_low", 0.0)),
                       ratio_text(sp.value("log_high", 0.0)));
  }
  if (s == "measured") {
    return fmt::format("{} [{}, {}]", ratio_text(f.value("log_speedup", 0.0)), ratio_text(f.value("log_low", 0.0)),
                       ratio_text(f.value("log_high", 0.0)));
  }
  return "INVALID: " + f.value("detail", "");
}

std::string sequence(const nlohmann::json* r) {
  if (r == nullptr) return "";
  std::string out;
  for (const nlohmann::json& a : r->value("attempts", nlohmann::json::array())) out += letter(a.value("category", ""));
  return out;
}

int count(const nlohmann::json* r, const std::string& category) {
  if (r == nullptr) return 0;
  int n = 0;
  for (const nlohmann::json& a : r->value("attempts", nlohmann::json::array()))
    n += a.value("category", "") == category;
  return n;
}

// The page's head: the plan's digest, kwb, the arms' commands, tasks, seeds and every validate's options.
std::vector<std::string> header_lines(const nlohmann::json& plan, const nlohmann::json& an,
                                      const std::vector<std::string>& tasks) {
  std::vector<std::string> out;
  out.push_back(fmt::format("plan: experiment.json, SHA-256 {}", an.value("plan_digest", "")));
  out.push_back(fmt::format("kwb {} ({}), binary SHA-256 {}", plan["kwb"].value("version", ""),
                            plan["kwb"].value("git_sha", ""), plan["kwb"].value("binary_sha256", "")));
  for (size_t i = 0; i < 2; ++i) {
    const nlohmann::json& arm = plan["arms"][i];
    out.push_back(fmt::format("arm {} = {}: {}", i == 0 ? "A" : "B", arm["name"].get<std::string>(),
                              fmt::join(arm["command"].get<std::vector<std::string>>(), " ")));
  }
  std::vector<std::string> flags;
  for (const nlohmann::json& f : plan["settings"]["validate"]) {
    flags.push_back(f["value"].get<std::string>().empty()
                        ? f["flag"].get<std::string>()
                        : f["flag"].get<std::string>() + " " + f["value"].get<std::string>());
  }
  out.push_back(fmt::format("tasks: {}; seeds: {}; attempts per trajectory: {}; backend {}; executor {}",
                            fmt::join(tasks, ", "), plan["settings"]["seeds"].dump(),
                            plan["settings"]["attempts"].get<int>(), plan["settings"]["backend"].get<std::string>(),
                            plan["settings"]["executor"]["kind"].get<std::string>()));
  out.push_back(
      fmt::format("every validate: {}", flags.empty() ? "defaults" : fmt::format("{}", fmt::join(flags, " "))));
  return out;
}

Section difference_section(const nlohmann::json& an, const std::string& a_name, const std::string& b_name) {
  const nlohmann::json& diff = an["difference"];
  Section s{"The difference between the arms",
            fmt::format("d = ln(speedup of {}) - ln(speedup of {}) per (task, seed); each speedup is the trajectory's "
                        "final incumbent against the task's original baseline, from one interleaved comparison at "
                        "the end. The interval is a {} interval at {:.0f}% over the pairs (docs/experiments.md).",
                        b_name, a_name, diff.value("method", ""), an.value("confidence", 0.95) * 100.0),
            {{"pairs", "mean d", "interval", "as a ratio B/A", "ratio interval", "df", "B wins", "A wins", "ties",
              "B win rate"},
             {},
             false}};
  const nlohmann::json& w = an["win_rate"];
  if (diff.value("pairs", 0) > 0 && diff.value("measured_pairs", 0) == 0) {
    s.text +=
        " Here nothing was measured: neither arm kept a candidate in any pair, so no final comparison ran and "
        "every speedup is 1 by construction; there is no interval to show.";
    s.table.rows.push_back({{fmt::format("{} of {}", diff.value("pairs", 0), diff.value("planned_pairs", 0)),
                             "not measured", "-", "-", "-", "-", std::to_string(w.value("b_wins", 0)),
                             std::to_string(w.value("a_wins", 0)), std::to_string(w.value("ties", 0)), "-"},
                            ""});
    return s;
  }
  s.table.rows.push_back(
      {{fmt::format("{} of {}", diff.value("pairs", 0), diff.value("planned_pairs", 0)),
        fmt::format("{:+.4f}", diff.value("mean", 0.0)),
        fmt::format("[{:+.4f}, {:+.4f}]", diff.value("low", 0.0), diff.value("high", 0.0)),
        fmt::format("{:.3f}x", diff.value("ratio", 1.0)),
        fmt::format("[{:.3f}x, {:.3f}x]", diff.value("ratio_low", 1.0), diff.value("ratio_high", 1.0)),
        diff["df"].is_number() ? fmt::format("{:.1f}", diff["df"].get<double>()) : "-",
        std::to_string(w.value("b_wins", 0)), std::to_string(w.value("a_wins", 0)), std::to_string(w.value("ties", 0)),
        pct(w.value("b_rate", 0.0))},
       ""});
  return s;
}

Section arms_section(const nlohmann::json& an) {
  Section s{"The arms",
            "Costs are sums over the arm's attempts; fast_p is in the next table.",
            {{"arm", "trajectories", "keeps", "geomean speedup", "attempts", "cheats caught",
              "sandbox violations (attempts / calls)", "generator wall s", "generator CPU s",
              "kwb validate s (of it, lock wait)", "model requests", "model tokens (in / out)", "model USD"},
             {},
             false}};
  for (const nlohmann::json& arm : an["arms"]) {
    const nlohmann::json& c = arm["cost"];
    s.table.rows.push_back(
        {{arm.value("label", "") + " " + arm.value("name", ""), std::to_string(arm.value("trajectories", 0)),
          std::to_string(arm.value("keeps", 0)),
          arm.value("keeps", 0) == 0           ? "none kept"
          : arm["geomean_speedup"].is_number() ? fmt::format("{:.3f}x", arm["geomean_speedup"].get<double>())
                                               : "-",
          std::to_string(arm.value("attempts", 0)), std::to_string(arm.value("cheats", 0)),
          fmt::format("{} / {}", arm.value("sandbox", 0), arm.value("sandbox_violations", 0)),
          fmt::format("{:.1f}", c.value("generator_wall_seconds", 0.0)),
          fmt::format("{:.1f}", c.value("generator_cpu_seconds", 0.0)),
          fmt::format("{:.1f} ({:.1f})", c.value("validate_seconds", 0.0), c.value("validate_lock_wait_seconds", 0.0))},
         ""});
  }
  return s;
}

// What the arms' model calls cost (arms.md, "Calling a model"); nullopt when neither arm called a model.
std::optional<Section> model_section(const nlohmann::json& an) {
  bool any = false;
  for (const nlohmann::json& arm : an["arms"]) {
    any = any || arm["cost"].value("model_requests", 0) > 0 || arm["categories"].contains("budget");
  }
  if (!any) return std::nullopt;
  Section s{"Model calls",
            "Requests through kwb's proxy and what they cost, summed over the arm's attempts; dollars from the "
            "experiment's [[prices]]. Each attempt's exchanges are in its trajectory's attempts/<n>/model/.",
            {{"arm", "requests", "input tokens", "output tokens", "USD", "USD per attempt", "USD per keep",
              "ln speedup per USD", "attempts ended by a budget"},
             {},
             false}};
  for (const nlohmann::json& arm : an["arms"]) {
    const nlohmann::json& c = arm["cost"];
    s.table.rows.push_back(
        {{arm.value("label", "") + " " + arm.value("name", ""), std::to_string(c.value("model_requests", 0)),
          std::to_string(c.value("model_input_tokens", 0)), std::to_string(c.value("model_output_tokens", 0)),
          fmt::format("{:.4f}", c.value("model_usd", 0.0)),
          fmt::format("{:.4f}", c.value("model_usd_per_attempt", 0.0)),
          c["model_usd_per_keep"].is_number() ? fmt::format("{:.4f}", c["model_usd_per_keep"].get<double>())
                                              : "none kept",
          c["log_speedup_per_usd"].is_number() ? fmt::format("{:.2f}", c["log_speedup_per_usd"].get<double>()) : "-",
          std::to_string(arm["categories"].value("budget", 0))},
         ""});
  }
  return s;
}

Section fast_p_section(const nlohmann::json& an) {
  Section s{
      "fast_p",
      "The share that is correct (passed kwb's checks) and more than p times faster than the task's original "
      "baseline; fast_0 is the share correct. Per kernel is KernelBench's fast_p: every attempt's kernel (an "
      "attempt that wrote none counts as incorrect; attempts the referee could not decide are left out), its "
      "speedup its own A/B against the incumbent times the kept lineage's. Per final: each trajectory's final "
      "incumbent, which falls back to the baseline, so an arm that keeps nothing scores fast_0 = 100% there.",
      {{"arm", "counted over", "n", "fast_0", "fast_1", "fast_1.1", "fast_1.25", "fast_1.5", "fast_2"}, {}, false}};
  const auto share = [](const nlohmann::json& f, const char* p) {
    const nlohmann::json v = f.value(p, nlohmann::json());
    return v.is_number() ? pct(v.get<double>()) : std::string("-");
  };
  for (const nlohmann::json& arm : an["arms"]) {
    const std::string name = arm.value("label", "") + " " + arm.value("name", "");
    const nlohmann::json none = nlohmann::json::object();
    const nlohmann::json& fk = arm.contains("fast_p_kernels") ? arm["fast_p_kernels"] : none;
    const nlohmann::json& ff = arm["fast_p"];
    for (int per_kernel = 1; per_kernel >= 0; --per_kernel) {
      const nlohmann::json& f = per_kernel ? fk : ff;
      s.table.rows.push_back(
          {{name, per_kernel ? "kernels" : "final incumbents",
            std::to_string(per_kernel ? arm.value("kernels", 0) : arm.value("trajectories", 0)), share(f, "0"),
            share(f, "1"), share(f, "1.1"), share(f, "1.25"), share(f, "1.5"), share(f, "2")},
           ""});
    }
  }
  return s;
}

Section categories_section(const nlohmann::json& an) {
  Section s{"Attempts by outcome",
            "Every attempt of every trajectory, by what became of it (docs/experiments.md).",
            {{"arm"}, {}, false}};
  for (const auto& [c, l] : k_letters) s.table.header.push_back(c);
  for (const nlohmann::json& arm : an["arms"]) {
    ReportRow row{{arm.value("name", "")}, ""};
    for (const auto& [c, l] : k_letters) row.cells.push_back(std::to_string(arm["categories"].value(c, 0)));
    s.table.rows.push_back(std::move(row));
  }
  return s;
}

Section task_section(const std::string& task, const nlohmann::json& an, const std::vector<nlohmann::json>& records,
                     const std::string& a_name, const std::string& b_name) {
  std::string pooled = "";
  bool measured = false;  // a pair of this task where either arm kept something and measured it
  for (const nlohmann::json& p : an["pairs"]) {
    measured =
        measured || (p.value("task", "") == task && (p.value("measured_a", true) || p.value("measured_b", true)));
  }
  for (const nlohmann::json& t : an["by_task"]) {
    if (t.value("task", "") != task) continue;
    pooled = !measured ? std::string("Neither arm kept anything on this task: nothing was measured. ")
             : t["ratio_low"].is_number()
                 ? fmt::format(
                       "This task's B/A over its seeds: {:.3f}x [{:.3f}x, {:.3f}x] (its own paired t, beside "
                       "the pooled interval above). ",
                       t["ratio"].get<double>(), t["ratio_low"].get<double>(), t["ratio_high"].get<double>())
                 : fmt::format("This task's B/A: {:.3f}x (one seed: no interval of its own). ", t.value("ratio", 1.0));
  }
  Section s{"Task " + task,
            pooled +
                "Final speedup over the original baseline [its interval], keeps, and each attempt's outcome in "
                "order (" +
                legend() + ").",
            {{"seed", a_name + ": final", a_name + ": keeps", a_name + ": attempts", b_name + ": final",
              b_name + ": keeps", b_name + ": attempts", "d"},
             {},
             false}};
  for (const nlohmann::json& p : an["pairs"]) {
    if (p.value("task", "") != task) continue;
    const nlohmann::json* ra = record_of(records, p.value("a", ""));
    const nlohmann::json* rb = record_of(records, p.value("b", ""));
    s.table.rows.push_back(
        {{std::to_string(p.value("seed", std::int64_t{0})), final_text(ra), std::to_string(count(ra, "kept")),
          sequence(ra), final_text(rb), std::to_string(count(rb, "kept")), sequence(rb),
          !p["d"].is_number() ? "-"
          : !p.value("measured_a", true) && !p.value("measured_b", true)
              ? "0: nothing kept"
              : fmt::format("{:+.4f}", p["d"].get<double>())},
         ""});
  }
  return s;
}

Section trajectories_section(const ExperimentReportInput& in) {
  Section s{"Trajectories",
            "Each trajectory's record is trajectories/<id>/trajectory.json; its attempts' bundles are "
            "below it. The link is the final comparison's bundle.",
            {{"trajectory", "status", "final", "attempts", "sandbox violations", "detail", "final bundle"}, {}, true}};
  for (const nlohmann::json& t : (*in.plan)["trajectories"]) {
    const std::string id = t["id"].get<std::string>();
    const nlohmann::json* r = record_of(*in.records, id);
    int violations = 0;
    if (r != nullptr) {
      for (const nlohmann::json& a : r->value("attempts", nlohmann::json::array())) {
        if (a.contains("generator"))
          violations += static_cast<int>(a["generator"].value("violations", nlohmann::json::array()).size());
      }
    }
    std::string link;
    if (r != nullptr && r->value("final", nlohmann::json()).is_object()) {
      const std::string b = (*r)["final"].value("bundle", "");
      const fs::path report = in.storage / b / "report.html";
      if (!b.empty() && fs::exists(report)) link = fs::path(b + "/report.html").lexically_normal().string();
    }
    s.table.rows.push_back({{id, r ? r->value("status", "") : "missing", final_text(r), sequence(r),
                             std::to_string(violations), r ? r->value("detail", "") : ""},
                            link,
                            "report"});
  }
  return s;
}

// Every attempt, linked to the candidate it wrote (the trajectory's private copy, which its validate judged).
Section attempts_section(const ExperimentReportInput& in) {
  Section s{"Attempts",
            "Every attempt in order: its category, its decision, its A/B against its incumbent, and the candidate "
            "it wrote (a link, where it wrote one).",
            {{"trajectory", "attempt", "category", "decision", "against its incumbent", "candidate"}, {}, true}};
  for (const nlohmann::json& t : (*in.plan)["trajectories"]) {
    const std::string id = t["id"].get<std::string>();
    const nlohmann::json* r = record_of(*in.records, id);
    if (r == nullptr) continue;
    for (const nlohmann::json& a : r->value("attempts", nlohmann::json::array())) {
      const int n = a.value("attempt", 0);
      std::string link;
      if (a.value("candidate_sha256", nlohmann::json()).is_string() &&
          fs::is_directory(in.storage / "trajectories" / id / "attempts" / std::to_string(n))) {
        const fs::path dir = fs::path("trajectories") / id / "attempts" / std::to_string(n);
        for (const auto& e :
             fs::directory_iterator(in.storage / dir, std::filesystem::directory_options::skip_permission_denied)) {
          if (e.is_regular_file() && e.path().stem() == "candidate" && e.path().extension() != ".json") {
            link = (dir / e.path().filename()).string();
          }
        }
      }
      const nlohmann::json& sp = a.value("speedup", nlohmann::json());
      s.table.rows.push_back(
          {{id, std::to_string(n), a.value("category", ""),
            a.value("decision", nlohmann::json()).is_string() ? a["decision"].get<std::string>() : "-",
            sp.is_object() ? fmt::format("{:+.1f}% [{:+.1f}, {:+.1f}]", sp.value("improvement_pct", 0.0),
                                         sp.value("ci_low_pct", 0.0), sp.value("ci_high_pct", 0.0))
                           : "-"},
           link,
           "candidate"});
    }
  }
  return s;
}

// Every attempt that called a model, linked to its recorded exchanges; nullopt when none did.
std::optional<Section> transcripts_section(const ExperimentReportInput& in) {
  Section s{
      "Model exchanges",
      "Each attempt that called a model through kwb's proxy: the link is its exchanges.jsonl, one line per "
      "request (time, endpoint, path, status, sizes, usage, price), each body beside it; kwb experiment run "
      "--replay serves them again.",
      {{"trajectory", "attempt", "category", "requests", "tokens (in / out)", "USD", "budget passed", "exchanges"},
       {},
       true}};
  for (const nlohmann::json& t : (*in.plan)["trajectories"]) {
    const nlohmann::json* r = record_of(*in.records, t["id"].get<std::string>());
    if (r == nullptr) continue;
    for (const nlohmann::json& a : r->value("attempts", nlohmann::json::array())) {
      if (!a.contains("model") || !a["model"].is_object()) continue;
      const nlohmann::json& m = a["model"];
      const std::string file = m.value("exchanges", "");
      s.table.rows.push_back({{t["id"].get<std::string>(), std::to_string(a.value("attempt", 0)),
                               a.value("category", ""), std::to_string(m.value("requests", 0)),
                               fmt::format("{} / {}", m.value("input_tokens", 0), m.value("output_tokens", 0)),
                               fmt::format("{:.4f}", m.value("usd", 0.0)), m.value("over_budget", "")},
                              !file.empty() && fs::exists(in.storage / file) ? file : "",
                              "exchanges"});
    }
  }
  if (s.table.rows.empty()) return std::nullopt;
  return s;
}

Doc build(const ExperimentReportInput& in) {
  const nlohmann::json& plan = *in.plan;
  const nlohmann::json& an = *in.analysis;
  Doc d;
  d.title = "Experiment " + plan.value("name", "");
  const std::string a_name = plan["arms"][0]["name"].get<std::string>();
  const std::string b_name = plan["arms"][1]["name"].get<std::string>();
  std::vector<std::string> tasks;
  for (const nlohmann::json& t : plan["tasks"]) tasks.push_back(t["name"].get<std::string>());
  d.header_lines = header_lines(plan, an, tasks);
  d.verdict = an.value("verdict", "");
  d.verdict_text = an.value("verdict_text", "");
  d.reasons = an.value("reasons", std::vector<std::string>{});
  d.sections.push_back(difference_section(an, a_name, b_name));
  d.sections.push_back(arms_section(an));
  d.sections.push_back(fast_p_section(an));
  if (std::optional<Section> m = model_section(an)) d.sections.push_back(std::move(*m));
  d.sections.push_back(categories_section(an));
  for (const std::string& task : tasks) d.sections.push_back(task_section(task, an, *in.records, a_name, b_name));
  d.sections.push_back(trajectories_section(in));
  d.sections.push_back(attempts_section(in));
  if (std::optional<Section> x = transcripts_section(in)) d.sections.push_back(std::move(*x));
  if (!an["missing"].empty()) {
    Section sm{
        "Trajectories without an outcome", "Why the verdict is INVALID.", {{"trajectory", "status", "why"}, {}, false}};
    for (const nlohmann::json& m : an["missing"]) {
      sm.table.rows.push_back({{m.value("id", ""), m.value("status", ""), m.value("detail", "")}, ""});
    }
    d.sections.push_back(std::move(sm));
  }
  return d;
}

}  // namespace

std::string experiment_markdown(const ExperimentReportInput& in) {
  const Doc d = build(in);
  std::string out = "# " + escape_markdown(d.title) + "\n\n";
  for (const std::string& l : d.header_lines) out += escape_markdown(l) + "  \n";
  out += fmt::format("\n## Verdict: {}\n\n", escape_markdown(d.verdict_text));
  for (const std::string& r : d.reasons) out += "- " + escape_markdown(r) + "\n";
  for (const Section& s : d.sections) {
    out += "\n## " + escape_markdown(s.title) + "\n\n" + escape_markdown(s.text) + "\n\n" + md_table(s.table);
  }
  return out;
}

std::string experiment_html(const ExperimentReportInput& in) {
  const Doc d = build(in);
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n"
      // A cell may break a long word (a path, a link) anywhere: the tables then fit the window instead of running
      // off it (tests/experiment/llm_agent_test.py lays the page out 1280 px wide).
      "<style>\nbody{{font-family:sans-serif;margin:2em;max-width:90em}}"
      "table{{border-collapse:collapse;margin:.5em 0;max-width:100%}}"
      "th,td{{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top;overflow-wrap:anywhere}}"
      "th{{background:#eee}}"
      "#verdict{{font-size:1.3em;padding:.5em;border:2px solid #444;display:inline-block}}"
      "</style>\n</head>\n<body>\n<h1>{title}</h1>\n<p>",
      fmt::arg("title", escape_html(d.title)));
  for (size_t i = 0; i < d.header_lines.size(); ++i) out += (i ? "<br>" : "") + escape_html(d.header_lines[i]);
  out += fmt::format("</p>\n<p id=\"verdict\" data-verdict=\"{}\">Verdict: {}</p>\n<ul id=\"reasons\">",
                     escape_html(d.verdict), escape_html(d.verdict_text));
  for (const std::string& r : d.reasons) out += "<li>" + escape_html(r) + "</li>";
  out += "</ul>\n";
  for (const Section& s : d.sections) {
    out += "<h2>" + escape_html(s.title) + "</h2>\n<p>" + escape_html(s.text) + "</p>\n" + html_table(s.table);
  }
  return out + "</body>\n</html>\n";
}

}  // namespace kwb
