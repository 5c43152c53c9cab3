// kwb mcp's tools without a process (cli/mcp_tools.h): every tool the issue names is offered with a closed input
// schema, a call becomes the command line the CLI would get, and arguments that do not fit are refused naming the
// field, never guessed at.
#include "cli/mcp_tools.h"
#include "support/build_paths.h"

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/schema_files.h"
#include "util/backend_kind.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kwb::cli::mcp {
namespace {

using Args = std::vector<std::string>;

std::string refusal(const std::string& tool, const nlohmann::json& args) {
  try {
    tool_argv(tool, args);
  } catch (const InvalidParams& e) {
    return e.what();
  }
  return "";
}

TEST(McpTools, every_verb_an_agent_needs_is_a_tool_with_a_closed_input_schema) {
  std::set<std::string> names;
  for (const auto& t : tool_list()) {
    names.insert(t["name"].get<std::string>());
    EXPECT_FALSE(t["description"].get<std::string>().empty()) << t.dump();
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t.dump();
    EXPECT_EQ(t["inputSchema"]["additionalProperties"], false) << t.dump();
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"check", "compare", "validate", "revalidate", "profile", "verify", "history", "runs",
                                   "keep", "list_tasks", "campaign_run", "campaign_status", "campaign_cancel",
                                   "campaign_report", "experiment_run", "experiment_status", "experiment_report"}));
}

// What a client may assume: only keep replaces state (the incumbent); the readers change nothing a later call sees.
TEST(McpTools, each_tool_says_whether_it_reads_or_replaces_state) {
  std::set<std::string> read_only, destructive;
  for (const auto& t : tool_list()) {
    ASSERT_TRUE(t["annotations"].is_object()) << t.dump();
    if (t["annotations"]["readOnlyHint"] == true) read_only.insert(t["name"].get<std::string>());
    if (t["annotations"]["destructiveHint"] == true) destructive.insert(t["name"].get<std::string>());
  }
  EXPECT_EQ(read_only, (std::set<std::string>{"check", "profile", "verify", "history", "runs", "list_tasks",
                                              "campaign_status", "experiment_status"}));
  EXPECT_EQ(destructive, (std::set<std::string>{"keep", "campaign_cancel"}));
}

TEST(McpTools, a_call_becomes_the_command_line_the_cli_gets) {
  EXPECT_EQ(tool_argv("check", {{"task", "tasks/rmsnorm"}, {"impl", "f.cpp"}, {"cases", {"zeros", "decode"}}}),
            (Args{"check", "tasks/rmsnorm", "--impl", "f.cpp", "--case", "zeros", "--case", "decode", "--json"}));
  EXPECT_EQ(tool_argv("validate", {{"task", "t"},
                                   {"candidate", "c.cpp"},
                                   {"output_dir", "b"},
                                   {"against_incumbent", true},
                                   {"max_minutes", 0.5},
                                   {"seed", 7}}),
            (Args{"validate", "t", "--candidate", "c.cpp", "--output-dir", "b", "--against=incumbent", "--max-minutes",
                  "0.5", "--seed", "7", "--json"}));
  EXPECT_EQ(tool_argv("compare", {{"task", "t"}, {"aa", true}}), (Args{"compare", "t", "--aa", "--json"}));
  EXPECT_EQ(tool_argv("keep", {{"bundle", "b"}}), (Args{"keep", "b", "--json"}));
  EXPECT_EQ(tool_argv("check", {{"task", "t"}, {"control", "no_eps"}, {"held_out", true}, {"calls", 2}}),
            (Args{"check", "t", "--control", "no_eps", "--calls", "2", "--held-out", "--json"}));
  EXPECT_EQ(
      tool_argv("compare",
                {{"task", "t"}, {"aa", true}, {"gate", "point"}, {"cold", true}, {"seed", 3}, {"output_dir", "o"}}),
      (Args{"compare", "t", "--aa", "--seed", "3", "--output-dir", "o", "--gate", "point", "--cold", "--json"}));
  EXPECT_EQ(
      tool_argv("validate", {{"task", "t"}, {"candidate", "c"}, {"output_dir", "b"}, {"against_incumbent", false}}),
      (Args{"validate", "t", "--candidate", "c", "--output-dir", "b", "--json"}));
}

