// No process kwb starts outlives it (issue 15; util/interrupt.h, docs/threat-model.md "Processes"). kwb runs in the
// background here while the test watches /proc: it is interrupted (SIGTERM: kwb ends every child and exits 128 + 15)
// or killed (SIGKILL: only the children's PR_SET_PDEATHSIG can end them) while a child of its runs, and every
// process that descended from it must be gone within a few seconds. The test process adopts orphans
// (PR_SET_CHILD_SUBREAPER), so a survivor is found, and ended, even after kwb is gone.
#include "background_kwb.h"
#include "builder/build_sandbox.h"
#include "cli_helpers.h"
#include "ledger/ledger.h"
#include "support/temp_dir.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One line of /proc/PID/stat.
struct Proc {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';
  std::string comm;
  unsigned long long cpu_ticks = 0;  // utime + stime
  unsigned long long start = 0;      // start time since boot: with the pid, the process's identity
};

std::optional<Proc> read_proc(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  Proc p;
  p.pid = pid;
  p.comm = line.substr(open + 1, close - open - 1);
  std::istringstream fields(line.substr(close + 2));
  std::vector<std::string> f;  // f[0] is field 3 (state)
  for (std::string x; fields >> x;) f.push_back(x);
  if (f.size() < 20) return std::nullopt;
  p.state = f[0].front();
  p.ppid = static_cast<pid_t>(std::stol(f[1]));
  p.cpu_ticks = std::stoull(f[11]) + std::stoull(f[12]);
  p.start = std::stoull(f[19]);
  return p;
}

std::vector<Proc> processes() {
  std::vector<Proc> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    if (std::optional<Proc> p = read_proc(static_cast<pid_t>(pid))) out.push_back(*p);
  }
  ::closedir(d);
  return out;
}

// Every process below `root` now, by parent links.
std::vector<Proc> descendants_of(pid_t root) {
  const std::vector<Proc> all = processes();
  std::vector<Proc> out;
  std::set<pid_t> parents = {root};
  for (bool grew = true; grew;) {
    grew = false;
    for (const Proc& p : all) {
      if (parents.contains(p.ppid) && !parents.contains(p.pid)) {
        parents.insert(p.pid);
        out.push_back(p);
        grew = true;
      }
    }
  }
  return out;
}

// Those of `procs` that still run (a zombie runs nothing; a new process that reused a pid is not the old one).
std::vector<Proc> running(const std::vector<Proc>& procs) {
  std::vector<Proc> out;
  for (const Proc& p : procs) {
    const std::optional<Proc> now = read_proc(p.pid);
    if (now && now->start == p.start && now->state != 'Z' && now->state != 'X') out.push_back(*now);
  }
  return out;
}

std::string describe(const std::vector<Proc>& procs) {
  std::string s;
  for (const Proc& p : procs) s += " " + std::to_string(p.pid) + " (" + p.comm + ", state " + p.state + ")";
  return s.empty() ? " none" : s;
}

// This process adopts whatever kwb's children become when kwb is gone, so the test sees survivors and ends them: a
// failing run leaves nothing spinning.
class AdoptOrphans {
public:
  AdoptOrphans() { ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }
  ~AdoptOrphans() {
    for (const Proc& p : descendants_of(::getpid())) ::kill(p.pid, SIGKILL);
    for (const Proc& p : descendants_of(::getpid())) {
      if (p.ppid == ::getpid()) (void)::waitpid(p.pid, nullptr, 0);
    }
    ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  }
  AdoptOrphans(const AdoptOrphans&) = delete;
  AdoptOrphans& operator=(const AdoptOrphans&) = delete;

  // Reaps the zombies that were adopted, so /proc shows only what still runs.
  static void reap_adopted() {
    for (const Proc& p : descendants_of(::getpid())) {
      if (p.ppid == ::getpid() && p.state == 'Z') (void)::waitpid(p.pid, nullptr, WNOHANG);
    }
  }
};

// A child of kwb's named `comm` (kwb-worker, sleep) that has used at least `cpu_ticks` of CPU: nullopt until then.
std::optional<Proc> busy_child(pid_t kwb, const std::string& comm, unsigned long long cpu_ticks = 0) {
  for (const Proc& p : descendants_of(kwb)) {
    if (p.comm == comm && p.state != 'Z' && p.cpu_ticks >= cpu_ticks) return p;
  }
  return std::nullopt;
}

