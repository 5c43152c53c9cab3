// Numbers at the edges (issue 24, class 6): every numeric option of check, compare, validate and profile, every
// numeric argument of a kwb mcp tool and every numeric field of task.toml is refused when it is not finite or out
// of its stated range, naming the option and the range (exit 64 on the command line and JSON-RPC -32602 over MCP,
// 65 for task.toml), and no timeout, however given, overflows a deadline.
#include "../valid_task.h"
#include "cli/commands.h"
#include "cli/mcp_tools.h"
#include "cli/options.h"
#include "support/temp_dir.h"
#include "task/task.h"
#include "util/error.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace kwb::cli {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> k_edges = {"1e308", "nan", "inf", "-1", "0", "1e10"};

// Whether `text` belongs in `r`, worked out here independently of out_of_range: digits only for an integer option.
bool belongs(const OptionRange& r, const std::string& text) {
  if (r.integer && text.find_first_not_of("0123456789") != std::string::npos) return false;
  const double v = std::strtod(text.c_str(), nullptr);
  return std::isfinite(v) && v >= r.min && v <= r.max;
}

struct Verb {
  const char* name;
  std::string fixed;  // the required arguments
  std::vector<const OptionRange*> numeric;
  std::function<void(CLI::App&)> add;
};

std::vector<Verb> verbs() {
  static CheckArgs check;
  static CompareArgs compare;
  static ValidateArgs validate;
  const std::vector<const OptionRange*> timing = {
      &k_min_improvement_range, &k_max_aa_range,  &k_repetitions_range, &k_max_blocks_range,
      &k_warmups_range,         &k_samples_range, &k_max_minutes_range, &k_timeout_range,
      &k_layouts_range,         &k_seed_range,    &k_lock_timeout_range};
  return {
      {"check",
       "t --impl a.cpp",
       {&k_timeout_range, &k_seed_range, &k_calls_range},
       [](CLI::App& app) { add_check_options(app, check = CheckArgs{}); }},
      {"compare", "t --candidate a.cpp", timing,
       [](CLI::App& app) { add_compare_options(app, compare = CompareArgs{}); }},
      {"validate", "t --candidate a.cpp --output-dir o", timing,
       [](CLI::App& app) { add_validate_options(app, validate = ValidateArgs{}); }},
  };
}

// Parses `line` with the verb's options; "" when accepted, else the parse error's message (a CLI::ParseError is
// what kwb's run() turns into exit 64).
std::string parse_error(const Verb& verb, const std::string& line) {
  CLI::App app;
  verb.add(app);
  try {
    app.parse(line, false);
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(app.exit(e), 0) << line;  // never mistaken for --help
    return e.what();
  }
  return "";
}

TEST(NumericEdges, every_numeric_flag_of_check_compare_and_validate_refuses_what_is_not_in_its_range) {
  for (const Verb& verb : verbs()) {
    for (const OptionRange* r : verb.numeric) {
      for (const std::string& v : k_edges) {
        const std::string line = verb.fixed + " " + r->flag + " " + v;
        const std::string err = parse_error(verb, line);
        if (belongs(*r, v)) {
          EXPECT_EQ(err, "") << verb.name << " " << line;
        } else {
          EXPECT_NE(err.find(r->flag), std::string::npos) << verb.name << " " << line << ": " << err;
          EXPECT_NE(
              err.find(fmt::format("from {}", r->integer ? fmt::format("{:.0f}", r->min) : fmt::format("{}", r->min))),
              std::string::npos)
              << verb.name << " " << line << ": " << err;
          EXPECT_NE(err.find("(got " + v + ")"), std::string::npos) << err;
        }
      }
    }
  }
}

TEST(NumericEdges, profile_flags_are_checked_the_same_way) {
  for (const OptionRange* r : {&k_timeout_range, &k_callgrind_calls_range}) {
    for (const std::string& v : k_edges) {
      CLI::App root;
      const Action action = add_profile(root);  // owns what the options parse into
      std::string err;
      try {
        root.parse("profile t --impl a.cpp " + std::string(r->flag) + " " + v, false);
      } catch (const CLI::ParseError& e) {
        err = e.what();
      }
      if (belongs(*r, v)) {
        EXPECT_EQ(err, "") << r->flag << " " << v;
      } else {
        EXPECT_NE(err.find(std::string(r->flag) + ": must be"), std::string::npos)
            << r->flag << " " << v << ": " << err;
      }
    }
  }
}