TEST(McpTools, arguments_that_do_not_fit_are_refused_naming_the_field) {
  EXPECT_NE(refusal("check", {{"task", "t"}}).find("argument 'impl' is required"), std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", 3}}).find("argument 'impl' must be a string"), std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", ""}}).find("'impl'"), std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", "f"}, {"imp", "g"}}).find("unknown argument 'imp'"),
            std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", "f"}, {"cases", {"a", 1}}}).find("'cases'"), std::string::npos);
  EXPECT_NE(refusal("validate", {{"task", "t"}, {"candidate", "c"}, {"output_dir", "b"}, {"seed", -1}})
                .find("'seed' must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(refusal("compare", {{"task", "t"}}).find("either 'candidate' or 'aa'"), std::string::npos);
  EXPECT_NE(refusal("compare", {{"task", "t"}, {"candidate", "c"}, {"aa", true}}).find("not both"), std::string::npos);
  EXPECT_NE(
      refusal("validate",
              {{"task", "t"}, {"candidate", "c"}, {"output_dir", "b"}, {"baseline", "x"}, {"against_incumbent", true}})
          .find("two baselines"),
      std::string::npos);
  EXPECT_NE(refusal("explode", nlohmann::json::object()).find("unknown tool 'explode'"), std::string::npos);
  EXPECT_NE(refusal("check", nlohmann::json::array()).find("'arguments' must be an object"), std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", "f"}, {"control", "no_eps"}}).find("give one"),
            std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", "f"}, {"backend", "gpu"}})
                .find("argument 'backend' must be one of cpu, opencl, cuda, not \"gpu\""),
            std::string::npos);
  EXPECT_NE(refusal("compare", {{"task", "t"}, {"aa", true}, {"gate", "median"}}).find("'gate' must be one of"),
            std::string::npos);
  EXPECT_NE(refusal("validate", {{"task", "t"}, {"candidate", "c"}, {"output_dir", "b"}, {"layouts", 65}})
                .find("--layouts must be an integer from 0 to 64"),
            std::string::npos);
}

nlohmann::json tool(const std::string& name) {
  for (const auto& t : tool_list()) {
    if (t["name"] == name) return t;
  }
  ADD_FAILURE() << "no tool " << name;
  return {};
}

// The schema files a schema refers to ("kwb.check.schema.json#/$defs/failure" -> "kwb.check").
void referenced(const nlohmann::json& j, std::set<std::string>& names) {
  if (j.is_array()) {
    for (const auto& x : j) referenced(x, names);
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k == "$ref" && v.is_string()) {
        const std::string file = v.get<std::string>().substr(0, v.get<std::string>().find('#'));
        if (!file.empty()) names.insert(file.substr(0, file.size() - std::string(".schema.json").size()));
      } else {
        referenced(v, names);
      }
    }
  }
}

// kwb's command line with the verbs the tools run, as cli/run.cpp builds it.
struct CommandLine {
  CLI::App root;
  std::vector<Action> actions = {add_check(root),    add_compare(root),   add_validate(root),   add_profile(root),
                                 add_verify(root),   add_keep(root),      add_revalidate(root), add_history(root),
                                 add_campaign(root), add_experiment(root)};
};

// The files in schemas/ are what kwb carries: an edited schema is never declared stale over MCP.
TEST(McpTools, kwb_carries_every_schema_file_as_it_is) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(KWB_SOURCE_DIR) / "schemas")) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".schema.json")) files[name.substr(0, name.size() - 12)] = read_file(e.path());
  }
  std::map<std::string, std::string> carried;
  for (const SchemaFile& f : schema_files()) carried[std::string(f.name)] = std::string(f.text);
  EXPECT_EQ(carried, files);
}

