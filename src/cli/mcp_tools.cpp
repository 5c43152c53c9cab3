#include "cli/mcp_tools.h"

#include "cli/commands.h"
#include "cli/comparison_text.h"
#include "cli/options.h"
#include "cli/schema_files.h"
#include "ledger/ledger.h"
#include "task/task.h"
#include "util/error.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>

namespace kwb::cli::mcp {

namespace {

enum class Kind { string, number, integer, boolean, strings };

// One argument of a tool and how it becomes a command-line argument.
struct Param {
  const char* name;
  Kind kind;
  bool required;
  const char* flag;  // "" for the positional argument; for a boolean, the flag given when true
  const char* description;
  std::vector<std::string> choices = {};  // a string's only values (its schema's enum), when the CLI fixes them
};

// What a client may assume of a tool (MCP's tool annotations): read_only changes nothing a later call depends on
// (it may add ledger rows and cache builds); destructive replaces state (the incumbent); idempotent gives the same
// result when repeated with the same arguments.
struct Hints {
  bool read_only = false;
  bool destructive = false;
  bool idempotent = false;
};

struct Tool {
  const char* name;
  const char* verb;
  const char* result;  // the schema of the verb's JSON: schemas/<result>.schema.json
  const char* description;
  std::vector<Param> params;
  Hints hints = {};
  std::vector<std::string> fixed = {};  // arguments always given after the verb (the runs tool's --runs)
};

const Param k_task{"task", Kind::string, true, "", "Task folder (holding task.toml)"};
const Param k_backend{"backend", Kind::string, false, "--backend", "Where the implementation runs", backend_names()};
// An argument from a row of util/option_table.h: its key, flag, help and choices are the row's.
Param from_row(const char* key) {
  const OptionRow& row = option_row(key);
  const Kind kind = row.kind == OptionKind::number    ? Kind::number
                    : row.kind == OptionKind::integer ? Kind::integer
                    : row.kind == OptionKind::text    ? Kind::string
                    : row.kind == OptionKind::texts   ? Kind::strings
                                                      : Kind::boolean;
  return {row.key, kind, false, row.flag, row.help, row.choices};
}

// The validate options the tools take: the rows offered over MCP (OptionSurface k_mcp), in the table's order.
std::vector<Param> option_params() {
  std::vector<Param> out;
  for (const OptionRow& row : option_rows()) {
    if ((row.surfaces & k_mcp) != 0) out.push_back(from_row(row.key));
  }
  return out;
}

// params followed by the validate options except those named in `without` (compare's seed is its own).
std::vector<Param> with_options(std::vector<Param> params, const std::vector<std::string>& without = {}) {
  for (Param& p : option_params()) {
    if (std::find(without.begin(), without.end(), p.name) == without.end()) params.push_back(std::move(p));
  }
  return params;
}

const Param k_output_dir{"output_dir", Kind::string, true, "--output-dir",
                         "Evidence bundle folder (must not exist yet)"};

// The tools on one candidate: check, compare, validate, profile.
std::vector<Tool> candidate_tools() {
  return {
      {"check",
       "check",
       "kwb.check",
       "Check an implementation (impl: a source file) or one of the task's error controls (control: its name) "
       "against the task's oracle: correctness only, no timing. A rejected implementation gets its failure reasons "
       "and no metric; a source that does not compile is rejected with build_failed and the compiler's output.",
       {k_task,
        {"impl", Kind::string, false, "--impl", "Implementation source file (or give control)"},
        {"control", Kind::string, false, "--control", "One of the task's error controls, by name (instead of impl)"},
        k_backend,
        {"cases", Kind::strings, false, "--case", "Only these cases (default: every case)"},
        {"timeout_seconds", Kind::number, false, "--timeout-seconds", "Per call"},
        {"seed", Kind::integer, false, "--seed",
         "Data nonce: 0 uses the task's published seeds, another draws fresh data"},
        {"calls", Kind::integer, false, "--calls", "Calls per case, each with fresh data"},
        {"held_out", Kind::boolean, false, "--held-out",
         "Also run held-out cases (perturbed shapes, fresh data) and rehearse a timing visit, as final validation "
         "does"},
        {"exhaustive", Kind::boolean, false, "--exhaustive",
         "Run every case even after the worker failed in one (timeout, crash, sandbox violation); by default the "
         "check stops there and lists the cases not run"}},
       {.read_only = true, .idempotent = true}},
      {"compare", "compare", "kwb.compare",
       "Time a candidate against a baseline with interleaved A/B blocks (or A/A with aa=true). Both are checked "
       "first; a rejected one is never timed. For exploring: a decision to keep comes from validate.",
       with_options({k_task,
                     {"candidate", Kind::string, false, "--candidate", "Candidate source (required unless aa is true)"},
                     {"baseline", Kind::string, false, "--baseline", "Baseline source (default: the task's baseline)"},
                     {"aa", Kind::boolean, false, "--aa", "A/A: the baseline against itself"},
                     k_backend,
                     {"seed", Kind::integer, false, "--seed",
                      "Seed for block orders and layouts (timed data comes from a secret drawn at run time)"},
                     {"output_dir", Kind::string, false, "--output-dir",
                      "Write samples.csv (every sample) and compare.json here"}},
                    {"seed", "no_profile"})},
      {"validate", "validate", "kwb.decision",
       "The whole workflow into an evidence bundle: freeze the plan, check baseline and candidate, controls, "
       "profile, A/A calibration, A/B timing, final validation, decision (KEEP_CANDIDATE, KEEP_BASELINE, "
       "INCONCLUSIVE, INVALID) with reason codes. A candidate that does not compile is decided at once "
       "(KEEP_BASELINE, candidate_not_built) with the compiler's output. The result names the bundle; keep it with "
       "the keep tool.",
       with_options({k_task,
                     {"candidate", Kind::string, true, "--candidate", "Candidate source"},
                     k_output_dir,
                     {"baseline", Kind::string, false, "--baseline", "Baseline source (default: the task's baseline)"},
                     {"against_incumbent", Kind::boolean, false, "--against=incumbent",
                      "Validate against the task's incumbent in the ledger (see keep, history)"},
                     k_backend})},
      {"profile",
       "profile",
       "kwb.profile",
       "Describe what an implementation does per workload: instructions, passes, allocations, bytes moved, "
       "achieved bandwidth. Descriptive only; it checks the implementation first.",
       {k_task, {"impl", Kind::string, true, "--impl", "Implementation source file"}, k_backend, from_row("workloads")},
       {.read_only = true, .idempotent = true}},
  };
}

// The tools on the record: verify, keep, revalidate, history, runs, list_tasks.
std::vector<Tool> record_tools() {
  return {
      {"verify",
       "verify",
       "kwb.verify",
       "Re-derive every statistic and the decision of an evidence bundle from its raw samples and plan; lists every "
       "disagreement, and says whether the bundle is authentic (signed by a trusted key, or recorded by this "
       "machine's ledger) or self-consistent only.",
       {{"bundle", Kind::string, true, "", "Evidence bundle folder"}},
       {.read_only = true, .idempotent = true}},
      {"keep",
       "keep",
       "kwb.keep",
       "Make a bundle's candidate the task's incumbent: only from a bundle that verifies, that this machine's ledger "
       "recorded at the end of its run, and that decided KEEP_CANDIDATE against the current incumbent (a stale or "
       "edited bundle is refused with the reason).",
       {{"bundle", Kind::string, true, "", "Evidence bundle folder from validate"}},
       {.destructive = true}},
      {"revalidate", "revalidate", "kwb.decision",
       "Validate the task's incumbent against its original baseline (generation 0), so the compounded improvement "
       "is measured, not multiplied; history then shows the figure.",
       with_options({k_task, k_output_dir, k_backend})},
      {"history",
       "history",
       "kwb.history",
       "The lineage of a task's kept implementations and the runs recorded in the ledger.",
       {k_task, k_backend},
       {.read_only = true, .idempotent = true}},
      {"runs",
       "history",
       "kwb.runs",
       "Every run the task's ledger recorded (check, compare, validate, revalidate, keep), most recent first: kind, "
       "start and end (UTC), outcome, candidate source and identity, the estimate per workload with its interval, "
       "and the bundle. The filters narrow it; a retry-until-PASS loop shows here.",
       {k_task,
        {"backend", Kind::string, false, "--backend", "Only runs on this backend (default: every backend)",
         backend_names()},
        {"kind", Kind::strings, false, "--kind", "Only runs of these kinds", run_kinds()},
        {"outcome", Kind::strings, false, "--outcome", "Only runs with these outcomes", run_outcomes()},
        {"since", Kind::string, false, "--since",
         "Only runs started since then: a UTC date or date and time (2026-12-01, 2026-12-01T10:00:00), or an age "
         "(90s, 45m, 2h, 3d, 1w)"},
        {"limit", Kind::integer, false, "--limit", "Only the N most recent of the runs that match"}},
       {.read_only = true, .idempotent = true},
       {"--runs"}},
      {"list_tasks",
       "",
       "kwb.tasks",
       "The tasks under a folder (every folder holding a task.toml): name, description, backends, timing workloads.",
       {{"root", Kind::string, false, "", "Folder to search (default: the current folder)"}},
       {.read_only = true, .idempotent = true}},
  };
}

// The tools on many candidates: campaigns and experiments.
std::vector<Tool> fleet_tools() {
  return {
      {"campaign_run",
       "campaign",
       "kwb.campaign_status",
       "Run (or resume) a campaign: many candidates, each validated in a job of its own, on this machine or through "
       "Slurm (docs/campaigns.md); every accepted bundle is recorded in the ledger. Returns when every job has ended, "
       "with each job's outcome, decision, node and reason. Jobs decided earlier under the same identity are skipped. "
       "dry_run plans the jobs and submits nothing.",
       {{"file", Kind::string, true, "", "Campaign file (.toml)"},
        {"dry_run", Kind::boolean, false, "--dry-run", "Plan the jobs and record them in the state; submit nothing"}},
       {},
       {"run"}},
      {"campaign_status",
       "campaign",
       "kwb.campaign_status",
       "A campaign's jobs as they are now: queued, running, decided (with the decision) or ended without one (with "
       "why), and whether its campaign process is running.",
       {{"campaign", Kind::string, true, "", "Campaign file, or its storage folder"}},
       {.read_only = true, .idempotent = true},
       {"status"}},
      {"campaign_cancel",
       "campaign",
       "kwb.campaign_status",
       "Stop a running campaign and cancel its queued and running jobs (scancel on Slurm); what was decided stays.",
       {{"campaign", Kind::string, true, "", "Campaign file, or its storage folder"}},
       {.destructive = true},
       {"cancel"}},
      {"campaign_report",
       "campaign",
       "kwb.campaign_report",
       "Write a campaign's report.md and report.html and return the Markdown: per task the candidates ranked by "
       "decision then improvement, with the node and machine each was timed on (and a warning when a ranking mixes "
       "machines), the jobs without a decision and why, the incumbent lineage, and the rejected evidence.",
       {{"campaign", Kind::string, true, "", "Campaign file, or its storage folder"}},
       {.idempotent = true},
       {"report"}},
      {"experiment_run",
       "experiment",
       "kwb.experiment_analysis",
       "Freeze and run (or resume) a two-arm experiment (docs/experiments.md), then analyze it: which candidate "
       "generator produces better kernels, paired by task and seed, with its interval.",
       {{"file", Kind::string, true, "", "Experiment file (.toml)"}},
       {},
       {"run"}},
      {"experiment_status",
       "experiment",
       "kwb.experiment_status",
       "An experiment's trajectories: pending, running, done or invalid, with the attempts done.",
       {{"experiment", Kind::string, true, "", "Experiment file, or its storage folder"}},
       {.read_only = true, .idempotent = true},
       {"status"}},
      {"experiment_report",
       "experiment",
       "kwb.experiment_analysis",
       "Analyze an experiment as it stands and write analysis.json, report.md and report.html; returns the analysis.",
       {{"experiment", Kind::string, true, "", "Experiment file, or its storage folder"}},
       {.idempotent = true},
       {"report"}},
  };
}

const std::vector<Tool>& tools() {
  static const std::vector<Tool> t = [] {
    std::vector<Tool> all = candidate_tools();
    for (std::vector<Tool> more : {record_tools(), fleet_tools()}) {
      all.insert(all.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
    return all;
  }();
  return t;
}

const Tool& find_tool(const std::string& name) {
  for (const Tool& t : tools()) {
    if (name == t.name) return t;
  }
  std::vector<std::string> names;
  for (const Tool& t : tools()) names.emplace_back(t.name);
  throw InvalidParams(fmt::format("unknown tool '{}' (kwb's tools: {})", name, fmt::join(names, ", ")));
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::string:
      return "a string";
    case Kind::number:
      return "a number";
    case Kind::integer:
      return "a non-negative integer";
    case Kind::boolean:
      return "true or false";
    case Kind::strings:
      return "an array of strings";
  }
  return "?";
}

nlohmann::json schema_of(Kind k) {
  switch (k) {
    case Kind::string:
      return {{"type", "string"}, {"minLength", 1}};
    case Kind::number:
      return {{"type", "number"}};
    case Kind::integer:
      return {{"type", "integer"}, {"minimum", 0}};
    case Kind::boolean:
      return {{"type", "boolean"}};
    case Kind::strings:
      return {{"type", "array"}, {"items", {{"type", "string"}, {"minLength", 1}}}};
  }
  return {};
}

bool fits(Kind k, const nlohmann::json& v) {
  switch (k) {
    case Kind::string:
      return v.is_string() && !v.get<std::string>().empty();
    case Kind::number:
      return v.is_number() && std::isfinite(v.get<double>());
    case Kind::integer:
      return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    case Kind::boolean:
      return v.is_boolean();
    case Kind::strings:
      if (!v.is_array()) return false;
      for (const auto& x : v) {
        if (!x.is_string() || x.get<std::string>().empty()) return false;
      }
      return true;
  }
  return false;
}

std::string number_text(const nlohmann::json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  return fmt::format("{}", v.get<double>());
}

// The arguments checked against the tool's parameters; returns them in parameter order, absent ones skipped.
std::vector<std::pair<const Param*, const nlohmann::json*>> checked(const Tool& tool, const nlohmann::json& args) {
  if (!args.is_null() && !args.is_object()) {
    throw InvalidParams(fmt::format("tool {}: 'arguments' must be an object", tool.name));
  }
  if (args.is_object()) {
    for (const auto& [key, value] : args.items()) {
      bool known = false;
      for (const Param& p : tool.params) known = known || key == p.name;
      if (!known) {
        std::vector<std::string> names;
        for (const Param& p : tool.params) names.emplace_back(p.name);
        throw InvalidParams(
            fmt::format("tool {}: unknown argument '{}' (its arguments: {})", tool.name, key, fmt::join(names, ", ")));
      }
    }
  }
  std::vector<std::pair<const Param*, const nlohmann::json*>> out;
  for (const Param& p : tool.params) {
    const nlohmann::json* v = nullptr;
    if (args.is_object()) {
      if (auto it = args.find(p.name); it != args.end() && !it->is_null()) v = &*it;
    }
    if (v == nullptr) {
      if (p.required) {
        throw InvalidParams(fmt::format("tool {}: argument '{}' is required ({}: {})", tool.name, p.name,
                                        kind_name(p.kind), p.description));
      }
      continue;
    }
    if (!fits(p.kind, *v)) {
      throw InvalidParams(fmt::format("tool {}: argument '{}' must be {}, not {}", tool.name, p.name, kind_name(p.kind),
                                      v->dump().substr(0, 80)));
    }
    const nlohmann::json items = p.kind == Kind::strings ? *v : nlohmann::json::array({*v});
    for (const nlohmann::json& item : items) {
      if (!p.choices.empty() &&
          std::find(p.choices.begin(), p.choices.end(), item.get<std::string>()) == p.choices.end()) {
        throw InvalidParams(fmt::format("tool {}: argument '{}' must be {} of {}, not {}", tool.name, p.name,
                                        p.kind == Kind::strings ? "a list of values each one" : "one",
                                        fmt::join(p.choices, ", "), item.dump().substr(0, 80)));
      }
    }
    // The command line's ranges (cli/options.h), checked here too, so the call is refused naming the argument
    // rather than run as a child that refuses it.
    if (const OptionRange* range = option_range(p.flag); range != nullptr) {
      if (const std::string why = out_of_range(*range, number_text(*v)); !why.empty()) {
        throw InvalidParams(fmt::format("tool {}: argument '{}': {}", tool.name, p.name, why));
      }
    }
    out.emplace_back(&p, v);
  }
  return out;
}

// A range's bound as the schema states it: an integer option's as an integer (2^64 - 1 for the seed's maximum,
// which a double rounds up to 2^64).
nlohmann::json bound(const OptionRange& range, double v) {
  if (!range.integer) return v;
  constexpr uint64_t k_max = std::numeric_limits<uint64_t>::max();
  return v >= static_cast<double>(k_max) ? k_max : static_cast<uint64_t>(v);
}

// kwb's own command line (the verbs the tools run): a tool argument's default is read from the option it becomes,
// so the schema cannot state another default than the verb takes.
const CLI::App& command_line() {
  static CLI::App app;
  static const std::vector<Action> actions = {add_check(app),  add_compare(app), add_validate(app),   add_profile(app),
                                              add_verify(app), add_keep(app),    add_revalidate(app), add_history(app)};
  (void)actions;  // they own what the options would parse into; nothing here parses
  return app;
}

// What the verb takes when the argument is not given; null when it says nothing (a seed drawn at random, every
// case, a positional argument).
nlohmann::json cli_default(const Tool& tool, const Param& p) {
  if (p.kind == Kind::boolean) return false;  // a flag not given
  if (p.flag[0] != '-' || p.kind == Kind::strings) return nullptr;
  const CLI::App* verb = command_line().get_subcommand(tool.verb);
  const CLI::Option* option = verb->get_option_no_throw(p.flag);
  if (option == nullptr) {
    throw InternalError(fmt::format("kwb mcp: tool {}: kwb {} has no option {}", tool.name, tool.verb, p.flag));
  }
  const std::string text = option->get_default_str();
  if (text.empty()) return nullptr;
  switch (p.kind) {
    case Kind::number:
      return std::stod(text);
    case Kind::integer:
      return std::stoull(text);
    default:
      return text;
  }
}

// The schema files, parsed once, by name ("kwb.check").
const nlohmann::json& schema_document(const std::string& name) {
  static const std::map<std::string, nlohmann::json> docs = [] {
    std::map<std::string, nlohmann::json> m;
    for (const SchemaFile& f : schema_files()) m.emplace(std::string(f.name), nlohmann::json::parse(f.text));
    return m;
  }();
  const auto it = docs.find(name);
  if (it == docs.end()) {
    throw InternalError(fmt::format("kwb mcp: schemas/{}.schema.json is not compiled into kwb", name));
  }
  return it->second;
}

// The names of the schema files `j` refers to ("$ref": "kwb.check.schema.json#/$defs/failure").
void referenced_files(const nlohmann::json& j, std::vector<std::string>& names) {
  constexpr std::string_view k_suffix = ".schema.json";
  if (j.is_array()) {
    for (const auto& x : j) referenced_files(x, names);
    return;
  }
  if (!j.is_object()) return;
  for (const auto& [key, value] : j.items()) {
    if (key != "$ref" || !value.is_string()) {
      referenced_files(value, names);
      continue;
    }
    const std::string ref = value.get<std::string>();
    const std::string file = ref.substr(0, ref.find('#'));
    if (file.empty()) continue;  // within the same file
    if (!file.ends_with(k_suffix)) {
      throw InternalError(fmt::format("kwb mcp: a schema refers to '{}', not a schema file of schemas/", ref));
    }
    names.push_back(file.substr(0, file.size() - k_suffix.size()));
  }
}

// `name`'s schema and every schema it refers to, directly or not, into `defs` (by name).
void add_schema(const std::string& name, nlohmann::json& defs) {
  if (defs.contains(name)) return;
  defs[name] = schema_document(name);
  std::vector<std::string> refs;
  referenced_files(defs[name], refs);
  for (const std::string& r : refs) add_schema(r, defs);
}

// What a call's structuredContent is (structured_result): the verb's own JSON under "result", so the schema file
// that describes it describes it unchanged. The schema files are embedded whole, each under its "$id", which the
// files' relative references resolve against: a validator needs nothing outside this schema.
nlohmann::json output_schema(const Tool& t) {
  nlohmann::json defs = nlohmann::json::object();
  add_schema(t.result, defs);
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"type", "object"},
          {"required", {"exit_code", "result", "stderr"}},
          {"additionalProperties", false},
          {"properties",
           {{"exit_code",
             {{"type", "integer"},
              {"minimum", 0},
              {"maximum", 255},
              {"description",
               "kwb's exit status (docs/cli.md): 0 to 3 a verdict or decision (a result, whatever it "
               "says), and so is check's 65 for a source that does not compile (FAIL, build_failed); "
               "any other code above 3: the call failed (isError), e.g. a task that does not parse"}}},
            {"result",
             {{"anyOf", {{{"$ref", defs[t.result]["$id"]}}, {{"type", "null"}}}},
              {"description", fmt::format("The JSON `kwb {} --json` printed, unchanged (schemas/{}.schema.json); null "
                                          "when it printed none: stderr says why",
                                          t.verb[0] == '\0' ? t.name : t.verb, t.result)}}},
            {"stderr",
             {{"type", "string"},
              {"description", fmt::format("The end of what kwb wrote on stderr (at most {} bytes): progress, warnings "
                                          "and errors",
                                          k_stderr_kept)}}}}},
          {"$defs", defs}};
}

}  // namespace

