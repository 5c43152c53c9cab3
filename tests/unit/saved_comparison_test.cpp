// compare-saved's reading and statistics (record/saved_comparison.h): a known ratio between two synthetic compare
// folders is found with an interval that holds it; a result against itself is 0%; the workloads only one holds,
// too few visits, differing settings and machines are said; and a folder that is not a saved result, or an arm it
// does not have, is a DataError naming the file and the fix.
#include "record/saved_comparison.h"
#include "support/build_paths.h"

#include "record/schema.h"
#include "support/temp_dir.h"
#include "util/error.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path k_golden_bundle = fs::path(KWB_SOURCE_DIR) / "tests" / "golden" / "bundle_decode";

// A compare --output-dir folder whose arm B runs `ns_b` per call (times a small deterministic wobble) over `visits`
// visits of each workload, and arm A 1000 ns.
void write_compare_folder(const fs::path& dir, double ns_b, int visits, const std::vector<std::string>& workloads,
                          int warmups = 2) {
  fs::create_directories(dir);
  std::vector<Sample> samples;
  for (const std::string& w : workloads) {
    for (int block = 0; block < visits; ++block) {
      for (const auto& [arm, ns] : {std::pair<std::string, double>{"A", 1000.0}, {"B", ns_b}}) {
        for (int i = 0; i < 5; ++i) {
          Sample s;
          s.workload = w;
          s.block = block;
          s.arm = arm;
          s.sample_index = i;
          s.warmup = i == 0;
          s.ns = static_cast<int64_t>(ns * (1.0 + 0.01 * ((block * 7 + i * 3) % 5 - 2)));
          s.window_ns = s.ns;
          s.output_valid = true;
          s.tensor_offsets = {0, 0};
          samples.push_back(s);
        }
      }
    }
  }
  write_file_atomic(dir / "samples.csv", samples_csv(samples));
  const json arms =
      json::array({{{"label", "A"}, {"path", "/src/baseline.cpp"}, {"identity", {{"artifact_sha256", "aa"}}}},
                   {{"label", "B"}, {"path", "/src/cand.cpp"}, {"identity", {{"artifact_sha256", "bb"}}}}});
  const json j = {{"schema", k_compare_schema},
                  {"schema_version", k_compare_schema_version},
                  {"backend", "cpu"},
                  {"cold", false},
                  {"budgets", {{"warmups", warmups}, {"samples", 5}}},
                  {"arms", arms}};
  write_file_atomic(dir / "compare.json", j.dump());
}

TEST(saved_comparison_test, finds_a_known_ratio_with_an_interval_that_holds_it) {
  const TempDir dir("kwb-saved");
  write_compare_folder(dir / "old", 1000.0, 12, {"decode", "prefill"});
  write_compare_folder(dir / "new", 800.0, 12, {"decode", "prefill"});
  const SavedComparison c = compare_saved(read_saved_result(dir / "old", ""), read_saved_result(dir / "new", ""), 1);
  ASSERT_EQ(c.workloads.size(), 2u);
  for (const SavedWorkload& w : c.workloads) {
    ASSERT_TRUE(w.improvement_pct.has_value()) << w.name;
    EXPECT_NEAR(*w.improvement_pct, 20.0, 0.5) << w.name;  // new takes 0.8 of old's time
    EXPECT_LE(*w.ci_low_pct, 20.0);
    EXPECT_GE(*w.ci_high_pct, 20.0);
    EXPECT_LT(*w.ci_high_pct - *w.ci_low_pct, 5.0);
    EXPECT_EQ(w.old_visits, 12u);
  }
  EXPECT_EQ(c.old_result.arm, "B");
  EXPECT_EQ(c.new_result.arm_path, "/src/cand.cpp");
  const json j = to_json(c);
  EXPECT_EQ(j["schema"], k_compare_saved_schema);
  EXPECT_EQ(j["indicative"], true);
  // A compare folder names no machine, and that is said.
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("records no machine"), std::string::npos);
}

