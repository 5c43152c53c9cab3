// Golden tests of the reports: a fixed bundle (tests/golden/bundle_decode, from a real decode-only run) renders to
// exactly tests/golden/report_decode.md. Set KWB_UPDATE_GOLDEN=1 to rewrite the golden file after an intended
// change, and review the diff. The bundle's JSON files, samples.csv and checks/ come from a committed (clean) build:
//   kwb validate tasks/rmsnorm --candidate tasks/rmsnorm/cpu/fused.cpp --workload decode --max-minutes 0.2
//       --max-aa-difference-pct 10 --seed 7 --no-profile --output-dir D
#include "report/report.h"
#include "record/bundle_reader.h"
#include "record/verify.h"
#include "report/svg.h"
#include "support/build_paths.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>

namespace {

const std::filesystem::path k_golden = std::filesystem::path(KWB_SOURCE_DIR) / "tests" / "golden";

TEST(report_test, markdown_matches_golden) {
  kwb::BundleData b = kwb::read_bundle(k_golden / "bundle_decode");
  ASSERT_TRUE(b.problems.empty()) << b.problems.front();
  const std::string md = kwb::render_markdown(b);
  if (std::getenv("KWB_UPDATE_GOLDEN") != nullptr) kwb::write_file_atomic(k_golden / "report_decode.md", md);
  EXPECT_EQ(md, kwb::read_file(k_golden / "report_decode.md"));
}

TEST(report_test, markdown_puts_the_decision_first) {
  const std::string md = kwb::render_markdown(kwb::read_bundle(k_golden / "bundle_decode"));
  EXPECT_EQ(md.rfind("# kwb validate: KEEP_CANDIDATE", 0), 0u);
  EXPECT_LT(md.find("**Decision: KEEP_CANDIDATE**"), md.find("## Workloads"));
  EXPECT_LT(md.find("## Workloads"), md.find("## Limits of this claim"));
}

TEST(report_test, html_is_self_contained_with_three_plots_per_workload) {
  const std::string html = kwb::render_html(kwb::read_bundle(k_golden / "bundle_decode"));
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  EXPECT_EQ(svgs, 3u);  // distributions, A/B per block, A/A panel (one workload)
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_NE(html.find("gate +0%"), std::string::npos);
}

TEST(report_test, rendering_is_deterministic) {
  kwb::BundleData b = kwb::read_bundle(k_golden / "bundle_decode");
  EXPECT_EQ(kwb::render_html(b), kwb::render_html(b));
  EXPECT_EQ(kwb::render_markdown(b), kwb::render_markdown(kwb::read_bundle(k_golden / "bundle_decode")));
}

TEST(report_test, incomplete_bundle_still_renders_and_says_so) {
  auto dir = std::filesystem::temp_directory_path() / ("kwb-report-empty-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  kwb::BundleData b = kwb::read_bundle(dir);
  EXPECT_FALSE(b.problems.empty());
  EXPECT_NE(kwb::render_markdown(b).find("NO DECISION (incomplete bundle)"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Provenance: a plan written by a kwb built from a modified tree is a warning in both reports, never silently absent.
TEST(report_test, a_plan_from_a_modified_tree_is_a_warning) {
  kwb::BundleData b = kwb::read_bundle(k_golden / "bundle_decode");
  EXPECT_EQ(kwb::render_markdown(b).find("modified git tree"), std::string::npos);  // the golden plan does not say
  ASSERT_TRUE(b.plan) << b.plan_problem;
  b.plan->kwb.git_dirty = true;
  const std::string warning = "kwb was built from a modified git tree (commit " + b.plan->kwb.git_sha;
  EXPECT_NE(kwb::render_markdown(b).find(warning), std::string::npos) << kwb::render_markdown(b);
  EXPECT_NE(kwb::render_html(b).find(warning), std::string::npos);
  for (const std::optional<bool> clean : {std::optional<bool>(false), std::optional<bool>()}) {
    b.plan->kwb.git_dirty = clean;
    EXPECT_EQ(kwb::render_markdown(b).find("modified git tree"), std::string::npos) << clean.has_value();
  }
}

// verify says so too, as a warning: the same bundle's problems do not change with the flag.
TEST(report_test, verify_warns_about_a_modified_tree_without_failing_for_it) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("kwb-provenance-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::copy(k_golden / "bundle_decode", d, std::filesystem::copy_options::recursive);
  const kwb::VerifyReport intact = kwb::verify_bundle(d);
  EXPECT_TRUE(intact.warnings.empty());
  nlohmann::json plan = nlohmann::json::parse(kwb::read_file(d / "plan.json"));
  plan["kwb"]["git_dirty"] = true;
  kwb::write_file_atomic(d / "plan.json", plan.dump(2) + "\n");
  const kwb::VerifyReport dirty = kwb::verify_bundle(d);
  ASSERT_EQ(dirty.warnings.size(), 1u);
  EXPECT_EQ(dirty.warnings[0].rfind("plan.json: kwb was built from a modified git tree", 0), 0u) << dirty.warnings[0];
  for (const std::string& p : dirty.problems) {
    EXPECT_EQ(p.find("modified"), std::string::npos) << p;  // the edit breaks the plan's digest, nothing more
  }
  std::filesystem::remove_all(d);
}

// The A/B panel draws the gate (+0% by default) and "no change" on one row: one label, not two on top of each other.
// Lines a few pixels apart get labels at least a line height apart, top to bottom.
TEST(report_test, reference_line_labels_never_overlap) {
  auto py = [](double v) { return 100.0 - v; };  // one pixel per unit, up is larger
  const auto same = kwb::svg::place_line_labels({{0.0, "gate +0%", "#cf222e"}, {0.0, "no change", "#888"}}, py);
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].text, "gate +0% = no change");
  const auto close = kwb::svg::place_line_labels(
      {{-3.0, "-3%", "#9a6700"}, {0.0, "a", "#888"}, {3.0, "+3%", "#9a6700"}, {40.0, "far", "#888"}}, py);
  ASSERT_EQ(close.size(), 4u);
  EXPECT_EQ(close[0].text, "far");
  EXPECT_DOUBLE_EQ(close[0].baseline, 100.0 - 40.0 - 4.0);  // alone: 4 px above its line
  for (size_t i = 1; i < close.size(); ++i) {
    EXPECT_GE(close[i].baseline - close[i - 1].baseline, kwb::svg::k_label_line_height) << close[i].text;
  }
  // And in a rendered page: no two reference labels of one panel on the same baseline.
  const std::string svg = kwb::svg::index_plot("t", "y", {1.0, 2.0}, {-1.0, 1.0, "band"},
                                               {{0.0, "gate +0%", "#cf222e"}, {0.0, "no change", "#888"}});
  EXPECT_NE(svg.find(">gate +0% = no change</text>"), std::string::npos) << svg;
  EXPECT_EQ(svg.find(">no change</text>"), std::string::npos) << svg;
}

}  // namespace

// A bundle of another format version is refused as such: verify says which kwb to verify it with, rather than
// listing every field that moved. Inside this version, a field of the wrong shape (an oracle given by name, as kwb
// wrote before oracles were task code) names its path.
TEST(VerifyOldBundle, a_plan_of_another_schema_version_says_to_verify_it_with_the_kwb_that_wrote_it) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("kwb-old-plan-" + std::to_string(::getpid()));
  auto problems_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    std::filesystem::remove_all(d);
    std::filesystem::copy(k_golden / "bundle_decode", d, std::filesystem::copy_options::recursive);
    nlohmann::json plan = nlohmann::json::parse(kwb::read_file(d / "plan.json"));
    edit(plan);
    kwb::write_file_atomic(d / "plan.json", plan.dump(2) + "\n");
    const kwb::VerifyReport r = kwb::verify_bundle(d);
    EXPECT_FALSE(r.ok());
    return r.problems;
  };
  auto said = [](const std::vector<std::string>& problems, const std::string& start, const std::string& part) {
    for (const std::string& p : problems) {
      if (p.starts_with(start) && p.find(part) != std::string::npos) return true;
    }
    return false;
  };
  std::vector<std::string> p = problems_with([](nlohmann::json& plan) { plan["schema_version"] = 1; });
  EXPECT_TRUE(said(p, "plan.json: schema_version is 1, this kwb reads", "verify it with the kwb that wrote it"))
      << ::testing::PrintToString(p);
  p = problems_with([](nlohmann::json& plan) { plan["task"]["oracle"] = "rmsnorm"; });
  EXPECT_TRUE(said(p, "plan.json: field 'task.oracle' must be an object", "")) << ::testing::PrintToString(p);
  std::filesystem::remove_all(d);
}
