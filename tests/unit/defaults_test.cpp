// The defaults table (src/pipeline/defaults.h) is what the verbs parse to when given no flags, and what their --help
// shows: compare and validate agree on every flag they share.
#include "pipeline/defaults.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "support/build_paths.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace kwb::cli {
namespace {

void expect_table(const GateConfig& g, const Budget& b, const TimingOptions& t) {
  EXPECT_EQ(g.kind, defaults::k_gate);
  EXPECT_EQ(g.min_improvement_pct, defaults::k_min_improvement_pct);
  EXPECT_EQ(g.max_aa_difference_pct, defaults::k_max_aa_difference_pct);
  EXPECT_EQ(g.alpha, defaults::k_alpha);
  EXPECT_EQ(b.min_blocks, defaults::k_repetitions);
  EXPECT_EQ(b.max_blocks, defaults::k_max_blocks);
  EXPECT_EQ(b.max_seconds, defaults::k_max_minutes * 60.0);
  EXPECT_EQ(t.backend, BackendKind::cpu);
  EXPECT_EQ(t.timeout, defaults::k_timeout);
  EXPECT_EQ(t.warmups, defaults::k_warmups);
  EXPECT_EQ(t.samples, defaults::k_samples);
  EXPECT_EQ(t.cold, defaults::k_cold);
}

TEST(defaults_test, compare_without_flags_parses_to_the_table) {
  CLI::App app;
  CompareArgs a;
  add_compare_options(app, a);
  app.parse("tasks/rmsnorm --candidate candidate.cpp", false);
  const CompareRequest r = compare_request(a);
  EXPECT_EQ(r.mode, CompareMode::ab);
  expect_table(r.gate, r.budget, r.timing);
  EXPECT_EQ(r.seed, defaults::k_compare_seed);
  EXPECT_EQ(r.exhaustive_checks, defaults::k_exhaustive);
}

TEST(defaults_test, validate_without_flags_parses_to_the_table) {
  CLI::App app;
  ValidateArgs a;
  add_validate_options(app, a);
  app.parse("tasks/rmsnorm --candidate candidate.cpp --output-dir out", false);
  const ValidateOptions o = validate_options(a);
  expect_table(o.gate, o.budget, o.timing);
  EXPECT_FALSE(o.seed.has_value());  // drawn at random and recorded in the plan
  EXPECT_EQ(o.exhaustive_checks, defaults::k_exhaustive);
  EXPECT_EQ(o.layouts, defaults::k_layouts);
}

TEST(defaults_test, check_without_flags_parses_to_the_table) {
  CLI::App app;
  CheckArgs a;
  add_check_options(app, a);
  app.parse("tasks/rmsnorm --impl candidate.cpp", false);
  const CheckOptions o = check_options(a);
  EXPECT_EQ(o.timeout, defaults::k_timeout);
  EXPECT_EQ(o.calls_per_case, defaults::k_check_calls);
  EXPECT_EQ(o.exhaustive, defaults::k_exhaustive);
  EXPECT_EQ(o.nonce, 0u);  // the task's published seeds
}

// docs/timing.md's table of defaults, the one people read, says what the code's table says: each row's default
// cell starts with the value in src/pipeline/defaults.h, and every row is checked.
TEST(defaults_test, the_documented_table_is_the_table) {
  std::ifstream in(std::filesystem::path(KWB_SOURCE_DIR) / "docs" / "timing.md");
  ASSERT_TRUE(in) << "docs/timing.md";
  const auto on = [](bool b) -> std::string { return b ? "on" : "off"; };
  // flag (as the row names it) -> how its default cell starts.
  std::map<std::string, std::string> expected = {
      {"`--timeout-seconds`", std::to_string(std::chrono::seconds(defaults::k_timeout).count())},
      {"`--calls`", std::to_string(defaults::k_check_calls)},
      {"`--exhaustive`", on(defaults::k_exhaustive)},
      {"`--warmups`", std::to_string(defaults::k_warmups)},
      {"`--samples`", std::to_string(defaults::k_samples)},
      {"`--cold`", on(defaults::k_cold)},
      {"`--layouts`", std::to_string(defaults::k_layouts)},
      {"`--repetitions`", std::to_string(defaults::k_repetitions)},
      {"`--max-blocks`", std::to_string(defaults::k_max_blocks)},
      {"`--max-minutes`", fmt::format("{}", defaults::k_max_minutes)},
      {"alpha", fmt::format("{}", defaults::k_alpha)},
      {"`--gate`", "`" + gate_name(defaults::k_gate) + "`"},
      {"`--min-improvement-pct`", fmt::format("{}", defaults::k_min_improvement_pct)},
      {"`--same-margin-pct`", fmt::format("{}", defaults::k_same_margin_pct)},
      {"`--max-aa-difference-pct`", fmt::format("{}", defaults::k_max_aa_difference_pct)},
      {"`--seed`", fmt::format("compare: {}", defaults::k_compare_seed)},
  };
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Defaults";
    if (!in_section || line.rfind("| ", 0) != 0) continue;
    const size_t flag_end = line.find(" | ", 2);
    const size_t value_end = line.find(" |", flag_end + 3);
    ASSERT_NE(value_end, std::string::npos) << line;
    const std::string flag = line.substr(2, flag_end - 2);
    const std::string value = line.substr(flag_end + 3, value_end - flag_end - 3);
    const auto it = expected.find(flag);
    if (it == expected.end()) {
      EXPECT_EQ(flag, "flag") << "a row the test does not know: " << line;  // else the header
      continue;
    }
    // "1" must not match "10": the value ends there, or goes on with words.
    const size_t n = it->second.size();
    const bool ends = value.size() == n || std::string(" :;(").find(value[n]) != std::string::npos;
    EXPECT_TRUE(value.rfind(it->second, 0) == 0 && ends)
        << flag << ": docs/timing.md says " << value << ", src/pipeline/defaults.h " << it->second;
    expected.erase(it);
  }
  for (const auto& [flag, value] : expected) ADD_FAILURE() << flag << " (" << value << ") has no row in docs/timing.md";
}