nlohmann::json structured_result(const nlohmann::json& output, int exit_code, const std::string& stderr_text) {
  std::string err = stderr_text;
  if (err.size() > k_stderr_kept) {
    err.erase(0, err.size() - k_stderr_kept);
    if (const size_t nl = err.find('\n'); nl != std::string::npos) err.erase(0, nl + 1);  // whole lines only
  }
  return {{"exit_code", exit_code}, {"result", output.is_object() ? output : nlohmann::json()}, {"stderr", err}};
}

nlohmann::json tool_list() {
  nlohmann::json list = nlohmann::json::array();
  for (const Tool& t : tools()) {
    nlohmann::json props = nlohmann::json::object();
    nlohmann::json required = nlohmann::json::array();
    for (const Param& p : t.params) {
      nlohmann::json s = schema_of(p.kind);
      s["description"] = p.description;
      if (const OptionRange* range = option_range(p.flag); range != nullptr) {
        s["minimum"] = bound(*range, range->min);
        s["maximum"] = bound(*range, range->max);
      }
      if (!p.choices.empty()) (p.kind == Kind::strings ? s["items"]["enum"] : s["enum"]) = p.choices;
      if (nlohmann::json d = cli_default(t, p); !d.is_null()) s["default"] = d;
      props[p.name] = s;
      if (p.required) required.push_back(p.name);
    }
    list.push_back(
        {{"name", t.name},
         {"description", t.description},
         {"annotations",
          {{"readOnlyHint", t.hints.read_only},
           {"destructiveHint", t.hints.destructive},
           {"idempotentHint", t.hints.idempotent},
           {"openWorldHint", false}}},
         {"inputSchema",
          {{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}}},
         {"outputSchema", output_schema(t)}});
  }
  return list;
}