TEST(saved_comparison_test, an_arm_can_be_chosen_and_a_result_against_itself_is_zero) {
  const TempDir dir("kwb-saved");
  write_compare_folder(dir / "r", 500.0, 6, {"decode"});
  const SavedComparison same = compare_saved(read_saved_result(dir / "r", "A"), read_saved_result(dir / "r", "A"), 1);
  EXPECT_DOUBLE_EQ(*same.workloads[0].improvement_pct, 0.0);
  // A (1000 ns) against B (500 ns) of the same run: B halves the time.
  const SavedComparison ab = compare_saved(read_saved_result(dir / "r", "A"), read_saved_result(dir / "r", "B"), 1);
  EXPECT_NEAR(*ab.workloads[0].improvement_pct, 50.0, 0.5);
  try {
    (void)read_saved_result(dir / "r", "C");
    FAIL() << "an arm the result does not have was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("has no arm 'C'; its arms are A, B"), std::string::npos) << e.what();
  }
}

TEST(saved_comparison_test, says_what_makes_two_results_less_comparable) {
  const TempDir dir("kwb-saved");
  write_compare_folder(dir / "old", 1000.0, 2, {"decode", "only_old"});
  write_compare_folder(dir / "new", 1000.0, 8, {"decode", "only_new"}, 0);
  const SavedComparison c = compare_saved(read_saved_result(dir / "old", ""), read_saved_result(dir / "new", ""), 1);
  ASSERT_EQ(c.workloads.size(), 1u);
  EXPECT_FALSE(c.workloads[0].improvement_pct.has_value());  // 2 visits: no interval
  EXPECT_EQ(c.only_in_old, std::vector<std::string>{"only_old"});
  EXPECT_EQ(c.only_in_new, std::vector<std::string>{"only_new"});
  std::string all;
  for (const std::string& w : c.warnings) all += w + "\n";
  EXPECT_NE(all.find("timing settings differ"), std::string::npos) << all;
  EXPECT_NE(all.find("fewer than 3 visits"), std::string::npos) << all;
}

TEST(saved_comparison_test, reads_a_validate_bundle_and_its_machine) {
  const SavedResult r = read_saved_result(k_golden_bundle, "");
  EXPECT_EQ(r.kind, "bundle");
  EXPECT_EQ(r.arm, "B");
  EXPECT_FALSE(r.rows.empty());
  EXPECT_FALSE(r.machine.empty());
  for (const SampleRow& row : r.rows) EXPECT_EQ(row.comparison, "ab");
  const SavedComparison c = compare_saved(read_saved_result(k_golden_bundle, "A"), r, 1);
  ASSERT_EQ(c.workloads.size(), 1u);
  EXPECT_EQ(c.workloads[0].name, "decode");
  EXPECT_TRUE(c.warnings.empty());  // one run: same machine, same settings
}

TEST(saved_comparison_test, a_folder_that_is_no_saved_result_is_refused_with_the_fix) {
  const TempDir dir("kwb-saved");
  auto message = [](const fs::path& d) {
    try {
      (void)read_saved_result(d, "");
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(dir / "missing").find("no such folder"), std::string::npos);
  fs::create_directories(dir / "empty");
  EXPECT_NE(message(dir / "empty").find("holds neither compare.json nor comparisons/ab.json"), std::string::npos);
  write_compare_folder(dir / "v", 1000.0, 4, {"decode"});
  write_file_atomic(dir / "v" / "compare.json", R"({"schema": "kwb.compare", "schema_version": 99})");
  EXPECT_NE(message(dir / "v").find("not a kwb.compare result of version 1 to"), std::string::npos);
  write_compare_folder(dir / "h", 1000.0, 4, {"decode"});
  write_file_atomic(dir / "h" / "samples.csv", "workload,ns\ndecode,5\n");
  EXPECT_NE(message(dir / "h").find("the header is not this kwb's"), std::string::npos);
}

}  // namespace
}  // namespace kwb::test
