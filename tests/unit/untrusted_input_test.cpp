// Issue 15: strings a candidate controls, and bundles someone else wrote, are untrusted input. These tests hold the
// escaping (Markdown, terminal, JSON), the bundle reader's refusals and the no-follow writes to what they promise.
#include "record/bundle_fs.h"
#include "record/bundle_reader.h"
#include "record/bundle_snapshot.h"
#include "report/report.h"
#include "support/temp_dir.h"
#include "util/fs.h"
#include "util/json_text.h"
#include "util/text.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

namespace fs = std::filesystem;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(escape_markdown, newlines_and_markup_cannot_become_structure) {
  const std::string evil = "x.cpp\n# kwb validate: KEEP_CANDIDATE\n| a | b |\n<img src=x>[link](http://e) *em* `c`";
  const std::string md = kwb::escape_markdown(evil);
  EXPECT_EQ(md.find('\n'), std::string::npos);
  EXPECT_NE(md.find("\\<img"), std::string::npos) << md;
  EXPECT_NE(md.find("\\x0a# kwb validate: KEEP_CANDIDATE"), std::string::npos) << md;
  EXPECT_NE(md.find("\\|"), std::string::npos);
  EXPECT_NE(md.find("\\[link\\](http://e)"), std::string::npos) << md;
  // Words stay readable: an underscore inside a word cannot open emphasis.
  EXPECT_EQ(kwb::escape_markdown("KEEP_CANDIDATE"), "KEEP_CANDIDATE");
  EXPECT_EQ(kwb::escape_markdown("_x_"), "\\_x\\_");
}

TEST(escape_markdown, line_start_markers_are_escaped_after_a_bullet) {
  EXPECT_EQ(kwb::escape_markdown("- nested", true), "\\- nested");
  EXPECT_EQ(kwb::escape_markdown("1. ordered", true), "1\\. ordered");
  EXPECT_EQ(kwb::escape_markdown("# heading", true), "\\# heading");
  EXPECT_EQ(kwb::escape_markdown("    code", true).find("    "), std::string::npos);
  EXPECT_EQ(kwb::escape_markdown("+1.5% over 10 blocks", false), "+1.5% over 10 blocks");
}

// The one HTML escaper (util/text.h) every report uses: markup, quotes and control characters never reach the page
// as themselves, and plain text and UTF-8 pass unchanged.
TEST(escape_html, markup_quotes_and_control_characters_are_shown_not_obeyed) {
  EXPECT_EQ(kwb::escape_html("<script>alert('x')</script>"), "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;");
  EXPECT_EQ(kwb::escape_html("a=\"b\" & c"), "a=&quot;b&quot; &amp; c");
  EXPECT_EQ(kwb::escape_html(std::string("bell\x07 esc\x1b[31m del\x7f")), "bell&#92;x07 esc&#92;x1b[31m del&#92;x7f");
  EXPECT_EQ(kwb::escape_html("line\ttab\nnext \xc3\xa9"), "line\ttab\nnext \xc3\xa9");
}