bool runs_in_process(const std::string& tool) { return find_tool(tool).verb[0] == '\0'; }

std::vector<std::string> tool_argv(const std::string& name, const nlohmann::json& args) {
  const Tool& tool = find_tool(name);
  if (tool.verb[0] == '\0') throw InvalidParams(fmt::format("tool {} runs in the server", name));
  const auto values = checked(tool, args);
  auto given = [&](const char* key) { return args.is_object() && args.contains(key) && !args[key].is_null(); };
  if (name == "check" && given("impl") == given("control")) {
    throw InvalidParams(given("impl") ? "tool check: 'impl' and 'control' name two implementations: give one"
                                      : "tool check: argument 'impl' is required (a source file), or 'control' (one "
                                        "of the task's error controls, by name)");
  }
  if (name == "compare") {
    const bool aa = args.is_object() && args.value("aa", false);
    if (aa == given("candidate")) throw InvalidParams("tool compare: give either 'candidate' or 'aa': true (not both)");
  }
  if (name == "validate" && args.value("against_incumbent", false) && given("baseline")) {
    throw InvalidParams("tool validate: 'baseline' and 'against_incumbent' name two baselines: give one");
  }
  std::vector<std::string> argv = {tool.verb};
  argv.insert(argv.end(), tool.fixed.begin(), tool.fixed.end());
  for (const auto& [p, v] : values) {
    const std::string flag = p->flag;
    switch (p->kind) {
      case Kind::string:
        if (!flag.empty()) argv.push_back(flag);
        argv.push_back(v->get<std::string>());
        break;
      case Kind::number:
      case Kind::integer:
        argv.push_back(flag);
        argv.push_back(number_text(*v));
        break;
      case Kind::boolean:
        if (v->get<bool>()) argv.push_back(flag);
        break;
      case Kind::strings:
        for (const auto& x : *v) {
          argv.push_back(flag);
          argv.push_back(x.get<std::string>());
        }
        break;
    }
  }
  argv.push_back("--json");
  return argv;
}

