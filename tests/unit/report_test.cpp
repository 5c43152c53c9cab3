// Golden tests of the reports: a fixed bundle (tests/golden/bundle_decode, from a real decode-only run) renders to
// exactly tests/golden/report_decode.md. Set KWB_UPDATE_GOLDEN=1 to rewrite the golden file after an intended
// change, and review the diff.
#include "record/bundle_reader.h"
#include "report/report.h"
#include "util/fs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

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

}  // namespace