TEST(NumericEdges, the_message_states_the_range) {
  EXPECT_EQ(out_of_range(k_timeout_range, "nan"),
            "--timeout-seconds must be a finite number from 0.001 to 86400 (got nan)");
  EXPECT_EQ(out_of_range(k_calls_range, "1e10"), "--calls must be an integer from 1 to 1000 (got 1e10)");
  EXPECT_EQ(out_of_range(k_seed_range, "-1"), "--seed must be an integer from 0 to 2^64 - 1 (got -1)");
  EXPECT_EQ(out_of_range(k_seed_range, "18446744073709551615"), "");
  EXPECT_NE(out_of_range(k_seed_range, "18446744073709551616"), "");
  EXPECT_EQ(out_of_range(k_timeout_range, "+5"), "");
  EXPECT_NE(out_of_range(k_timeout_range, "1e999"), "");
  EXPECT_NE(out_of_range(k_timeout_range, ""), "");
  EXPECT_NE(out_of_range(k_timeout_range, "5s"), "");
}

TEST(NumericEdges, a_timeout_never_overflows_whatever_it_is_given) {
  using std::chrono::milliseconds;
  EXPECT_EQ(timeout_from_seconds(1e10), milliseconds(86'400'000));
  EXPECT_EQ(timeout_from_seconds(1e308), milliseconds(86'400'000));
  EXPECT_EQ(timeout_from_seconds(INFINITY), milliseconds(86'400'000));
  EXPECT_EQ(timeout_from_seconds(NAN), milliseconds(1));
  EXPECT_EQ(timeout_from_seconds(-1), milliseconds(1));
  EXPECT_EQ(timeout_from_seconds(2.5), milliseconds(2500));
  // The largest allowed timeout, x50 under valgrind, still leaves a deadline far inside steady_clock's range.
  const auto longest = timeout_from_seconds(k_timeout_range.max) * 50;
  EXPECT_GT(std::chrono::steady_clock::now() + longest, std::chrono::steady_clock::now());
}

TEST(NumericEdges, mcp_arguments_are_refused_naming_the_argument_and_the_range) {
  struct Case {
    const char* tool;
    nlohmann::json base;
    const char* arg;
  };
  const nlohmann::json check = {{"task", "t"}, {"impl", "a.cpp"}};
  const nlohmann::json compare = {{"task", "t"}, {"candidate", "a.cpp"}};
  const nlohmann::json validate = {{"task", "t"}, {"candidate", "a.cpp"}, {"output_dir", "o"}};
  const std::vector<Case> cases = {
      {"check", check, "timeout_seconds"},           {"compare", compare, "max_minutes"},
      {"compare", compare, "min_improvement_pct"},   {"validate", validate, "max_minutes"},
      {"validate", validate, "min_improvement_pct"}, {"validate", validate, "max_aa_difference_pct"}};
  for (const Case& c : cases) {
    for (const double v : {1e308, 1e10, -1.0, 0.0, -1e308}) {
      nlohmann::json args = c.base;
      args[c.arg] = v;
      std::string err;
      try {
        mcp::tool_argv(c.tool, args);
      } catch (const mcp::InvalidParams& e) {
        err = e.what();
      }
      const bool in_range = c.arg == std::string("min_improvement_pct") && v == -1.0  ? true
                            : c.arg == std::string("min_improvement_pct") && v == 0.0 ? true
                                                                                      : false;
      if (in_range) {
        EXPECT_EQ(err, "") << c.tool << " " << c.arg << " " << v;
      } else {
        EXPECT_NE(err.find(std::string("argument '") + c.arg + "'"), std::string::npos) << err;
        EXPECT_NE(err.find(" from "), std::string::npos) << err;
      }
    }
  }
  // The ranges are in the tools' input schemas too.
  for (const auto& t : mcp::tool_list()) {
    if (t["name"] != "check") continue;
    EXPECT_EQ(t["inputSchema"]["properties"]["timeout_seconds"]["minimum"], k_timeout_range.min);
    EXPECT_EQ(t["inputSchema"]["properties"]["timeout_seconds"]["maximum"], k_timeout_range.max);
  }
}