// structuredContent is the verb's JSON under "result", unchanged: a field added beside it can never make the
// verb's output fail its own schema (whose objects reject unknown fields).
TEST(McpTools, every_tool_declares_its_result_with_the_verbs_own_schema) {
  const std::map<std::string, std::string> result_schema = {{"check", "kwb.check"},
                                                            {"compare", "kwb.compare"},
                                                            {"validate", "kwb.decision"},
                                                            {"revalidate", "kwb.decision"},
                                                            {"profile", "kwb.profile"},
                                                            {"verify", "kwb.verify"},
                                                            {"keep", "kwb.keep"},
                                                            {"history", "kwb.history"},
                                                            {"list_tasks", "kwb.tasks"},
                                                            {"runs", "kwb.runs"},
                                                            {"campaign_run", "kwb.campaign_status"},
                                                            {"campaign_status", "kwb.campaign_status"},
                                                            {"campaign_cancel", "kwb.campaign_status"},
                                                            {"campaign_report", "kwb.campaign_report"},
                                                            {"experiment_run", "kwb.experiment_analysis"},
                                                            {"experiment_status", "kwb.experiment_status"},
                                                            {"experiment_report", "kwb.experiment_analysis"}};
  for (const auto& t : tool_list()) {
    const std::string name = t["name"];
    const nlohmann::json& o = t["outputSchema"];
    ASSERT_TRUE(o.is_object()) << name;
    EXPECT_EQ(o["type"], "object") << name;
    EXPECT_EQ(o["additionalProperties"], false) << name;
    EXPECT_EQ(o["required"], nlohmann::json({"exit_code", "result", "stderr"})) << name;
    const std::string schema = result_schema.at(name);
    ASSERT_TRUE(o["$defs"].contains(schema)) << name;
    EXPECT_EQ(o["properties"]["result"]["anyOf"][0]["$ref"], o["$defs"][schema]["$id"]) << name;
    EXPECT_EQ(o["properties"]["result"]["anyOf"][1], nlohmann::json({{"type", "null"}})) << name;
    // Every schema file an embedded schema refers to is embedded too, under its own name and $id.
    std::set<std::string> refs;
    referenced(o["$defs"], refs);
    for (const std::string& r : refs) EXPECT_TRUE(o["$defs"].contains(r)) << name << " refers to " << r;
    for (const auto& [n, d] : o["$defs"].items()) {
      EXPECT_EQ(d["title"], n) << name;
      EXPECT_EQ(d["$id"], "https://kwb.invalid/schemas/" + n + ".schema.json") << name;
    }
  }
}

TEST(McpTools, campaign_and_experiment_tools_become_their_verbs_with_json) {
  EXPECT_EQ(tool_argv("campaign_run", {{"file", "c.toml"}, {"dry_run", true}}),
            (std::vector<std::string>{"campaign", "run", "c.toml", "--dry-run", "--json"}));
  EXPECT_EQ(tool_argv("campaign_status", {{"campaign", "out"}}),
            (std::vector<std::string>{"campaign", "status", "out", "--json"}));
  EXPECT_EQ(tool_argv("campaign_cancel", {{"campaign", "out"}}),
            (std::vector<std::string>{"campaign", "cancel", "out", "--json"}));
  EXPECT_EQ(tool_argv("campaign_report", {{"campaign", "out"}}),
            (std::vector<std::string>{"campaign", "report", "out", "--json"}));
  EXPECT_EQ(tool_argv("experiment_run", {{"file", "x.toml"}}),
            (std::vector<std::string>{"experiment", "run", "x.toml", "--json"}));
  EXPECT_EQ(tool_argv("experiment_report", {{"experiment", "out"}}),
            (std::vector<std::string>{"experiment", "report", "out", "--json"}));
  EXPECT_THROW((void)tool_argv("campaign_run", nlohmann::json::object()), InvalidParams);
}

TEST(McpTools, list_tasks_answers_with_a_schema_kwb_carries) {
  const nlohmann::json out = list_tasks({{"root", std::string(KWB_SOURCE_DIR) + "/tasks"}});
  EXPECT_EQ(out["schema"], "kwb.tasks");
  bool carried = false;
  for (const SchemaFile& f : schema_files()) carried = carried || f.name == out["schema"].get<std::string>();
  EXPECT_TRUE(carried) << "schemas/" << out["schema"] << ".schema.json";
  ASSERT_FALSE(out["tasks"].empty());
  EXPECT_TRUE(out["tasks"][0].contains("workloads")) << out.dump();
}