// A third of a second of CPU: the worker is spinning in the candidate's endless call, not just starting.
unsigned long long spinning_ticks() { return static_cast<unsigned long long>(::sysconf(_SC_CLK_TCK)) / 3 + 1; }

std::string status_text(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// Signals kwb and requires that kwb and everything it started be gone within a few seconds: the processes that
// descended from kwb when it was signalled, and anything else of its that this process adopted when kwb ended
// (AdoptOrphans). SIGTERM must also make kwb exit with 128 + 15 (it ends its children itself); SIGKILL ends it by
// force, and only the children's PR_SET_PDEATHSIG can end them.
void interrupt_and_expect_nothing_left(BackgroundKwb& kwb, int sig) {
  const std::vector<Proc> family = descendants_of(kwb.pid());
  ASSERT_EQ(::kill(kwb.pid(), sig), 0);
  const std::optional<int> status = kwb.wait(10s);
  ASSERT_TRUE(status.has_value()) << "kwb still runs 10 s after " << sig << "\n" << kwb.log();
  if (sig == SIGKILL) {
    EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL) << status_text(*status);
  } else {
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 128 + sig) << "kwb: " << status_text(*status) << "\n"
                                                                         << kwb.log();
  }
  std::vector<Proc> left;
  const bool all_gone = eventually(
      [&] {
        AdoptOrphans::reap_adopted();
        left = running(family);
        for (const Proc& p : running(descendants_of(::getpid()))) left.push_back(p);
        return left.empty();
      },
      3s);
  EXPECT_TRUE(all_gone) << "still running 3 s after kwb ended:" << describe(left) << "\n" << kwb.log();
}

class AdoptingTest : public ::testing::Test {
protected:
  AdoptOrphans m_adopt;
};

using interrupt_test = AdoptingTest;

TEST_F(interrupt_test, sigterm_ends_the_hanging_worker_and_kwb_exits_143) {
  BackgroundKwb kwb({"check", k_rmsnorm_lite.string(), "--impl", (k_adversarial / "infinite_loop.cpp").string(),
                     "--json", "--timeout-seconds", "3600", "--case", "decode"});
  ASSERT_GT(kwb.pid(), 0);
  ASSERT_TRUE(eventually([&] { return kwb.ended() || busy_child(kwb.pid(), "kwb-worker", spinning_ticks()); }, 300s))
      << "no worker spinning in the endless call\n"
      << kwb.log();
  ASSERT_FALSE(kwb.ended()) << kwb.log();
  interrupt_and_expect_nothing_left(kwb, SIGTERM);
  EXPECT_NE(kwb.log().find("interrupted by SIGTERM"), std::string::npos) << kwb.log();
  // The worker kwb killed is no candidate's crash: nothing is reported as a result.
  EXPECT_EQ(kwb.log().find("crashed"), std::string::npos) << kwb.log();
}

TEST_F(interrupt_test, sigkill_leaves_no_worker_behind) {
  BackgroundKwb kwb({"compare", k_rmsnorm_lite.string(), "--candidate", (k_adversarial / "infinite_loop.cpp").string(),
                     "--workload", "decode", "--json", "--timeout-seconds", "3600"});
  ASSERT_GT(kwb.pid(), 0);
  ASSERT_TRUE(eventually([&] { return kwb.ended() || busy_child(kwb.pid(), "kwb-worker", spinning_ticks()); }, 300s))
      << "no worker spinning in the endless call\n"
      << kwb.log();
  ASSERT_FALSE(kwb.ended()) << kwb.log();
  interrupt_and_expect_nothing_left(kwb, SIGKILL);
}

