// kwb campaign end to end with the local executor, on the RMSNorm task without its DRAM case: decisions recorded in
// the ledger, a re-run that skips what was decided, forged bundles dropped into the campaign's storage refused and
// recorded as rejected evidence, and (timed, RUN_SERIAL) a campaign killed mid-run that resumes only what was not
// decided.
#include "background_kwb.h"
#include "cli_helpers.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <algorithm>
#include <stdexcept>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <iostream>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

// A campaign folder: cands/ with the given sources (and what the adversarial corpus's sources include), and
// campaign.toml timing only decode, with small budgets. Its own ledger and key folder, for the whole test.
class CampaignDir {
public:
  explicit CampaignDir(const std::string& stem) : m_root(stem) {
    fs::create_directories(m_root / "cands");
    for (const char* f : {"rmsnorm_common.h", "kwb.files"}) fs::copy(k_adversarial / f, m_root / "cands" / f);
    ::setenv("KWB_LEDGER", (m_root / "ledger.sqlite").c_str(), 1);
    ::setenv("KWB_KEY_DIR", (m_root / "keys").c_str(), 1);
  }
  ~CampaignDir() {
    ::unsetenv("KWB_KEY_DIR");
    ::setenv("KWB_LEDGER", KWB_TEST_LEDGER, 1);
  }
  CampaignDir(const CampaignDir&) = delete;
  CampaignDir& operator=(const CampaignDir&) = delete;

  // cands/<name> holding `from`'s bytes, plus `suffix` (a comment: a distinct source, the same code).
  void add(const std::string& name, const fs::path& from, const std::string& suffix = "") {
    write_file_atomic(m_root / "cands" / name, read_file(from) + suffix);
  }
  void write(const std::vector<std::string>& candidates) const {
    std::string list;
    for (const std::string& c : candidates) list += fmt::format("{}\"cands/{}\"", list.empty() ? "" : ", ", c);
    write_file_atomic(file(), fmt::format("name = \"test\"\nrun_limit_minutes = 10\nqueue_limit_minutes = 2\n"
                                          "[validate]\nworkloads = [\"decode\"]\nmax_minutes = 0.1\n"
                                          "max_aa_difference_pct = 5\nlayouts = 2\nno_profile = true\nseed = 11\n"
                                          "[[tasks]]\ndir = \"{}\"\ncandidates = [{}]\n",
                                          k_rmsnorm_lite.string(), list));
  }
  fs::path file() const { return m_root / "campaign.toml"; }
  fs::path storage() const { return m_root / "campaign.campaign"; }
  const fs::path& root() const { return m_root.path(); }

  nlohmann::json state() const { return nlohmann::json::parse(read_file(storage() / "campaign.json")); }
  // The current job of cands/<name>.
  nlohmann::json job(const std::string& name) const {
    const nlohmann::json s = state();  // not state()["jobs"] in the loop's head: that temporary dies before the loop
    for (const nlohmann::json& j : s["jobs"]) {
      if (j["current"] == true && fs::path(j["candidate"].get<std::string>()).filename() == name) return j;
    }
    return nullptr;
  }
  // The bundles of the validate rows in the ledger.
  std::vector<std::string> ledger_bundles() const {
    const KwbRun h = run_kwb({"history", k_rmsnorm_lite.string(), "--runs", "--kind", "validate", "--json"});
    std::vector<std::string> out;
    for (const nlohmann::json& r : h.json.value("runs", nlohmann::json::array())) out.push_back(r["bundle"]);
    return out;
  }

private:
  TempDir m_root;
};

const fs::path k_compile_error = k_source_dir / "tests" / "candidates" / "compile_error.cpp";
const fs::path k_invalid_utf8 = k_adversarial / "invalid_utf8.cpp";