TEST(McpTools, a_structured_result_keeps_the_verbs_json_unchanged_and_its_stderr) {
  const nlohmann::json out = {{"schema", "kwb.check"}, {"verdict", "FAIL"}};
  const nlohmann::json r = structured_result(out, 65, "building...\nx.cpp:3:5: error: 'nope' was not declared\n");
  EXPECT_EQ(r["result"], out);
  EXPECT_EQ(r["exit_code"], 65);
  EXPECT_NE(r["stderr"].get<std::string>().find("x.cpp:3:5: error:"), std::string::npos);
  EXPECT_TRUE(structured_result(nlohmann::json(), 64, "kwb: error: no task.toml")["result"].is_null());
  EXPECT_TRUE(structured_result(nlohmann::json::parse("[1]"), 70, "")["result"].is_null());
  // A long stderr keeps its end, from a line's start.
  std::string long_err;
  for (int i = 0; long_err.size() < 3 * k_stderr_kept; ++i) long_err += "line " + std::to_string(i) + "\n";
  const std::string kept = structured_result(out, 0, long_err)["stderr"];
  EXPECT_LE(kept.size(), k_stderr_kept);
  EXPECT_TRUE(kept.starts_with("line ")) << kept.substr(0, 40);
  EXPECT_TRUE(long_err.ends_with(kept));
}

// The input schemas state what the command line enforces: its fixed values, its ranges (cli/options.h) and its
// defaults, read from the verbs' own options.
TEST(McpTools, input_schemas_state_the_command_lines_values_ranges_and_defaults) {
  const nlohmann::json validate = tool("validate")["inputSchema"]["properties"];
  EXPECT_EQ(validate["backend"]["enum"], nlohmann::json(backend_names()));
  EXPECT_EQ(validate["backend"]["default"], "cpu");
  EXPECT_EQ(validate["gate"]["enum"], nlohmann::json(gate_names()));
  EXPECT_EQ(validate["gate"]["default"], gate_name(defaults::k_gate));
  EXPECT_EQ(validate["max_minutes"]["minimum"], k_max_minutes_range.min);
  EXPECT_EQ(validate["max_minutes"]["maximum"], k_max_minutes_range.max);
  EXPECT_EQ(validate["max_minutes"]["default"], defaults::k_max_minutes);
  EXPECT_EQ(validate["timeout_seconds"]["default"], k_default_timeout_seconds);
  EXPECT_EQ(validate["layouts"]["type"], "integer");
  EXPECT_EQ(validate["layouts"]["maximum"], static_cast<uint64_t>(k_layouts_range.max));
  EXPECT_EQ(validate["repetitions"]["minimum"], static_cast<uint64_t>(k_repetitions_range.min));
  EXPECT_EQ(validate["seed"]["maximum"], std::numeric_limits<uint64_t>::max());
  EXPECT_FALSE(validate["seed"].contains("default")) << "validate draws its seed";
  EXPECT_EQ(validate["cold"]["default"], false);
  EXPECT_EQ(tool("compare")["inputSchema"]["properties"]["seed"]["default"], defaults::k_compare_seed);
  const nlohmann::json check = tool("check")["inputSchema"]["properties"];
  EXPECT_EQ(check["calls"]["default"], defaults::k_check_calls);
  EXPECT_EQ(check["calls"]["minimum"], static_cast<uint64_t>(k_calls_range.min));
  EXPECT_EQ(check["seed"]["default"], 0);
  // Every numeric argument has its option's range.
  for (const auto& t : tool_list()) {
    for (const auto& [name, p] : t["inputSchema"]["properties"].items()) {
      if (p["type"] == "number" || p["type"] == "integer") {
        EXPECT_TRUE(p.contains("minimum") && p.contains("maximum")) << t["name"] << "." << name;
      }
    }
  }
}