// A helper command kwb runs (here the compiler's --version, through a compiler that never answers) dies with kwb
// too, whether kwb is interrupted or killed.
class HelperTest : public ::testing::TestWithParam<int> {
protected:
  // A compiler script named cc, executable by kwb's worker user too, in a fresh folder of /tmp named after `stem`.
  static fs::path fake_compiler(const std::string& stem, const std::string& script) {
    const fs::path dir = fs::temp_directory_path() / (stem + "-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path cc = dir / "cc";
    write_file_atomic(cc, script);
    fs::permissions(cc, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
    return cc;
  }
  AdoptOrphans m_adopt;
};

// The run leaves a row either way (issue 40): INTERRUPTED for SIGTERM, and for SIGKILL a row started before the
// build and never finished, which reads KILLED.
TEST_P(HelperTest, a_hanging_helper_command_dies_with_kwb) {
  const fs::path cc = fake_compiler("kwb-hanging-cc", "#!/bin/sh\nexec sleep 3600\n");
  const fs::path dir = cc.parent_path();
  const fs::path ledger = dir / "ledger.sqlite";
  {
    BackgroundKwb kwb({"check", k_rmsnorm_lite.string(), "--impl", (k_rmsnorm_lite / "cpu" / "baseline.cpp").string(),
                       "--json", "--case", "decode"},
                      {"KWB_CXX=" + cc.string(), "KWB_LEDGER=" + ledger.string()});
    ASSERT_GT(kwb.pid(), 0);
    ASSERT_TRUE(eventually([&] { return kwb.ended() || busy_child(kwb.pid(), "sleep"); }, 60s))
        << "kwb never ran the compiler\n"
        << kwb.log();
    ASSERT_FALSE(kwb.ended()) << kwb.log();
    interrupt_and_expect_nothing_left(kwb, GetParam());
  }
  const std::vector<LedgerRun> runs = Ledger::open(ledger).find_runs({});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].kind, "check");
  EXPECT_EQ(runs[0].outcome, GetParam() == SIGKILL ? "KILLED" : "INTERRUPTED") << runs[0].reasons.size();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// The compiles of a layout pool run at once, one per CPU (builder.h: build_implementations), every one started on
// kwb's main thread: all of them die with kwb.
TEST_P(HelperTest, compiles_running_together_all_die_with_kwb) {
  // Answers --version as the real compiler does, and never finishes a compile.
  const fs::path cc = fake_compiler(
      "kwb-hanging-compile", "#!/bin/sh\nif [ \"$1\" = --version ]; then exec c++ --version; fi\nexec sleep 3600\n");
  const fs::path dir = cc.parent_path();
  const std::string cache = (dir / "cache").string();
  {
    BackgroundKwb kwb({"compare", k_rmsnorm_lite.string(), "--candidate",
                       (k_rmsnorm_lite / "cpu" / "fused.cpp").string(), "--workload", "decode", "--json"},
                      {"KWB_CXX=" + cc.string(), "KWB_CACHE_DIR=" + cache});
    ASSERT_GT(kwb.pid(), 0);
    const size_t together = std::min<size_t>(build_jobs(), 16);
    auto compiling = [&] {
      size_t n = 0;
      for (const Proc& p : descendants_of(kwb.pid())) n += p.comm == "sleep" && p.state != 'Z';
      return n;
    };
    ASSERT_TRUE(eventually([&] { return kwb.ended() || compiling() >= together; }, 60s))
        << "kwb never ran " << together << " compiles at once\n"
        << kwb.log();
    ASSERT_FALSE(kwb.ended()) << kwb.log();
    EXPECT_EQ(compiling(), together);  // never more than one per CPU
    interrupt_and_expect_nothing_left(kwb, GetParam());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

INSTANTIATE_TEST_SUITE_P(interrupt_test, HelperTest, ::testing::Values(SIGTERM, SIGKILL),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return p.param == SIGTERM ? std::string("SIGTERM") : std::string("SIGKILL");
                         });

// The lines of a manifest whose file no longer hashes to what it says, or is missing.
std::vector<std::string> manifest_mismatches(const fs::path& bundle) {
  std::vector<std::string> bad;
  std::istringstream in(read_file(bundle / "MANIFEST.sha256"));
  for (std::string line; std::getline(in, line);) {
    const size_t sep = line.find("  ");
    if (sep == std::string::npos) continue;
    const fs::path file = bundle / line.substr(sep + 2);
    if (!fs::exists(file) || sha256_file(file) != line.substr(0, sep)) bad.push_back(line);
  }
  return bad;
}

// Interrupted in the middle of the A/A comparison, validate records the stage as interrupted, keeps every sample
// measured before the signal and a manifest over all of it, and makes no decision.
TEST_F(interrupt_test, validate_records_the_interrupted_stage_and_keeps_what_it_measured) {
  const TempDir tmp("kwb-interrupted-bundle");
  const fs::path out = tmp / "bundle";
  const fs::path ledger = tmp / "ledger.sqlite";
  ::setenv("KWB_LEDGER", ledger.c_str(), 1);
  BackgroundKwb kwb({"validate", k_rmsnorm_lite.string(), "--candidate",
                     (k_rmsnorm_lite / "cpu" / "fused.cpp").string(), "--output-dir", out.string(), "--workload",
                     "decode", "--max-minutes", "30", "--json"});
  ASSERT_GT(kwb.pid(), 0);
  auto stage_status = [&](const std::string& name) -> std::string {
    const nlohmann::json j = nlohmann::json::parse(
        fs::exists(out / "stages.json") ? read_file(out / "stages.json") : std::string("{}"), nullptr, false);
    if (j.is_discarded()) return "";
    for (const auto& s : j.value("stages", nlohmann::json::array())) {
      if (s.value("name", "") == name) return s.value("status", "");
    }
    return "";
  };
  // kwb prints a progress line with the running estimate ("decode: block N ... estimate ...") once blocks are over:
  // one seen while the A/A stage runs means its first blocks' samples are in the report. (Counting workers no longer
  // tells: the pool's oracle workers, several at once, are kwb-worker processes too.)
  std::string aa_status;
  ASSERT_TRUE(eventually(
      [&] {
        if (kwb.ended()) return true;
        aa_status = stage_status("aa");
        if (aa_status.empty() || aa_status == "pending") return false;
        if (aa_status != "running") return true;  // over before a block was reported: reported below
        const bool block_over = kwb.log().find(": block ") != std::string::npos;
        aa_status = stage_status("aa");
        return block_over;
      },
      600s))
      << "validate never reached the A/A stage\n"
      << kwb.log();
  auto stages_text = [&] { return fs::exists(out / "stages.json") ? read_file(out / "stages.json") : std::string(); };
  ASSERT_FALSE(kwb.ended()) << kwb.log() << stages_text();
  ASSERT_EQ(aa_status, "running") << "the A/A stage ended before a block of it was reported\n"
                                  << kwb.log() << stages_text();
  interrupt_and_expect_nothing_left(kwb, SIGTERM);

  ASSERT_TRUE(fs::exists(out / "stages.json")) << kwb.log();
  const nlohmann::json stages = nlohmann::json::parse(read_file(out / "stages.json"));
  bool before = true;
  for (const auto& s : stages["stages"]) {
    const std::string name = s["name"], status = s["status"];
    if (name == "aa") {
      EXPECT_EQ(status, "interrupted") << stages.dump(2);
      EXPECT_EQ(s.value("signal", ""), "SIGTERM") << stages.dump(2);
      before = false;
    } else if (before) {
      EXPECT_NE(status, "interrupted") << name;
      EXPECT_NE(status, "pending") << name;
    } else {
      EXPECT_EQ(status, "skipped") << name << ": " << stages.dump(2);
    }
  }
  EXPECT_FALSE(fs::exists(out / "decision.json"));
  // The comparison so far, marked as interrupted, and its samples (the first block's at least) in samples.csv.
  ASSERT_TRUE(fs::exists(out / "comparisons" / "aa.json"));
  const nlohmann::json aa = nlohmann::json::parse(read_file(out / "comparisons" / "aa.json"));
  EXPECT_EQ(aa.value("verdict", ""), "INTERRUPTED");
  EXPECT_EQ(aa.value("interrupted", ""), "SIGTERM");
  ASSERT_TRUE(fs::exists(out / "samples.csv"));
  std::istringstream csv(read_file(out / "samples.csv"));
  size_t aa_rows = 0;
  for (std::string line; std::getline(csv, line);) aa_rows += line.starts_with("aa,");
  EXPECT_GE(aa_rows, 3u) << read_file(out / "samples.csv");
  // Nothing a killed worker did is a failure of the implementation.
  for (const auto& w : aa["workloads"]) EXPECT_TRUE(w["failures"].empty()) << w.dump();
  ASSERT_TRUE(fs::exists(out / "MANIFEST.sha256"));
  const std::string manifest = read_file(out / "MANIFEST.sha256");
  EXPECT_NE(manifest.find("  stages.json\n"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("  samples.csv\n"), std::string::npos) << manifest;
  EXPECT_TRUE(manifest_mismatches(out).empty()) << manifest;
  // The stopped run is a row of the ledger, with the signal as its reason.
  ::unsetenv("KWB_LEDGER");
  const std::vector<LedgerRun> runs = Ledger::open(ledger).runs("rmsnorm", BackendKind::cpu);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].kind, "validate");
  EXPECT_EQ(runs[0].outcome, "INTERRUPTED");
  ASSERT_EQ(runs[0].reasons.size(), 1u);
  EXPECT_NE(runs[0].reasons[0].find("SIGTERM"), std::string::npos) << runs[0].reasons[0];
  EXPECT_EQ(runs[0].bundle, fs::absolute(out).lexically_normal().string());
}

}  // namespace
}  // namespace kwb::test