// The line of `help` that documents `flag`, with its default.
std::string help_line(const std::string& help, const std::string& flag) {
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(flag);
    if (at != std::string::npos && line.find_first_not_of(' ') == at &&
        (line.size() == at + flag.size() || line[at + flag.size()] == ' ')) {
      return line;
    }
  }
  return "";
}

TEST(defaults_test, compare_and_validate_help_show_the_same_defaults) {
  CLI::App root;
  const std::vector<Action> actions = {add_check(root), add_compare(root), add_validate(root), add_profile(root)};
  CLI::App* compare = root.get_subcommand("compare");
  CLI::App* validate = root.get_subcommand("validate");
  const std::string compare_help = compare->help();
  const std::string validate_help = validate->help();
  // The flags they share through add_timing_options: the same default and the same line in --help.
  for (const char* flag :
       {"--backend", "--gate", "--min-improvement-pct", "--max-aa-difference-pct", "--repetitions", "--max-blocks",
        "--warmups", "--samples", "--max-minutes", "--timeout-seconds", "--workload", "--cold", "--exhaustive"}) {
    const CLI::Option* c = compare->get_option_no_throw(flag);
    const CLI::Option* v = validate->get_option_no_throw(flag);
    ASSERT_NE(c, nullptr) << flag;
    ASSERT_NE(v, nullptr) << flag;
    EXPECT_EQ(c->get_default_str(), v->get_default_str()) << flag;
    const std::string line = help_line(compare_help, flag);
    EXPECT_FALSE(line.empty()) << flag << " is not in compare --help:\n" << compare_help;
    EXPECT_EQ(line, help_line(validate_help, flag)) << flag;
  }
  // Any other flag both have shows the same default too, except --seed, the one default they do not share
  // (docs/timing.md): compare's is fixed, validate draws one.
  for (const CLI::Option* c : compare->get_options()) {
    const std::string name = c->get_name();
    if (name.rfind("--", 0) != 0 || name == "--seed") continue;
    if (const CLI::Option* v = validate->get_option_no_throw(name)) {
      EXPECT_EQ(c->get_default_str(), v->get_default_str()) << name;
    }
  }
  EXPECT_EQ(compare->get_option("--repetitions")->get_default_str(), std::to_string(defaults::k_repetitions));
  EXPECT_EQ(compare->get_option("--max-blocks")->get_default_str(), std::to_string(defaults::k_max_blocks));
  EXPECT_EQ(std::stod(compare->get_option("--max-aa-difference-pct")->get_default_str()),
            defaults::k_max_aa_difference_pct);
  EXPECT_EQ(std::stod(compare->get_option("--max-minutes")->get_default_str()), defaults::k_max_minutes);
  EXPECT_EQ(compare->get_option("--gate")->get_default_str(), gate_name(defaults::k_gate));
  EXPECT_EQ(compare->get_option("--seed")->get_default_str(), std::to_string(defaults::k_compare_seed));
  EXPECT_EQ(validate->get_option("--seed")->get_default_str(), "");
  // Every verb that runs an implementation has the same per-call timeout.
  for (const char* verb : {"check", "compare", "validate", "profile"}) {
    const CLI::Option* t = root.get_subcommand(verb)->get_option("--timeout-seconds");
    EXPECT_EQ(std::stod(t->get_default_str()), k_default_timeout_seconds) << verb;
  }
  EXPECT_EQ(root.get_subcommand("check")->get_option("--calls")->get_default_str(),
            std::to_string(defaults::k_check_calls));
}

}  // namespace
}  // namespace kwb::cli