TEST(escape_terminal, control_bytes_and_broken_utf8_are_shown_not_obeyed) {
  EXPECT_EQ(kwb::escape_terminal("a\x1b[2Jb\rc\n\td"), "a\\x1b[2Jb\\x0dc\n\td");
  EXPECT_EQ(kwb::escape_terminal("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(kwb::escape_terminal("\xc3\x28"), "\\xc3(");  // a sequence cut short
  EXPECT_EQ(kwb::escape_terminal("\xc2\x9b"
                                 "2J"),
            "\\xc2\\x9b2J");  // C1 CSI spelled in UTF-8
  EXPECT_EQ(kwb::escape_terminal("caf\xc3\xa9 \xe2\x80\x94 ok"), "caf\xc3\xa9 \xe2\x80\x94 ok");
  // Fed byte by byte, as a stream does, the result is the same.
  kwb::TerminalEscaper e;
  std::string out;
  for (char c : std::string("\xe2\x80\x94\x1b")) e.put(c, out);
  e.finish(out);
  EXPECT_EQ(out, "\xe2\x80\x94\\x1b");
}

TEST(json_text, invalid_utf8_is_replaced_not_thrown) {
  nlohmann::json j = {{"detail", std::string("ok \xff\xfe end")}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
  std::string text;
  ASSERT_NO_THROW(text = kwb::json_text(j));
  EXPECT_EQ(nlohmann::json::parse(text)["detail"], "ok \xef\xbf\xbd\xef\xbf\xbd end");
}

// Class 5: a planted name is never written through.
TEST(write_file_atomic, never_writes_through_a_planted_symlink) {
  const kwb::test::TempDir d("kwb-untrusted-plant");
  const fs::path outside = d / "outside.txt";
  std::ofstream(outside) << "precious";
  fs::create_directories(d / "bundle");
  // The old temporary names (pid-based) and the target itself, all pointing outside.
  fs::create_symlink(outside, d / "bundle" / ("report.md.tmp." + std::to_string(::getpid())));
  fs::create_symlink(outside, d / "bundle" / "report.md");
  kwb::write_file_atomic(d / "bundle" / "report.md", "new report");
  EXPECT_EQ(kwb::read_file(outside), "precious");
  EXPECT_FALSE(fs::is_symlink(d / "bundle" / "report.md"));
  EXPECT_EQ(kwb::read_file(d / "bundle" / "report.md"), "new report");
}

// Class 4: a bundle's paths are confined, its files are regular, and nothing blocks.
TEST(bundle_fs, refuses_paths_that_leave_the_bundle) {
  for (const char* bad : {"/dev/zero", "../../../etc/shadow", "a/../../b", "./plan.json", "a//b", "", "a\nb"}) {
    EXPECT_TRUE(kwb::BundleFs::bad_path(bad).has_value()) << bad;
  }
  EXPECT_FALSE(kwb::BundleFs::bad_path("checks/baseline.json").has_value());
}

TEST(bundle_fs, fifo_symlink_and_oversized_files_are_refused_without_blocking) {
  const kwb::test::TempDir d("kwb-untrusted-fs");
  ASSERT_EQ(::mkfifo((d / "plan.json").c_str(), 0600), 0);
  fs::create_symlink("/etc/hostname", d / "link.json");
  fs::create_directories(d / "sub");
  fs::create_symlink("/etc", d / "checks");
  std::ofstream(d / "big.csv") << std::string(2000, 'x');
  kwb::BundleFs bfs(d);
  ASSERT_TRUE(bfs.ok());
  std::string why;
  auto fut = std::async(std::launch::async, [&] { return bfs.read("plan.json", why); });
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "reading a FIFO blocked";
  EXPECT_FALSE(fut.get().has_value());
  EXPECT_NE(why.find("not a regular file"), std::string::npos) << why;
  EXPECT_FALSE(bfs.read("link.json", why).has_value());
  EXPECT_NE(why.find("symlink"), std::string::npos) << why;
  EXPECT_FALSE(bfs.read("checks/hostname", why).has_value());  // a symlinked folder on the way
  EXPECT_FALSE(bfs.read("big.csv", why, 1000).has_value());
  EXPECT_NE(why.find("limit"), std::string::npos) << why;
  EXPECT_TRUE(bfs.read("big.csv", why, 4000).has_value());
  bool truncated = false;
  size_t symlinks = 0, others = 0;
  for (const auto& e : bfs.walk(truncated)) {
    symlinks += e.kind == kwb::BundleFs::Kind::symlink;
    others += e.kind == kwb::BundleFs::Kind::other;
  }
  EXPECT_EQ(symlinks, 2u);
  EXPECT_EQ(others, 1u);
  // The reader lists what it refused and never throws.
  kwb::BundleData b;
  ASSERT_NO_THROW(b = kwb::read_bundle(d));
  bool named = false;
  for (const std::string& p : b.problems) named = named || p.find("plan.json: refused") != std::string::npos;
  EXPECT_TRUE(named);
}

// Issue 40: keep read a bundle by path twice (verify, then promote), and a swap of the folder in between promoted a
// forged one. A snapshot is read once, through one descriptor of the folder: what happens to the folder afterwards
// (its files rewritten, the folder swapped for another) changes nothing in the copy, which is private (0700) and
// removed with the snapshot.
TEST(bundle_snapshot, the_copy_is_what_was_read_and_nothing_done_to_the_folder_later_reaches_it) {
  const kwb::test::TempDir d("kwb-snapshot");
  const fs::path b = d / "bundle";
  fs::create_directories(b / "checks");
  std::ofstream(b / "decision.json") << "{\"decision\": \"KEEP_BASELINE\"}";
  std::ofstream(b / "checks" / "candidate.json") << "genuine";
  std::string why;
  fs::path copy;
  {
    std::optional<kwb::BundleSnapshot> snap = kwb::BundleSnapshot::take(b, why);
    ASSERT_TRUE(snap.has_value()) << why;
    copy = snap->path();
    EXPECT_EQ(snap->origin(), fs::absolute(b).lexically_normal());
    EXPECT_EQ(fs::status(copy.parent_path()).permissions() & fs::perms::all, fs::perms::owner_all);
    // The folder is swapped for a forgery right after the read.
    fs::rename(b, d / "genuine");
    fs::create_directories(b / "checks");
    std::ofstream(b / "decision.json") << "{\"decision\": \"KEEP_CANDIDATE\"}";
    std::ofstream(b / "checks" / "candidate.json") << "forged";
    EXPECT_EQ(kwb::read_file(copy / "decision.json"), "{\"decision\": \"KEEP_BASELINE\"}");
    EXPECT_EQ(kwb::read_file(copy / "checks" / "candidate.json"), "genuine");
  }
  EXPECT_FALSE(fs::exists(copy.parent_path())) << "the copy outlived its snapshot";
}

TEST(bundle_snapshot, a_symlink_or_a_fifo_in_a_bundle_is_refused_by_name_without_blocking) {
  const kwb::test::TempDir d("kwb-snapshot-hostile");
  const fs::path b = d / "bundle";
  fs::create_directories(b);
  std::ofstream(b / "plan.json") << "{}";
  fs::create_symlink("/etc/hostname", b / "decision.json");
  std::string why;
  EXPECT_FALSE(kwb::BundleSnapshot::take(b, why).has_value());
  EXPECT_NE(why.find("decision.json: a symlink"), std::string::npos) << why;
  fs::remove(b / "decision.json");
  ASSERT_EQ(::mkfifo((b / "samples.csv").c_str(), 0600), 0);
  auto fut = std::async(std::launch::async, [&] { return kwb::BundleSnapshot::take(b, why).has_value(); });
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "a FIFO blocked the snapshot";
  EXPECT_FALSE(fut.get());
  EXPECT_NE(why.find("samples.csv"), std::string::npos) << why;
  EXPECT_FALSE(kwb::BundleSnapshot::take(d / "absent", why).has_value());
  EXPECT_FALSE(why.empty());
}

// Class 6: a candidate's file name cannot add a heading to report.md.
TEST(report_escaping, candidate_file_name_cannot_spoof_the_decision) {
  kwb::BundleData b;
  for (auto* j : {&b.environment, &b.controls, &b.final_}) *j = nlohmann::json::object();
  kwb::DecisionRecord decision;
  decision.decision = kwb::DecisionKind::keep_baseline;
  decision.reasons = {"'decode': the candidate does not clear the bar"};
  b.decision = decision;
  const std::string evil = "cand.cpp\n\n# kwb validate: KEEP_CANDIDATE\n\n**Decision: KEEP_CANDIDATE**";
  kwb::Plan plan;
  plan.task.name = "t\n# x";
  plan.implementations.resize(2);
  plan.implementations[0].role = kwb::ImplRole::candidate;
  plan.implementations[0].source = evil;
  plan.implementations[1].role = kwb::ImplRole::baseline;
  plan.implementations[1].source = "b.cpp";
  b.plan = plan;
  b.stages = {{"stages", {{{"name", "check_candidate"}, {"status", "ok"}, {"summary", "PASS\n# kwb validate: X"}}}}};
  const std::string md = kwb::render_markdown(b);
  size_t headings = 0, decisions = 0;
  for (const std::string& l : lines_of(md)) {
    headings += l.rfind("# ", 0) == 0;
    decisions += l.find("**Decision:") != std::string::npos;
  }
  EXPECT_EQ(headings, 1u) << md;
  EXPECT_EQ(decisions, 1u) << md;
  EXPECT_EQ(md.rfind("# kwb validate: KEEP_BASELINE", 0), 0u) << md;
  const std::string html = kwb::render_html(b);
  EXPECT_EQ(html.find("<h1>", html.find("<h1>") + 1), std::string::npos);
}

// Found by bench/fuzz.sh (bundle_fuzz): an interval with a low end and no high end made report abort on an
// assertion inside nlohmann::json (a const operator[] on a missing key).
TEST(report_escaping, a_comparison_missing_half_an_interval_still_renders) {
  kwb::BundleData b;
  for (auto* j : {&b.environment, &b.stages, &b.controls, &b.final_}) *j = nlohmann::json::object();
  b.ab = nlohmann::json{{"workloads", {{{"name", "decode"}, {"ci_low_pct", 1.0}, {"log_ratios", {0.1, 0.2}}}}}};
  std::string html;
  ASSERT_NO_THROW(html = kwb::render_html(b));
  EXPECT_NE(html.find("decode"), std::string::npos);
}

}  // namespace
