// kwb experiment end to end with the local executor, nothing timed: an arm that reaches for the other arm's
// folder, the evidence and the network is stopped, every violation recorded and its candidate discarded unvalidated;
// an arm that proposes a wrong kernel has it rejected at its check; the analysis counts both; a resumed run re-runs
// nothing; a changed arm is refused with exit 65; an attempt takes only the bundle its own validate made (issue 40
// item 3: not one made under weaker rules, nor another run's under the same rules); an edited trajectory record is
// refused by report and status (item 5); a generator that leaves a hard link, a deep tree and bytes past its quota in
// its work folder has them recorded against its attempt, and the experiment goes on (item 6). (The fused-against-idle
// run that times, and its report in a browser, is tests/experiment/report_in_browser.py.)
#include "cli_helpers.h"
#include "experiment/trajectory.h"
#include "support/temp_dir.h"
#include "util/fs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <algorithm>

#include <stdlib.h>
#include <sys/stat.h>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

// The snooping generator: it lists and reads what it must not see, tries the network, then writes the baseline.
// It prints what it saw, so a failure shows whether the sandbox or only the record failed.
const char* k_snoop = R"(import os, socket, sys
work = os.environ["KWB_WORK"]
traj = os.path.dirname(work)
storage = os.path.dirname(os.path.dirname(traj))
seen = []
for path in [os.path.join(storage, "trajectories"), os.path.join(traj, "attempts"),
             os.path.join(storage, "trajectories", "wrong--rmsnorm--s1", "work"),
             os.path.join(storage, "experiment.json")]:
    try:
        seen.append((path, sorted(os.listdir(path)) if os.path.isdir(path) else open(path).read(100)))
    except OSError as e:
        seen.append((path, "refused: " + e.strerror))
try:
    socket.create_connection(("1.1.1.1", 443), timeout=2)
    seen.append(("network", "connected"))
except OSError as e:
    seen.append(("network", "refused: " + str(e)))
print(seen)
open(os.environ["KWB_OUTPUT"], "w").write(open(os.environ["KWB_BASELINE"]).read())
# Then it leaves its work folder past every bound (issue 40 item 6): a hard link, folders 40 deep, 2 MiB over its
# 1 MiB quota. That once made every resume exit 65 and the experiment INVALID.
os.link(os.environ["KWB_OUTPUT"], os.path.join(work, "hard_link"))
deep = work
for _ in range(40):
    deep = os.path.join(deep, "d")
    os.mkdir(deep)
open(os.path.join(work, "big"), "wb").write(bytes(2 << 20))
)";

class ExperimentDir {
public:
  ExperimentDir() {
    ::chmod(m_root.path().c_str(), 0755);  // kwb run as root runs its generators and workers as users of their own
    fs::create_directories(m_root / "arms");
    write_file_atomic(m_root / "arms" / "snoop.py", k_snoop);
    write_file_atomic(m_root / "arms" / "no_eps.cpp", read_file(k_rmsnorm_lite / "cpu" / "controls" / "no_eps.cpp"));
    ::setenv("KWB_KEY_DIR", (m_root / "keys").c_str(), 1);
  }
  ~ExperimentDir() { ::unsetenv("KWB_KEY_DIR"); }
  ExperimentDir(const ExperimentDir&) = delete;
  ExperimentDir& operator=(const ExperimentDir&) = delete;

  void write() const {
    write_file_atomic(
        file(),
        fmt::format("name = \"sandbox\"\nseeds = [1, 2]\nattempts = 1\n"
                    "[validate]\nworkloads = [\"decode\"]\nlayouts = 2\nno_profile = true\n"
                    "[[tasks]]\ndir = \"{}\"\n"
                    "[[arms]]\nname = \"wrong\"\ncommand = [\"sh\", \"-c\", \"cp no_eps.cpp \\\"$KWB_OUTPUT\\\"\"]\n"
                    "files = [\"arms/no_eps.cpp\"]\n"
                    "[[arms]]\nname = \"snoop\"\ncommand = [\"python3\", \"snoop.py\"]\nfiles = [\"arms/snoop.py\"]\n"
                    "work_quota_mib = 1\n",
                    k_rmsnorm_lite.string()));
  }
  fs::path file() const { return m_root / "experiment.toml"; }
  fs::path storage() const { return m_root / "experiment.experiment"; }
  nlohmann::json record(const std::string& id) const {
    return nlohmann::json::parse(read_file(storage() / "trajectories" / id / "trajectory.json"));
  }
  const fs::path& root() const { return m_root.path(); }

private:
  TempDir m_root{"kwb-experiment"};
};

