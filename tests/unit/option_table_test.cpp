// validate's option table (util/option_table.h), turned into each surface that offers it and parsed by kwb's own
// readers: every row a flag of kwb validate (and of compare and revalidate, which share them) that parses to the
// value given, every row offered over MCP an argument of the validate tool whose call becomes that flag, and every
// row offered to campaigns a [validate] key that load_campaign turns into that flag and value. A row's help is the
// same text on the command line and in the tools' schemas, since both come from the row.
#include "util/option_table.h"
#include "support/build_paths.h"

#include "campaign/campaign_file.h"
#include "cli/commands.h"
#include "cli/mcp_tools.h"
#include "cli/options.h"
#include "pipeline/defaults.h"
#include "support/temp_dir.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace kwb {
namespace {

namespace fs = std::filesystem;

// A value each row accepts, as the command line spells it ("" for a flag), and as TOML and JSON write it.
struct Sample {
  std::string cli;
  std::string toml;
  nlohmann::json json;
};

Sample sample_of(const OptionRow& row) {
  switch (row.kind) {
    case OptionKind::number: {
      const double v = row.range->min + 1;
      return {fmt::format("{}", v), fmt::format("{}", v), v};
    }
    case OptionKind::integer: {
      const auto v = static_cast<uint64_t>(row.range->min) + 3;
      return {fmt::format("{}", v), fmt::format("{}", v), v};
    }
    case OptionKind::text:
      return {row.choices.back(), fmt::format("\"{}\"", row.choices.back()), row.choices.back()};
    case OptionKind::texts:
      return {"decode", "[\"decode\"]", nlohmann::json::array({"decode"})};
    case OptionKind::flag:
      return {"", "true", true};
  }
  return {};
}

TEST(OptionTable, every_row_has_a_key_a_flag_help_and_what_its_kind_needs) {
  std::set<std::string> keys, flags;
  for (const OptionRow& row : option_rows()) {
    EXPECT_TRUE(keys.insert(row.key).second) << row.key << " twice";
    EXPECT_TRUE(flags.insert(row.flag).second) << row.flag << " twice";
    EXPECT_TRUE(std::string_view(row.flag).starts_with("--")) << row.key;
    EXPECT_GT(std::string_view(row.help).size(), 10u) << row.key;
    const bool numeric = row.kind == OptionKind::number || row.kind == OptionKind::integer;
    EXPECT_EQ(row.range != nullptr, numeric) << row.key << ": a numeric row has a range, no other does";
    if (row.range != nullptr) {
      EXPECT_EQ(row.range->integer, row.kind == OptionKind::integer) << row.key;
      EXPECT_EQ(option_range(row.flag), row.range) << row.key << ": the flag's range is the row's";
    }
    EXPECT_EQ((row.surfaces & k_campaign) != 0, !std::string_view(row.example).empty())
        << row.key << ": a row campaigns offer has a [validate] example, no other does";
    if (!std::string_view(row.example).empty()) {
      EXPECT_TRUE(std::string_view(row.example).starts_with(std::string(row.key) + " = ")) << row.example;
    }
  }
  // The help states the default the CLI applies when the task sets none.
  EXPECT_NE(std::string(option_row("same_margin_pct").help).find(fmt::format("else {:g}", defaults::k_same_margin_pct)),
            std::string::npos);
}

TEST(OptionTable, every_row_is_a_flag_of_validate_compare_and_revalidate_that_parses) {
  for (const OptionRow& row : option_rows()) {
    const Sample s = sample_of(row);
    for (const std::vector<std::string>& head :
         {std::vector<std::string>{"validate", "t", "--candidate", "c.cpp", "--output-dir", "b"},
          std::vector<std::string>{"compare", "t", "--candidate", "c.cpp"},
          std::vector<std::string>{"revalidate", "t", "--output-dir", "b"}}) {
      if (head[0] == "compare" && (std::string_view(row.key) == "seed" || std::string_view(row.key) == "no_profile")) {
        continue;  // compare's --seed is its own (default 1, for exploring), and it has no profile stage
      }
      CLI::App root;
      const std::vector<cli::Action> actions = {cli::add_compare(root), cli::add_validate(root),
                                                cli::add_revalidate(root)};
      std::vector<std::string> argv = head;
      argv.push_back(row.flag);
      if (!s.cli.empty()) argv.push_back(s.cli);
      std::vector<std::string> reversed(argv.rbegin(), argv.rend());
      try {
        root.parse(reversed);
      } catch (const CLI::ParseError& e) {
        ADD_FAILURE() << head[0] << " " << row.flag << " " << s.cli << ": " << e.what();
        continue;
      }
      const CLI::Option* o = root.get_subcommand(head[0])->get_option(row.flag);
      ASSERT_NE(o, nullptr) << head[0] << " " << row.flag;
      EXPECT_EQ(o->count(), 1u) << head[0] << " " << row.flag;
      EXPECT_EQ(o->get_description(), row.help) << head[0] << " " << row.flag;
      if (!s.cli.empty()) {
        EXPECT_EQ(o->as<std::string>(), s.cli) << head[0] << " " << row.flag;
      }
    }
  }
}

TEST(OptionTable, every_row_offered_over_mcp_becomes_its_flag_in_the_validate_tools_call) {
  const nlohmann::json tools = cli::mcp::tool_list();
  const auto schema_of = [&tools](const std::string& name) {
    for (const nlohmann::json& t : tools) {
      if (t["name"] == name) return t["inputSchema"]["properties"];
    }
    return nlohmann::json();
  };
  const nlohmann::json validate = schema_of("validate");
  size_t offered = 0;
  for (const OptionRow& row : option_rows()) {
    if ((row.surfaces & k_mcp) == 0) {
      EXPECT_FALSE(validate.contains(row.key)) << row.key << " is not offered over MCP";
      continue;
    }
    ++offered;
    ASSERT_TRUE(validate.contains(row.key)) << row.key;
    EXPECT_EQ(validate[row.key]["description"], row.help) << row.key;
    EXPECT_TRUE(schema_of("revalidate").contains(row.key)) << row.key;
    const Sample s = sample_of(row);
    const std::vector<std::string> argv = cli::mcp::tool_argv(
        "validate", {{"task", "t"}, {"candidate", "c.cpp"}, {"output_dir", "b"}, {row.key, s.json}});
    std::vector<std::string> want = {"validate", "t", "--candidate", "c.cpp", "--output-dir", "b", row.flag};
    if (!s.cli.empty()) want.push_back(s.cli);
    want.push_back("--json");
    EXPECT_EQ(argv, want) << row.key;
  }
  EXPECT_GE(offered, 10u);
}

TEST(OptionTable, every_row_offered_to_campaigns_is_a_validate_key_read_into_its_flag) {
  const test::TempDir dir("kwb-option-table");
  write_file_atomic(dir / "one.cpp", "x\n");
  const fs::path task = fs::path(KWB_SOURCE_DIR) / "tasks" / "rmsnorm";
  std::vector<std::string> keys;
  for (const OptionRow& row : option_rows()) {
    if ((row.surfaces & k_campaign) == 0) continue;
    keys.emplace_back(row.key);
    const Sample s = sample_of(row);
    write_file_atomic(dir / "campaign.toml", fmt::format("[validate]\n{} = {}\n[[tasks]]\ndir = \"{}\"\n"
                                                         "candidates = [\"one.cpp\"]\n",
                                                         row.key, s.toml, task.string()));
    Campaign c;
    try {
      c = load_campaign(dir / "campaign.toml", cli::check_validate_flag);
    } catch (const std::exception& e) {
      ADD_FAILURE() << row.key << " = " << s.toml << ": " << e.what();
      continue;
    }
    ASSERT_EQ(c.validate.size(), 1u) << row.key;
    EXPECT_EQ(c.validate[0].flag, row.flag) << row.key;
    EXPECT_EQ(c.validate[0].value, s.cli) << row.key;
  }
  EXPECT_EQ(keys, validate_keys());
}

}  // namespace
}  // namespace kwb
