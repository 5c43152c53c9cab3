// kwb mcp's tools without a process (cli/mcp_tools.h): every tool the issue names is offered with a closed input
// schema, a call becomes the command line the CLI would get, and arguments that do not fit are refused naming the
// field, never guessed at.
#include "cli/mcp_tools.h"

#include <gtest/gtest.h>

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
  EXPECT_EQ(names, (std::set<std::string>{"check", "compare", "validate", "revalidate", "profile", "verify",
                                          "history", "keep", "list_tasks"}));
}

// What a client may assume: only keep replaces state (the incumbent); the readers change nothing a later call sees.
TEST(McpTools, each_tool_says_whether_it_reads_or_replaces_state) {
  std::set<std::string> read_only, destructive;
  for (const auto& t : tool_list()) {
    ASSERT_TRUE(t["annotations"].is_object()) << t.dump();
    if (t["annotations"]["readOnlyHint"] == true) read_only.insert(t["name"].get<std::string>());
    if (t["annotations"]["destructiveHint"] == true) destructive.insert(t["name"].get<std::string>());
  }
  EXPECT_EQ(read_only, (std::set<std::string>{"check", "profile", "verify", "history", "list_tasks"}));
  EXPECT_EQ(destructive, std::set<std::string>{"keep"});
}

TEST(McpTools, a_call_becomes_the_command_line_the_cli_gets) {
  EXPECT_EQ(tool_argv("check", {{"task", "tasks/rmsnorm"}, {"impl", "f.cpp"}, {"cases", {"zeros", "decode"}}}),
            (Args{"check", "tasks/rmsnorm", "--impl", "f.cpp", "--case", "zeros", "--case", "decode", "--json"}));
  EXPECT_EQ(tool_argv("validate", {{"task", "t"}, {"candidate", "c.cpp"}, {"output_dir", "b"},
                                   {"against_incumbent", true}, {"max_minutes", 0.5}, {"seed", 7}}),
            (Args{"validate", "t", "--candidate", "c.cpp", "--output-dir", "b", "--against=incumbent",
                  "--max-minutes", "0.5", "--seed", "7", "--json"}));
  EXPECT_EQ(tool_argv("compare", {{"task", "t"}, {"aa", true}}), (Args{"compare", "t", "--aa", "--json"}));
  EXPECT_EQ(tool_argv("keep", {{"bundle", "b"}}), (Args{"keep", "b", "--json"}));
  EXPECT_EQ(tool_argv("validate", {{"task", "t"}, {"candidate", "c"}, {"output_dir", "b"},
                                   {"against_incumbent", false}}),
            (Args{"validate", "t", "--candidate", "c", "--output-dir", "b", "--json"}));
}

TEST(McpTools, arguments_that_do_not_fit_are_refused_naming_the_field) {
  EXPECT_NE(refusal("check", {{"task", "t"}}).find("argument 'impl' is required"), std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", 3}}).find("argument 'impl' must be a string"),
            std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", ""}}).find("'impl'"), std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", "f"}, {"imp", "g"}}).find("unknown argument 'imp'"),
            std::string::npos);
  EXPECT_NE(refusal("check", {{"task", "t"}, {"impl", "f"}, {"cases", {"a", 1}}}).find("'cases'"), std::string::npos);
  EXPECT_NE(refusal("validate", {{"task", "t"}, {"candidate", "c"}, {"output_dir", "b"}, {"seed", -1}})
                .find("'seed' must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(refusal("compare", {{"task", "t"}}).find("either 'candidate' or 'aa'"), std::string::npos);
  EXPECT_NE(refusal("compare", {{"task", "t"}, {"candidate", "c"}, {"aa", true}}).find("not both"),
            std::string::npos);
  EXPECT_NE(refusal("validate", {{"task", "t"}, {"candidate", "c"}, {"output_dir", "b"}, {"baseline", "x"},
                                 {"against_incumbent", true}})
                .find("two baselines"),
            std::string::npos);
  EXPECT_NE(refusal("explode", nlohmann::json::object()).find("unknown tool 'explode'"), std::string::npos);
  EXPECT_NE(refusal("check", nlohmann::json::array()).find("'arguments' must be an object"), std::string::npos);
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
