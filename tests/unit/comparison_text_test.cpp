// What compare and validate print of a comparison (cli/comparison_text.h): a golden text of the table and the
// warning block, from a fixed comparison JSON (set KWB_UPDATE_GOLDEN=1 to rewrite it after an intended change).
#include "cli/comparison_text.h"
#include "support/build_paths.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace {

using nlohmann::json;

const std::filesystem::path k_golden_text =
    std::filesystem::path(KWB_SOURCE_DIR) / "tests" / "golden" / "comparison_text.txt";

json workload(const std::string& name, double imp, double lo, double hi, double mde, const std::string& verdict,
              std::vector<double> a_ns, std::vector<double> b_ns) {
  return {{"name", name},
          {"verdict", verdict},
          {"blocks", a_ns.size()},
          {"improvement_pct", imp},
          {"ci_low_pct", lo},
          {"ci_high_pct", hi},
          {"mde_pct", mde},
          {"heavy_tailed", false},
          {"stopped_by_budget", false},
          {"block_median_ns", {{"reference", a_ns}, {"other", b_ns}}},
          {"layout_sensitivity", json::array()}};
}

json comparison() {
  json clear = workload("decode", 75.0, 71.0, 79.06, 3.2, "PASS", {9000, 9100, 8900}, {2250, 2300, 2200});
  json loss =
      workload("prefill", -406.0, -450.0, -380.0, 4.0, "FAIL", {100000, 101000, 99000}, {506000, 507000, 505000});
  json noisy = workload("dram", 1.5, -20.0, 19.0, 62.0, "INCONCLUSIVE", {3.1e6, 2.2e6, 4.0e6}, {3.0e6, 2.9e6, 3.6e6});
  noisy["heavy_tailed"] = true;
  noisy["stopped_by_budget"] = true;
  // Arm A: layout matters (permutation p < 0.01) and its interval clears 10%: warned. Arm B: an interval above 10%
  // that noise alone explains (p = 0.2): not warned.
  noisy["layout_sensitivity"] = {
      {{"available", true}, {"spread_pct", 14.25}, {"ci_low_pct", 11.0}, {"ci_high_pct", 30.5}, {"p_value", 0.0005}},
      {{"available", true}, {"spread_pct", 40.0}, {"ci_low_pct", 12.0}, {"ci_high_pct", 80.0}, {"p_value", 0.2}}};
  json invalid = {{"name", "zeros"},       {"verdict", "INVALID"},   {"blocks", 2},       {"improvement_pct", nullptr},
                  {"ci_low_pct", nullptr}, {"ci_high_pct", nullptr}, {"mde_pct", nullptr}};
  return {{"workloads", {clear, loss, noisy, invalid}}};
}

TEST(comparison_text_test, a_speedup_reads_as_a_factor_either_way) {
  EXPECT_EQ(kwb::cli::speedup_text(75.0), "4.00x faster");
  EXPECT_EQ(kwb::cli::speedup_text(-406.0), "5.06x slower");
  EXPECT_EQ(kwb::cli::speedup_text(0.1), "1.00x (same)");
  EXPECT_EQ(kwb::cli::speedup_text(50.0), "2.00x faster");
  EXPECT_EQ(kwb::cli::speedup_text(100.0), "-");  // B takes no time: no finite factor
}

TEST(comparison_text_test, per_call_medians_outside_the_paired_interval_are_warned_about) {
  // 1.89 ms and 1.50 ms (1.26x) printed beside 2.25x [2.00x, 2.50x]: the two estimators disagree, and the line says
  // which to read. Medians whose ratio lies inside the interval draw no such warning.
  const json drifted =
      workload("decode", 55.6, 50.0, 60.0, 2.0, "PASS", {1.89e6, 1.89e6, 1.89e6}, {1.5e6, 1.5e6, 1.5e6});
  const json agreeing = workload("prefill", 55.6, 50.0, 60.0, 2.0, "PASS", {2.25e6, 2.25e6, 2.25e6}, {1e6, 1e6, 1e6});
  const std::vector<std::string> w = kwb::cli::noise_warnings({{"workloads", {drifted, agreeing}}}, "B");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(
      w[0].rfind("decode: the per-call medians' ratio (1.26x) lies outside the paired interval [2.00x, 2.50x]", 0), 0u)
      << w[0];
  EXPECT_NE(kwb::cli::comparison_table({{"workloads", {agreeing}}}, "B").find("per call: each arm's median"),
            std::string::npos);
}

TEST(comparison_text_test, table_and_warnings_match_golden) {
  const json c = comparison();
  const std::string text =
      kwb::cli::comparison_table(c, "B") + kwb::cli::warning_block(kwb::cli::noise_warnings(c, "B"));
  if (std::getenv("KWB_UPDATE_GOLDEN") != nullptr) kwb::write_file_atomic(k_golden_text, text);
  EXPECT_EQ(text, kwb::read_file(k_golden_text));
}

// A clean, decided result has no warning block; each noisy trait alone raises its own line.
TEST(comparison_text_test, only_noisy_or_weak_results_warn) {
  json c = comparison();
  EXPECT_TRUE(kwb::cli::noise_warnings({{"workloads", {c["workloads"][0], c["workloads"][1], c["workloads"][3]}}}, "B")
                  .empty());
  EXPECT_EQ(kwb::cli::warning_block({}), "");
  json noisy = c["workloads"][2];
  EXPECT_EQ(kwb::cli::noise_warnings({{"workloads", {noisy}}}, "B").size(), 4u);
  noisy["heavy_tailed"] = false;
  noisy["stopped_by_budget"] = false;
  noisy["layout_sensitivity"] = json::array();
  const std::vector<std::string> mde = kwb::cli::noise_warnings({{"workloads", {noisy}}}, "B");
  ASSERT_EQ(mde.size(), 1u);
  EXPECT_NE(mde[0].find("smaller than 62.0% could go undetected"), std::string::npos) << mde[0];
}

}  // namespace