nlohmann::json list_tasks(const nlohmann::json& args) {
  const Tool& tool = find_tool("list_tasks");
  (void)checked(tool, args);
  const std::filesystem::path root = args.is_object() ? args.value("root", std::string(".")) : ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) {
    throw InvalidParams(fmt::format("tool list_tasks: argument 'root' ({}) is not a folder", root.string()));
  }
  std::vector<std::filesystem::path> found;
  if (std::filesystem::is_regular_file(root / "task.toml", ec)) found.push_back(root);
  // Two levels below the root: tasks/<name>/task.toml from a project folder.
  for (auto it = std::filesystem::recursive_directory_iterator(
           root, std::filesystem::directory_options::skip_permission_denied, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it.depth() >= 2) it.disable_recursion_pending();
    if (it->is_directory(ec) && !it->is_symlink(ec) && std::filesystem::is_regular_file(it->path() / "task.toml", ec)) {
      found.push_back(it->path());
    }
  }
  std::sort(found.begin(), found.end());
  nlohmann::json tasks = nlohmann::json::array();
  for (const auto& dir : found) {
    try {
      const Task t = load_task(dir);
      nlohmann::json backends = nlohmann::json::array();
      for (const auto& [b, impls] : t.backends) backends.push_back(to_string(b));
      nlohmann::json workloads = nlohmann::json::array();
      for (const Case& c : t.cases) {
        if (c.role == CaseRole::timing) workloads.push_back(c.name);
      }
      tasks.push_back({{"name", t.name},
                       {"dir", dir.string()},
                       {"description", t.description},
                       {"backends", backends},
                       {"workloads", workloads}});
    } catch (const std::exception& e) {
      tasks.push_back({{"dir", dir.string()}, {"error", e.what()}});
    }
  }
  return {{"schema", "kwb.tasks"}, {"schema_version", 1}, {"root", root.string()}, {"tasks", tasks}};
}

}  // namespace kwb::cli::mcp