// Every argument of every tool becomes an option its verb takes, with a value the verb accepts: the call is
// turned into a command line and parsed by kwb's own parser.
TEST(McpTools, every_argument_is_an_option_of_its_verb) {
  const std::map<std::string, nlohmann::json> base = {
      {"check", {{"task", "t"}, {"impl", "f.cpp"}}},
      {"compare", {{"task", "t"}, {"candidate", "c.cpp"}}},
      {"validate", {{"task", "t"}, {"candidate", "c.cpp"}, {"output_dir", "b"}}},
      {"revalidate", {{"task", "t"}, {"output_dir", "b"}}},
      {"profile", {{"task", "t"}, {"impl", "f.cpp"}}},
      {"verify", {{"bundle", "b"}}},
      {"keep", {{"bundle", "b"}}},
      {"history", {{"task", "t"}}},
      {"runs", {{"task", "t"}}},
      {"campaign_run", {{"file", "c.toml"}}},
      {"campaign_status", {{"campaign", "out"}}},
      {"campaign_cancel", {{"campaign", "out"}}},
      {"campaign_report", {{"campaign", "out"}}},
      {"experiment_run", {{"file", "x.toml"}}},
      {"experiment_status", {{"experiment", "out"}}},
      {"experiment_report", {{"experiment", "out"}}}};
  size_t arguments = 0;
  for (const auto& t : tool_list()) {
    const std::string name = t["name"];
    if (name == "list_tasks") continue;  // runs in the server
    ASSERT_TRUE(base.contains(name)) << name;
    for (const auto& [arg, p] : t["inputSchema"]["properties"].items()) {
      nlohmann::json args = base.at(name);
      if (name == "check" && arg == "control") args.erase("impl");
      if (name == "compare" && arg == "aa") args.erase("candidate");
      const std::string type = p["type"];
      nlohmann::json value =
          type == "boolean" ? nlohmann::json(true)
          : type == "array"
              ? nlohmann::json::array({p["items"].contains("enum") ? p["items"]["enum"].back() : nlohmann::json("x")})
          : p.contains("enum")    ? p["enum"].back()
          : p.contains("minimum") ? p["minimum"]
                                  : nlohmann::json("x");
      args[arg] = value;
      std::vector<std::string> argv = tool_argv(name, args);
      CommandLine cli;
      std::vector<std::string> reversed(argv.rbegin(), argv.rend());
      try {
        cli.root.parse(reversed);
      } catch (const CLI::ParseError& e) {
        ADD_FAILURE() << name << "." << arg << ": kwb " << argv[0] << " does not take it: " << e.what();
        continue;
      }
      // The option the argument became was given (a positional argument: the verb's first option).
      // (runs is history with --runs always given.)
      // (campaign and experiment tools: the verb's subcommand, run, status, ...)
      const CLI::App* verb = cli.root.get_subcommand(argv[0]);
      if (argv.size() > 1 && argv[1][0] != '-' && !verb->get_subcommands({}).empty()) {
        verb = verb->get_subcommand(argv[1]);
      }
      size_t given = 0;
      for (const CLI::Option* o : verb->get_options()) {
        if (o->get_name() != "--json" && o->get_name() != "--runs" && o->count() > 0) ++given;
      }
      EXPECT_EQ(given, args.size()) << name << "." << arg << ": " << nlohmann::json(argv).dump();
      if (name == "runs") {
        EXPECT_EQ(verb->get_option("--runs")->count(), 1u);
      }
      ++arguments;
    }
  }
  EXPECT_GT(arguments, 50u);
}

TEST(McpTools, the_summary_of_a_rejected_check_says_it_has_no_metric) {
  const nlohmann::json out = {{"verdict", "FAIL"},
                              {"failures", {{{"reason", "numeric_mismatch"}}, {{"reason", "numeric_mismatch"}}}}};
  const std::string s = summary("check", nlohmann::json::object(), out, 1);
  EXPECT_NE(s.find("rejected for numeric_mismatch."), std::string::npos) << s;
  EXPECT_NE(s.find("no metric"), std::string::npos) << s;
}

}  // namespace
}  // namespace kwb::cli::mcp