TEST(experiment_test, generators_out_of_view_are_stopped_and_an_attempt_takes_only_its_own_validates_bundle) {
  ExperimentDir dir;
  dir.write();
  const KwbRun run = run_kwb({"experiment", "run", dir.file().string()}, std::chrono::seconds(600));
  // Neither arm keeps anything: both outcomes are the baseline, no difference can be shown.
  ASSERT_EQ(run.exit_code, 2) << run.output << run.errors;

  for (const char* seed : {"1", "2"}) {
    const nlohmann::json snoop = dir.record(std::string("snoop--rmsnorm--s") + seed);
    ASSERT_EQ(snoop["status"], "done") << snoop.dump(2);
    const nlohmann::json& a = snoop["attempts"][0];
    EXPECT_EQ(a["category"], "sandbox") << a.dump(2);
    EXPECT_EQ(a["decision"], nullptr) << "a sandbox violation's candidate must not be validated";
    EXPECT_FALSE(
        fs::exists(dir.storage() / "trajectories" / snoop["id"].get<std::string>() / "attempts" / "1" / "bundle"));
    std::set<std::string> kinds, targets;
    for (const nlohmann::json& v : a["generator"]["violations"]) {
      kinds.insert(v["kind"].get<std::string>());
      targets.insert(v["target"].get<std::string>());
    }
    EXPECT_TRUE(kinds.contains("network")) << a.dump(2);
    EXPECT_TRUE(kinds.contains("path")) << a.dump(2);
    const fs::path other = dir.storage() / "trajectories" / "wrong--rmsnorm--s1" / "work";
    EXPECT_TRUE(targets.contains(other.string())) << a.dump(2);
    EXPECT_TRUE(targets.contains((dir.storage() / "experiment.json").string())) << a.dump(2);
    // Its folder past its bounds is its own attempt's problem, all three named; the folder was reset.
    const std::string problems = a["generator"]["folder_problems"].dump();
    EXPECT_NE(problems.find("(a hard link)"), std::string::npos) << problems;
    EXPECT_NE(problems.find("folders nested deeper than"), std::string::npos) << problems;
    EXPECT_NE(problems.find("over the folder's quota of 1048576 bytes"), std::string::npos) << problems;
    EXPECT_FALSE(fs::exists(dir.storage() / "trajectories" / snoop["id"].get<std::string>() / "work" / "big"));
    // What the generator saw: nothing of the other arm, the evidence or the network.
    const std::string log =
        read_file(dir.storage() / "trajectories" / snoop["id"].get<std::string>() / "attempts" / "1" / "generator.log");
    EXPECT_EQ(log.find("connected"), std::string::npos) << log;
    EXPECT_EQ(log.find("\"schema\""), std::string::npos) << log;  // experiment.json's text
    EXPECT_EQ(log.find("candidate.cpp"), std::string::npos) << log;

    const nlohmann::json wrong = dir.record(std::string("wrong--rmsnorm--s") + seed);
    EXPECT_EQ(wrong["attempts"][0]["category"], "incorrect") << wrong.dump(2);
    EXPECT_EQ(wrong["attempts"][0]["decision"], "KEEP_BASELINE");
    EXPECT_TRUE(wrong["attempts"][0]["generator"]["violations"].empty());
    EXPECT_EQ(wrong["final"]["status"], "baseline");
    // The public result the arm's later attempts read: the decision, no evidence.
    const nlohmann::json pub = nlohmann::json::parse(
        read_file(dir.storage() / "trajectories" / wrong["id"].get<std::string>() / "history" / "1" / "result.json"));
    EXPECT_EQ(pub["category"], "incorrect");
    EXPECT_FALSE(pub.contains("check_reasons"));
    // The kind of failure, without its detail: what a harness's failed test tells an agent.
    // no_eps: wrong values, and NaN where a row is all zeros.
    EXPECT_EQ(pub["failure_kinds"], nlohmann::json({"nan_mismatch", "numeric_mismatch"})) << pub.dump(2);
  }
  // The reader an attempt and a final judge their bundle with (experiment/trajectory.h), given wrong's genuine,
  // verifying bundle of attempt 1 and a command line: its own is taken; the same with another run's nonce (a lucky
  // run made by hand under exactly the attempt's rules) or with a weaker rule (one layout) is not, naming why.
  const fs::path bundle = dir.storage() / "trajectories" / "wrong--rmsnorm--s1" / "attempts" / "1" / "bundle";
  const std::vector<std::string> own =
      nlohmann::json::parse(read_file(bundle / "plan.json"))["argv"].get<std::vector<std::string>>();
  const AttemptBundle taken = read_attempt_bundle(bundle, own);
  ASSERT_TRUE(taken.decision) << taken.error;
  EXPECT_EQ((*taken.decision)["decision"], "KEEP_BASELINE");
  std::vector<std::string> other_run = own, weaker = own;
  const auto at = [](std::vector<std::string>& a, const std::string& flag) {
    auto it = std::find(a.begin(), a.end(), flag);
    EXPECT_NE(it, a.end()) << flag << " is not in " << nlohmann::json(a).dump();
    return it == a.end() ? it : it + 1;
  };
  *at(other_run, "--job-nonce") = std::string(64, 'a');
  *at(weaker, "--layouts") = "1";
  for (const auto& [what, argv] : {std::pair{"another run's nonce", other_run}, std::pair{"a weaker rule", weaker}}) {
    const AttemptBundle refused = read_attempt_bundle(bundle, argv);
    EXPECT_FALSE(refused.decision) << what;
    EXPECT_NE(refused.error.find("not made by its own validate"), std::string::npos) << what << ": " << refused.error;
  }

  const nlohmann::json an = nlohmann::json::parse(read_file(dir.storage() / "analysis.json"));
  EXPECT_EQ(an["verdict"], "INCONCLUSIVE");
  EXPECT_EQ(an["arms"][1]["sandbox"], 2);
  EXPECT_GE(an["arms"][1]["sandbox_violations"].get<int>(), 2 * 3);
  EXPECT_EQ(an["arms"][0]["categories"]["incorrect"], 2);
  EXPECT_TRUE(fs::is_regular_file(dir.storage() / "report.html"));

  // A second run re-runs nothing: every trajectory is done under the same plan.
  const KwbRun again = run_kwb({"experiment", "run", dir.file().string()}, std::chrono::seconds(300));
  EXPECT_EQ(again.exit_code, 2) << again.errors;
  EXPECT_NE(again.output.find("4 done earlier, 0 run now"), std::string::npos) << again.output;

  // A changed arm is another experiment: refused, naming what changed.
  write_file_atomic(dir.root() / "arms" / "snoop.py", std::string(k_snoop) + "# changed\n");
  const KwbRun changed = run_kwb({"experiment", "run", dir.file().string()});
  EXPECT_EQ(changed.exit_code, 65) << changed.errors;
  EXPECT_NE(changed.errors.find("arms[1].files"), std::string::npos) << changed.errors;

  const KwbRun status = run_kwb({"experiment", "status", dir.storage().string(), "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.errors;
  EXPECT_EQ(nlohmann::json::parse(status.output)["counts"]["done"], 4);

  // An edited record (issue 40 item 5: an arm shown at 4.48x with no final bundle) is named, never rendered: report
  // and status refuse it with exit 65 naming the file, and a resumed run does not pick it up.
  const fs::path record = dir.storage() / "trajectories" / "wrong--rmsnorm--s1" / "trajectory.json";
  nlohmann::json edited = dir.record("wrong--rmsnorm--s1");
  edited["final"] = {{"status", "done"}, {"log_speedup", 1.5}, {"log_low", 1.4}, {"log_high", 1.6}};
  edited["attempts"][0]["kept"] = true;
  write_file_atomic(record, edited.dump(2));
  for (const std::vector<std::string>& verb :
       {std::vector<std::string>{"experiment", "report", dir.storage().string()},
        std::vector<std::string>{"experiment", "status", dir.storage().string()}}) {
    const KwbRun r = run_kwb(verb);
    EXPECT_EQ(r.exit_code, 65) << verb[1] << ": " << r.output << r.errors;
    EXPECT_NE(r.errors.find(record.string() + ": not believed"), std::string::npos) << verb[1] << ": " << r.errors;
  }
}

TEST(experiment_test, a_bad_experiment_file_is_exit_65_naming_the_file_and_field) {
  ExperimentDir dir;
  write_file_atomic(dir.file(),
                    "seeds = [1]\n[[arms]]\nname = \"a\"\ncommand = [\"x\"]\n[[arms]]\nname = \"b\"\n"
                    "command = [\"x\"]\n[[tasks]]\ndir = \"nowhere\"\n");
  const KwbRun r = run_kwb({"experiment", "run", dir.file().string()});
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_NE(r.errors.find("experiment.toml:9: tasks[0].dir"), std::string::npos) << r.errors;
  const KwbRun s = run_kwb({"experiment", "status", (dir.root() / "nothing").string()});
  EXPECT_EQ(s.exit_code, 64) << s.errors;
}

}  // namespace
}  // namespace kwb::test