TEST(campaign_test, local_campaign_records_decisions_resumes_and_refuses_forged_bundles) {
  CampaignDir dir("kwb-campaign");
  // Two candidates refused before any timing: one does not build, one fails its check. Both KEEP_BASELINE.
  dir.add("a.cpp", k_compile_error);
  dir.add("b.cpp", k_invalid_utf8);
  dir.write({"a.cpp", "b.cpp"});
  KwbRun first = run_kwb({"campaign", "run", dir.file().string()}, std::chrono::seconds(600));
  ASSERT_EQ(first.exit_code, 0) << first.output << first.errors;
  EXPECT_NE(first.output.find("0 queued, 0 running, 2 decided, 0 failed"), std::string::npos) << first.output;
  for (const char* c : {"a.cpp", "b.cpp"}) {
    const nlohmann::json j = dir.job(c);
    EXPECT_EQ(j["decision"], "KEEP_BASELINE") << j.dump(2);
    EXPECT_EQ(j["attempt"], 1);
    const KwbRun v = run_kwb({"verify", j["bundle"].get<std::string>(), "--json"});
    EXPECT_EQ(v.json["authenticity"]["established"], "authentic") << v.output;
  }
  EXPECT_EQ(dir.ledger_bundles().size(), 2u);

  // The same campaign again: both decided with the same identities, so nothing runs and nothing is recorded.
  KwbRun again = run_kwb({"campaign", "run", dir.file().string()}, std::chrono::seconds(600));
  ASSERT_EQ(again.exit_code, 0) << again.output << again.errors;
  EXPECT_NE(again.output.find("2 job(s), 2 skipped (decided earlier), 0 attempt(s) started"), std::string::npos)
      << again.output;
  EXPECT_EQ(dir.ledger_bundles().size(), 2u);

  // Two more candidates, planned but not run, and a bundle dropped into each one's first attempt: for c, b's genuine
  // bundle with its candidate swapped for c and every hash recomputed (no trusted signature); for d, a's genuine
  // bundle as it is (authentic, but another candidate's).
  dir.add("c.cpp", k_invalid_utf8, "\n// variant c\n");
  dir.add("d.cpp", k_compile_error, "\n// variant d\n");
  dir.add("e.cpp", k_compile_error, "\n// variant e\n");
  dir.add("f.cpp", k_compile_error, "\n// variant f\n");
  dir.write({"a.cpp", "b.cpp", "c.cpp", "d.cpp", "e.cpp", "f.cpp"});
  KwbRun plan = run_kwb({"campaign", "run", "--dry-run", dir.file().string()});
  ASSERT_EQ(plan.exit_code, 0) << plan.output << plan.errors;
  const fs::path forged = dir.storage() / "jobs" / dir.job("c.cpp")["id"].get<std::string>() / "attempt-1" / "bundle";
  const fs::path other = dir.storage() / "jobs" / dir.job("d.cpp")["id"].get<std::string>() / "attempt-1" / "bundle";
  fs::create_directories(forged.parent_path());
  fs::create_directories(other.parent_path());
  fs::copy(dir.job("b.cpp")["bundle"].get<std::string>(), forged, fs::copy_options::recursive);
  const CommandResult attack = run_command({"python3", (k_adversarial / "bundle_rehash.py").string(), forged.string(),
                                            (dir.root() / "cands" / "c.cpp").string()},
                                           std::chrono::seconds(60), StderrMode::separate);
  ASSERT_EQ(attack.exit_code, 0) << attack.output << attack.errors;
  fs::copy(dir.job("a.cpp")["bundle"].get<std::string>(), other, fs::copy_options::recursive);
  // For e, a genuine, machine-signed bundle of exactly e's pair, made at e's attempt folder under weaker rules than
  // the campaign's (no --max-aa-difference-pct 5, no --layouts 2, another seed): issue 40 item 3.
  const fs::path weaker = dir.storage() / "jobs" / dir.job("e.cpp")["id"].get<std::string>() / "attempt-1" / "bundle";
  fs::create_directories(weaker.parent_path());
  const KwbRun made =
      run_kwb({"validate", k_rmsnorm_lite.string(), "--candidate", (dir.root() / "cands" / "e.cpp").string(),
               "--output-dir", weaker.string(), "--workload", "decode", "--no-profile", "--json"});
  ASSERT_EQ(made.json.value("decision", ""), "KEEP_BASELINE") << made.output << made.errors;
  // For f, one made by hand under exactly the job's rules (a's command line, as its signed plan recorded it, with f's
  // candidate and attempt folder): a lucky run picked from many is not the job's either, for it cannot carry the
  // attempt's nonce (issue 40, "a per-job nonce").
  const fs::path lucky = dir.storage() / "jobs" / dir.job("f.cpp")["id"].get<std::string>() / "attempt-1" / "bundle";
  fs::create_directories(lucky.parent_path());
  std::vector<std::string> rules =
      nlohmann::json::parse(read_file(dir.job("a.cpp")["bundle"].get<std::string>() + "/plan.json"))["argv"];
  const auto value_of = [&rules](const std::string& flag) -> std::string& {
    auto it = std::find(rules.begin(), rules.end(), flag);
    if (it == rules.end() || it + 1 == rules.end()) throw std::runtime_error(flag + " is not in a's command line");
    return *(it + 1);
  };
  value_of("--candidate") = (dir.root() / "cands" / "f.cpp").string();
  value_of("--output-dir") = lucky.string();
  ASSERT_EQ(value_of("--job-nonce").size(), 64u);
  const KwbRun by_hand = run_kwb(std::vector<std::string>(rules.begin() + 1, rules.end()));
  ASSERT_EQ(by_hand.json.value("decision", ""), "KEEP_BASELINE") << by_hand.output << by_hand.errors;

  KwbRun third = run_kwb({"campaign", "run", dir.file().string()}, std::chrono::seconds(600));
  ASSERT_EQ(third.exit_code, 0) << third.output << third.errors;
  const nlohmann::json c = dir.job("c.cpp"), d = dir.job("d.cpp");
  // Each forged attempt is rejected evidence; the job then ran for real and decided.
  ASSERT_EQ(c["earlier"].size(), 1u) << c.dump(2);
  EXPECT_EQ(c["earlier"][0]["outcome"], "rejected");
  EXPECT_NE(c["earlier"][0]["detail"].get<std::string>().find("not authentic"), std::string::npos) << c.dump(2);
  EXPECT_EQ(c["attempt"], 2);
  EXPECT_EQ(c["decision"], "KEEP_BASELINE");
  ASSERT_EQ(d["earlier"].size(), 1u) << d.dump(2);
  EXPECT_EQ(d["earlier"][0]["outcome"], "rejected");
  EXPECT_NE(d["earlier"][0]["detail"].get<std::string>().find("not this job's bundle"), std::string::npos) << d.dump(2);
  const nlohmann::json e = dir.job("e.cpp");
  ASSERT_EQ(e["earlier"].size(), 1u) << e.dump(2);
  EXPECT_EQ(e["earlier"][0]["outcome"], "rejected");
  EXPECT_NE(e["earlier"][0]["detail"].get<std::string>().find("not made under this job's rules"), std::string::npos)
      << e.dump(2);
  EXPECT_EQ(e["attempt"], 2);
  const nlohmann::json f = dir.job("f.cpp");
  ASSERT_EQ(f["earlier"].size(), 1u) << f.dump(2);
  EXPECT_EQ(f["earlier"][0]["outcome"], "rejected");
  EXPECT_NE(f["earlier"][0]["detail"].get<std::string>().find("not made under this job's rules"), std::string::npos)
      << f.dump(2);
  EXPECT_NE(f["earlier"][0]["detail"].get<std::string>().find("--job-nonce"), std::string::npos) << f.dump(2);
  EXPECT_EQ(f["attempt"], 2);
  EXPECT_EQ(f["decision"], "KEEP_BASELINE");
  // The ledger has the six runs the campaign made, the two the test made for e and f by hand, and no dropped bundle.
  const std::vector<std::string> bundles = dir.ledger_bundles();
  EXPECT_EQ(bundles.size(), 8u);
  for (const std::string& b : bundles) {
    EXPECT_NE(b, forged.string());
    EXPECT_NE(b, other.string());
  }

  KwbRun report = run_kwb({"campaign", "report", dir.storage().string()});
  ASSERT_EQ(report.exit_code, 0) << report.output << report.errors;
  const std::string html = read_file(dir.storage() / "report.html");
  EXPECT_NE(html.find("Rejected evidence"), std::string::npos);
  EXPECT_NE(html.find("not authentic"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  KwbRun status = run_kwb({"campaign", "status", dir.file().string(), "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.output << status.errors;
  EXPECT_EQ(status.json["counts"]["decided"], 6) << status.output;
}

// Issue 40: an edited campaign.json made status and report rank a job KEEP_CANDIDATE, and a resumed run re-used that
// decision. The record is sealed by the machine key whenever kwb writes it: an edit is a data error naming the file,
// for status, report and run alike.
TEST(campaign_test, an_edited_campaign_record_is_named_and_never_rendered_or_resumed) {
  CampaignDir dir("kwb-campaign-edited");
  dir.add("a.cpp", k_compile_error);
  dir.write({"a.cpp"});
  KwbRun plan = run_kwb({"campaign", "run", "--dry-run", dir.file().string()});
  ASSERT_EQ(plan.exit_code, 0) << plan.output << plan.errors;
  KwbRun fine = run_kwb({"campaign", "status", dir.storage().string(), "--json"});
  ASSERT_EQ(fine.exit_code, 0) << fine.output << fine.errors;
  nlohmann::json state = dir.state();
  state["jobs"][0]["decision"] = "KEEP_CANDIDATE";
  state["jobs"][0]["outcome"] = "decided";
  write_file_atomic(dir.storage() / "campaign.json", state.dump(2));
  for (const std::vector<std::string>& verb : {std::vector<std::string>{"campaign", "status", dir.storage().string()},
                                               {"campaign", "report", dir.storage().string()},
                                               {"campaign", "run", dir.file().string()}}) {
    KwbRun r = run_kwb(verb);
    EXPECT_EQ(r.exit_code, 65) << verb[1] << ": " << r.output << r.errors;
    EXPECT_NE(r.errors.find("campaign.json: not believed: its seal does not match what it holds"), std::string::npos)
        << verb[1] << ": " << r.errors;
  }
}

TEST(campaign_test, a_bad_campaign_file_is_exit_65_naming_the_file_and_field) {
  CampaignDir dir("kwb-campaign-bad");
  write_file_atomic(dir.file(), "[[tasks]]\ndir = \"nowhere\"\ncandidates = [\"x.cpp\"]\n");
  KwbRun r = run_kwb({"campaign", "run", dir.file().string()});
  EXPECT_EQ(r.exit_code, 65) << r.errors;
  EXPECT_NE(r.errors.find("campaign.toml:2: tasks[0].dir: 'nowhere'"), std::string::npos) << r.errors;
  KwbRun s = run_kwb({"campaign", "status", (dir.root() / "nothing").string()});
  EXPECT_EQ(s.exit_code, 64) << s.errors;
}

// kwb campaign cancel while a local job runs (a candidate that hangs in its check: nothing is timed): the campaign
// process stops, its job is recorded as cancelled, and nothing of it is left running.
TEST(campaign_test, cancel_stops_the_campaign_and_records_its_running_job) {
  CampaignDir dir("kwb-campaign-cancel");
  dir.add("hang.cpp", k_source_dir / "tests" / "candidates" / "hang.cpp");
  dir.write({"hang.cpp"});
  BackgroundKwb campaign({"campaign", "run", dir.file().string()});
  ASSERT_GT(campaign.pid(), 0);
  ASSERT_TRUE(eventually(
      [&] {
        return fs::exists(dir.storage() / "campaign.json") && dir.job("hang.cpp").is_object() &&
               dir.job("hang.cpp")["phase"] == "running";
      },
      std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  KwbRun cancel = run_kwb({"campaign", "cancel", dir.file().string()});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.output << cancel.errors;
  EXPECT_NE(cancel.output.find("cancelled 1 job(s)"), std::string::npos) << cancel.output;
  const std::optional<int> status = campaign.wait(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 128 + SIGTERM) << *status;
  const nlohmann::json job = dir.job("hang.cpp");
  EXPECT_EQ(job["outcome"], "cancelled") << job.dump(2);
  EXPECT_EQ(job["phase"], "ended");
  KwbRun status_text = run_kwb({"campaign", "status", dir.storage().string()});
  EXPECT_NE(status_text.output.find("no campaign process running"), std::string::npos) << status_text.output;
  EXPECT_NE(status_text.output.find("0 queued, 0 running, 0 decided, 1 failed"), std::string::npos)
      << status_text.output;
}

// Timed (RUN_SERIAL): the second candidate, the fused kernel, reaches A/A and A/B (a copy of the baseline would be
// decided at once: identical_to_baseline). The test holds the timing lock (a lock file of its own) until the campaign
// is killed, so the kill always lands inside fused.cpp's validate, waiting at its A/A stage, however fast the machine.
TEST(campaign_test, timed_a_killed_campaign_resumes_only_what_was_not_decided) {
  CampaignDir dir("kwb-campaign-kill");
  dir.add("a.cpp", k_compile_error);
  dir.add("fused.cpp", k_rmsnorm_lite / "cpu" / "fused.cpp");
  dir.write({"a.cpp", "fused.cpp"});
  const fs::path lock_file = dir.root() / "timing.lock";
  ::setenv("KWB_TIMING_LOCK", lock_file.c_str(), 1);
  const int lock = ::open(lock_file.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);
  const auto started = std::chrono::steady_clock::now();
  {
    BackgroundKwb campaign({"campaign", "run", dir.file().string()});
    ASSERT_GT(campaign.pid(), 0);
    const bool mid_run = eventually(
        [&] {
          if (!fs::exists(dir.storage() / "campaign.json")) return false;
          const nlohmann::json a = dir.job("a.cpp"), base = dir.job("fused.cpp");
          return a.is_object() && a["outcome"] == "decided" && base.is_object() && base["phase"] == "running" &&
                 !base.value("waiting", std::string()).empty();
        },
        std::chrono::seconds(300));
    ASSERT_TRUE(mid_run) << dir.state().dump(2);
    ::kill(campaign.pid(), SIGKILL);
    ASSERT_TRUE(campaign.wait(std::chrono::seconds(30)).has_value());
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  EXPECT_EQ(dir.job("fused.cpp")["phase"], "running");  // as the killed process left it
  KwbRun resumed = run_kwb({"campaign", "run", dir.file().string()}, std::chrono::seconds(900));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output << resumed.errors;
  EXPECT_NE(resumed.output.find("2 job(s), 1 skipped (decided earlier), 1 attempt(s) started"), std::string::npos)
      << resumed.output;
  const nlohmann::json a = dir.job("a.cpp"), base = dir.job("fused.cpp");
  EXPECT_EQ(a["attempt"], 1);
  EXPECT_EQ(base["attempt"], 2);
  ASSERT_EQ(base["earlier"].size(), 1u) << base.dump(2);
  EXPECT_EQ(base["earlier"][0]["outcome"], "died") << base.dump(2);
  EXPECT_EQ(base["outcome"], "decided") << base.dump(2);
  EXPECT_EQ(dir.ledger_bundles().size(), 2u);
  std::cout << fmt::format("campaign of 2 with a kill and a resume: {:.1f} s\n",
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  ::unsetenv("KWB_TIMING_LOCK");
}

}  // namespace
}  // namespace kwb::test
