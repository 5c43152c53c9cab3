// ARCHITECTURE.md's dependency table is the rule, and this test enforces it: it parses the table from the document
// itself (so the two cannot drift apart) and reads every `#include "X/..."` in src/; an include of another src/
// folder that the table does not allow fails, with the file and line.
#include "support/build_paths.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path k_root = KWB_SOURCE_DIR;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// used folder -> the folders that may use it; "*" stands for `everything`.
using Rules = std::map<std::string, std::set<std::string>>;

// The indented `X <- a, b (why), c` lines under "## Dependencies". Any other indented line there is an error, so a
// table that stops parsing cannot silently allow everything.
Rules parse_rules(const std::string& architecture_md, std::vector<std::string>& errors) {
  Rules rules;
  std::istringstream in(architecture_md);
  std::string line;
  bool in_section = false;
  const std::regex entry(R"(^    ([a-z_]+)\s+<-\s+(.*)$)");
  while (std::getline(in, line)) {
    if (line.starts_with("## ")) {
      in_section = line.starts_with("## Dependencies");
      continue;
    }
    if (!in_section || !line.starts_with("    ")) continue;
    std::smatch m;
    if (!std::regex_match(line, m, entry)) {
      errors.push_back("ARCHITECTURE.md: cannot read dependency line '" + line + "'");
      continue;
    }
    std::set<std::string>& users = rules[m[1]];
    const std::string list = std::regex_replace(m[2].str(), std::regex(R"(\([^)]*\))"), "");
    std::istringstream items(list);
    std::string item;
    while (std::getline(items, item, ',')) {
      std::istringstream words(item);
      std::string word;
      if (!(words >> word)) continue;
      if (word == "everything") {
        users.insert("*");
      } else if (word != "nothing") {
        users.insert(word);
      }
    }
  }
  if (rules.empty()) errors.push_back("ARCHITECTURE.md: no dependency table under '## Dependencies'");
  return rules;
}

struct SourceFile {
  std::string path;  // relative to the repository, "src/<folder>/..."
  std::string text;
};

std::string fmt_violation(const std::string& path, int line, const std::string& user, const std::string& used,
                          const std::string& allowed) {
  return path + ":" + std::to_string(line) + ": " + user + "/ includes " + used +
         "/, which ARCHITECTURE.md does not allow (" + used + " <- " + allowed + ")";
}

// Every include of one src/ folder from another that `rules` does not allow, and every src/ folder missing from the
// table, as "file:line: ..." messages.
std::vector<std::string> violations(const Rules& rules, const std::set<std::string>& folders,
                                    const std::vector<SourceFile>& files) {
  std::vector<std::string> out;
  for (const std::string& f : folders) {
    if (!rules.contains(f)) out.push_back("ARCHITECTURE.md: src/" + f + "/ has no line in the dependency table");
  }
  const std::regex include(R"(^\s*#\s*include\s+"([a-z_]+)/)");
  for (const SourceFile& file : files) {
    const std::string user = std::next(fs::path(file.path).begin())->string();  // src/<user>/...
    std::istringstream in(file.text);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      const std::string used = m[1];
      if (used == user || !folders.contains(used)) continue;  // its own folder, or not src/ (kwb/kernel.h)
      const auto it = rules.find(used);
      if (it != rules.end() && (it->second.contains("*") || it->second.contains(user))) continue;
      std::string allowed;
      for (const std::string& u : it == rules.end() ? std::set<std::string>{} : it->second) {
        allowed += (allowed.empty() ? "" : ", ") + u;
      }
      out.push_back(fmt_violation(file.path, n, user, used, allowed.empty() ? "nothing" : allowed));
    }
  }
  return out;
}

std::set<std::string> src_folders() {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(k_root / "src")) {
    if (e.is_directory()) out.insert(e.path().filename().string());
  }
  return out;
}

std::vector<SourceFile> src_files() {
  std::vector<SourceFile> out;
  for (const auto& e : fs::recursive_directory_iterator(k_root / "src")) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".cpp" || ext == ".h")) {
      out.push_back({fs::relative(e.path(), k_root).string(), read_text(e.path())});
    }
  }
  return out;
}

Rules real_rules() {
  std::vector<std::string> errors;
  Rules r = parse_rules(read_text(k_root / "ARCHITECTURE.md"), errors);
  for (const std::string& e : errors) ADD_FAILURE() << e;
  return r;
}

TEST(architecture_test, every_include_in_src_is_an_edge_the_table_allows) {
  const std::vector<SourceFile> files = src_files();
  ASSERT_GT(files.size(), 50u);
  std::string all;
  for (const std::string& v : violations(real_rules(), src_folders(), files)) all += v + "\n";
  EXPECT_TRUE(all.empty()) << "fix the include, or the table in ARCHITECTURE.md if the edge is right:\n" << all;
}

TEST(architecture_test, the_table_reads_as_written) {
  const Rules r = real_rules();
  EXPECT_TRUE(r.at("util").contains("*"));
  EXPECT_TRUE(r.at("cli").empty());
  EXPECT_EQ(r.at("backend"), (std::set<std::string>{"worker"}));
  EXPECT_TRUE(r.at("stats").contains("record"));  // "record (verify replays the statistics)": the note is dropped
  EXPECT_FALSE(r.at("task").contains("worker"));
}

// The check can fail: an include the table forbids (task using pipeline), in a file that does not exist, is caught
// with its file and line; one it allows is not.
TEST(architecture_test, a_forbidden_include_is_reported_with_file_and_line) {
  const std::vector<SourceFile> files = {
      {"src/task/example.cpp", "#include \"task/task.h\"\n#include \"util/error.h\"\n#include \"pipeline/check.h\"\n"},
      {"src/pipeline/example.cpp", "#include \"task/task.h\"\n#include <kwb/kernel.h>\n#include \"kwb/kernel.h\"\n"}};
  const std::vector<std::string> v = violations(real_rules(), src_folders(), files);
  ASSERT_EQ(v.size(), 1u) << ::testing::PrintToString(v);
  EXPECT_EQ(v[0].rfind("src/task/example.cpp:3: task/ includes pipeline/", 0), 0u) << v[0];
}

TEST(architecture_test, a_folder_missing_from_the_table_or_an_unreadable_line_is_an_error) {
  std::vector<std::string> errors;
  const Rules r = parse_rules("## Dependencies\n\n    util      <- everything\n    task      -> oracle\n", errors);
  EXPECT_EQ(errors.size(), 1u);
  std::set<std::string> folders = {"util", "task"};
  EXPECT_EQ(violations(r, folders, {}).size(), 1u);  // task has no line
}

}  // namespace