class TaskNumbers : public ::testing::Test {
protected:
  void SetUp() override {
    std::ofstream(m_dir / "impl.cpp") << "// empty\n";
    std::ofstream(m_dir / "oracle.cpp") << "// the oracle\n";
  }

  // The valid manifest with `from` replaced; the DataError's message ("" when it loads).
  std::string load_with(const std::string& from, const std::string& to) {
    std::string s = kwb::test::k_valid_manifest;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    std::ofstream(m_dir / "task.toml") << s;
    try {
      load_task(m_dir);
    } catch (const DataError& e) {
      EXPECT_EQ(e.code(), ExitCode::data_error);
      return e.what();
    }
    return "";
  }

  const test::TempDir m_tmp{"kwb-numbers"};
  const fs::path m_dir = m_tmp.path();
};

TEST_F(TaskNumbers, every_numeric_field_refuses_inf_nan_and_out_of_range_values_naming_the_field) {
  struct Field {
    std::string from, key, prefix;  // the valid text, the key it names, the replacement's text before the value
  };
  const std::vector<Field> fields = {
      {"scale = 2.0", "scale", "scale = "}, {"low = 0.5", "low", "low = "},
      {"high = 1.5", "high", "high = "},    {"default = 1e-6", "default", "default = "},
      {"rtol = 1e-4", "rtol", "rtol = "},   {"atol = 0.0", "atol", "atol = "},
  };
  for (const Field& f : fields) {
    for (const std::string v : {"inf", "-inf", "nan", "1e308"}) {
      if (f.key == "high" && v == "-inf") continue;  // refused, but as low < high: still a 65
      // A tolerance is any finite number >= 0 (a huge one is the task author's choice, and stays finite).
      if ((f.key == "rtol" || f.key == "atol") && v == "1e308") {
        EXPECT_EQ(load_with(f.from, f.prefix + v), "");
        continue;
      }
      const std::string err = load_with(f.from, f.prefix + v);
      EXPECT_NE(err, "") << f.key << " = " << v << " was accepted";
      EXPECT_NE(err.find(f.key), std::string::npos) << f.key << " = " << v << ": " << err;
    }
  }
  EXPECT_NE(load_with("scale = 2.0", "scale = 2.0\nmean = nan").find("mean"), std::string::npos);
  EXPECT_NE(load_with("scale = 2.0", "scale = 2.0\nmean = 1e301").find("from -1e+300 to 1e+300"), std::string::npos);
  EXPECT_NE(load_with("seed = 1", "seed = -1").find("seed"), std::string::npos);
  EXPECT_NE(load_with("rows = 2", "rows = 0").find("rows"), std::string::npos);
  EXPECT_NE(load_with("rows = 2", "rows = -1").find("rows"), std::string::npos);
  EXPECT_NE(load_with("oracle = \"oracle.cpp\"", "oracle = \"oracle.cpp\"\nthreads = 10000000000").find("threads"),
            std::string::npos);
  EXPECT_NE(load_with("oracle = \"oracle.cpp\"", "oracle = \"oracle.cpp\"\nthreads = 0").find("from 1 to 256"),
            std::string::npos);
  EXPECT_EQ(load_with("oracle = \"oracle.cpp\"", "oracle = \"oracle.cpp\"\nthreads = 4"), "");
  // special_value is the one number that may be inf or nan on purpose; its fraction is a probability.
  EXPECT_EQ(load_with("scale = 2.0", "scale = 2.0\nspecial_fraction = 0.25\nspecial_value = nan"), "");
  EXPECT_NE(
      load_with("scale = 2.0", "scale = 2.0\nspecial_fraction = nan\nspecial_value = nan").find("special_fraction"),
      std::string::npos);
}

}  // namespace
}  // namespace kwb::cli
