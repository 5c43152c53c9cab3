// kwb experiment end to end with the local executor, nothing timed: an arm that reaches for the other arm's
// folder, the evidence and the network is stopped, every violation recorded and its candidate discarded unvalidated;
// an arm that proposes a wrong kernel has it rejected at its check; the analysis counts both; a resumed run re-runs
// nothing; a changed arm is refused with exit 65; an attempt takes only the bundle its own validate made (issue 40
// item 3: not one made under weaker rules, nor another run's under the same rules); an edited trajectory record is
// refused by report and status (item 5); a generator that leaves a hard link, a deep tree and bytes past its quota in
// its work folder has them recorded against its attempt, and the experiment goes on (item 6). (The fused-against-idle
// run that times, and its report in a browser, is tests/experiment/llm_agent_test.py.)
#include "cli_helpers.h"
#include "experiment/model_proxy.h"
#include "experiment/trajectory.h"
#include "support/temp_dir.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <algorithm>

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <set>
#include <thread>

extern char** environ;

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

namespace kwb::test {
namespace {

// A model endpoint as a test can run one (issue 43): an OpenAI-compatible chat completion on 127.0.0.1, outside the
// sandbox, whose answer is the task's baseline source with a usage block. It logs every request's path, its
// Authorization header and any x-api-key, one JSON line each, so the test sees what reached it.
const char* k_fake_model = R"(import http.server, json, sys
baseline, log_path, port_file = sys.argv[1], sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with open(log_path, "a") as log:
            log.write(json.dumps({"path": self.path, "authorization": self.headers.get("Authorization"),
                                  "x_api_key": self.headers.get("x-api-key"), "body": body.decode()}) + "\n")
        out = json.dumps({"model": "fake-1", "choices": [{"message": {"role": "assistant",
                          "content": open(baseline).read()}}],
                          "usage": {"prompt_tokens": 1000, "completion_tokens": 50},
                          "echo": self.headers.get("Authorization")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(port_file + ".tmp", "w").write(str(s.server_address[1]))
import os; os.rename(port_file + ".tmp", port_file)
s.serve_forever()
)";

// The agent: one chat completion through kwb's socket (HTTP over a Unix socket, as httpx's uds transport or
// curl --unix-socket send it), with a key of its own it must not be able to use, then the answer's text as its
// candidate. Its second attempt is a client that takes only a base URL: everything over TCP to KWB_MODEL_URL, the
// loopback bridge in its sandbox.
const char* k_agent = R"(import http.client, json, os, socket
class UnixConn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(os.environ["KWB_MODEL_SOCKET"])
def Conn(host):
    if os.environ["KWB_ATTEMPT"] != "2":
        return UnixConn(host)
    url = os.environ["KWB_MODEL_URL"]
    assert url.startswith("http://127.0.0.1:"), url
    return http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=60)
c = Conn("kwb")
# The feedback channel first: kwb check of a source that does not build, as an agent checks its draft.
c.request("POST", "/kwb/check", body="int x = ;\n")
check = json.loads(c.getresponse().read())
print("check", check["verdict"], [f["reason"] for f in check["failures"]])
if os.environ.get("SNEAK") and os.environ["KWB_ATTEMPT"] == "2":
    # Its own loopback is allowed; another host, by TCP or by a datagram, is a reach for the network (and goes
    # nowhere: the sandbox's network namespace has only its loopback).
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"x", ("127.0.0.1", 9))
    for reach in (lambda: socket.create_connection(("10.1.2.3", 80), timeout=2),
                  lambda: u.sendto(b"x", ("10.1.2.3", 53))):
        try:
            reach()
            print("reached")
        except OSError as e:
            print("refused", e.errno)
    # A host the arm did not name, through the proxy: refused, and the attempt ends.
    c = Conn("kwb")
    c.request("POST", "/elsewhere/v1/chat/completions", body="{}")
    print("elsewhere", c.getresponse().status)
    raise SystemExit(5)
c = Conn("kwb")
prompt = "optimize " + os.environ["KWB_TASK"] + ", attempt " + os.environ["KWB_ATTEMPT"]
c.request("POST", "/fake/v1/chat/completions", body=json.dumps({"model": "fake-1", "messages": [
          {"role": "user", "content": prompt}]}), headers={"Content-Type": "application/json", "x-api-key": "stolen"})
r = c.getresponse()
answer = json.loads(r.read())
print("status", r.status, "endpoints", os.environ["KWB_MODEL_ENDPOINTS"], "echo", answer.get("echo"))
print("key in my environment:", any("sk-fake" in v for v in os.environ.values()))
print("mounted:", open(os.environ["MOUNTED"]).read())
open(os.environ["KWB_OUTPUT"], "w").write(answer["choices"][0]["message"]["content"])
)";

constexpr const char* k_key_env = "KWB_TEST_FAKE_MODEL_KEY";
constexpr const char* k_key = "sk-fake-7f3a9c21e5d04b6b";

// Every regular file below `dir` that holds `text`.
std::vector<std::string> files_holding(const fs::path& dir, const std::string& text) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied)) {
    if (e.is_regular_file() && !e.is_symlink() && read_file(e.path()).find(text) != std::string::npos) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

// The fake model, running until stopped.
class FakeModel {
public:
  FakeModel(const fs::path& root, const fs::path& baseline) {
    write_file_atomic(root / "fake_model.py", k_fake_model);
    const fs::path port_file = root / "port";
    std::vector<std::string> args = {"/usr/bin/python3", (root / "fake_model.py").string(), baseline.string(),
                                     (root / "model.log").string(), port_file.string()};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&m_pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) m_pid = -1;
    for (int i = 0; i < 400 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    if (fs::exists(port_file)) url = "http://127.0.0.1:" + read_file(port_file);
  }
  ~FakeModel() { stop(); }
  FakeModel(const FakeModel&) = delete;
  FakeModel& operator=(const FakeModel&) = delete;
  void stop() {
    if (m_pid <= 0) return;
    ::kill(m_pid, SIGKILL);
    (void)::waitpid(m_pid, nullptr, 0);
    m_pid = -1;
  }
  std::string url;  // "" when it did not start

private:
  pid_t m_pid = -1;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (end > at) out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

TEST(experiment_test, an_arm_calls_a_model_only_through_the_recording_proxy_within_its_budget_and_replays_without_it) {
  TempDir root("kwb-experiment-model");
  ::chmod(root.path().c_str(), 0755);
  ::setenv("KWB_KEY_DIR", (root / "keys").c_str(), 1);
  fs::create_directories(root / "arms");
  write_file_atomic(root / "arms" / "agent.py", k_agent);
  const fs::path baseline = k_rmsnorm_lite / "cpu" / "baseline.cpp";
  ASSERT_TRUE(fs::is_regular_file(baseline));
  FakeModel server(root.path(), baseline);
  ASSERT_FALSE(server.url.empty()) << "the fake model did not start";

  // TOML: an arm's own keys come before its [[arms.endpoints]] tables.
  const std::string endpoint =
      fmt::format("[[arms.endpoints]]\nname = \"fake\"\nurl = \"{}\"\nkey_env = \"{}\"\n", server.url, k_key_env);
  // A local model's files, mounted read-only and not copied.
  fs::create_directories(root / "weights");
  write_file_atomic(root / "weights" / "w.bin", "weights-v1");
  const auto arm_keys = [&](const std::string& more_env) {
    return fmt::format(
        "command = [\"python3\", \"agent.py\"]\nfiles = [\"arms/agent.py\"]\nmounts = [\"weights\"]\n"
        "env = {{ MOUNTED = \"{}\"{} }}\n",
        (root / "weights" / "w.bin").string(), more_env);
  };
  write_file_atomic(
      root / "experiment.toml",
      fmt::format("name = \"model\"\nseeds = [1]\nattempts = 2\n"
                  "[validate]\nworkloads = [\"decode\"]\nlayouts = 2\nno_profile = true\n"
                  "[[tasks]]\ndir = \"{}\"\n"
                  "[[prices]]\nmodel = \"fake-*\"\ninput_usd_per_mtok = 3.0\noutput_usd_per_mtok = 15.0\n"
                  "[[arms]]\nname = \"agent\"\n{}{}"
                  "[[arms]]\nname = \"thrifty\"\n{}budget_per_attempt = {{ output_tokens = 10 }}\n"
                  "{}",
                  k_rmsnorm_lite.string(), arm_keys(""), endpoint, arm_keys(", SNEAK = \"1\""), endpoint));
  const fs::path storage = root / "experiment.experiment";  // the file's stem

  // Without the key where it runs, a trajectory says which variable to set.
  {
    const KwbRun run =
        run_kwb({"experiment", "run", (root / "experiment.toml").string(), "--storage", (root / "nokey").string()},
                std::chrono::seconds(300));
    EXPECT_NE(run.exit_code, 0);
    EXPECT_FALSE(files_holding(root / "nokey", std::string(k_key_env) + ", which is not set").empty()) << run.errors;
  }

  ::setenv(k_key_env, k_key, 1);
  const KwbRun run = run_kwb({"experiment", "run", (root / "experiment.toml").string()}, std::chrono::seconds(600));
  ::unsetenv(k_key_env);
  ASSERT_EQ(run.exit_code, 2) << run.output << run.errors;

  const auto record = [&](const fs::path& s, const std::string& id) {
    return nlohmann::json::parse(read_file(s / "trajectories" / id / "trajectory.json"));
  };
  const nlohmann::json agent = record(storage, "agent--rmsnorm--s1")["attempts"][0];
  EXPECT_EQ(agent["category"], "slower") << agent.dump(2);  // the baseline's own code: KEEP_BASELINE
  EXPECT_EQ(agent["model"]["requests"], 1) << agent.dump(2);
  EXPECT_EQ(agent["model"]["input_tokens"], 1000);
  EXPECT_EQ(agent["model"]["output_tokens"], 50);
  EXPECT_NEAR(agent["model"]["usd"].get<double>(), (1000 * 3.0 + 50 * 15.0) / 1e6, 1e-12);
  EXPECT_EQ(agent["candidate_sha256"], sha256_file(baseline));
  EXPECT_EQ(agent["model"]["checks"], 1);
  const std::string agent_log =
      read_file(storage / "trajectories" / "agent--rmsnorm--s1" / "attempts" / "1" / "generator.log");
  EXPECT_NE(agent_log.find("check FAIL ['build_failed']"), std::string::npos) << agent_log;
  // It cannot read the key: not in its environment, and an endpoint that echoes the Authorization header it got has
  // it redacted before the generator sees the answer.
  EXPECT_NE(agent_log.find("key in my environment: False"), std::string::npos) << agent_log;
  EXPECT_NE(agent_log.find("mounted: weights-v1"), std::string::npos) << agent_log;
  EXPECT_FALSE(fs::exists(storage / "arms" / "agent" / "weights")) << "a mount is not copied";
  EXPECT_NE(agent_log.find(std::string("echo Bearer [redacted:") + k_key_env + "]"), std::string::npos) << agent_log;
  // The second attempt spoke TCP to the loopback bridge: the same proxy, the same record.
  const nlohmann::json over_tcp = record(storage, "agent--rmsnorm--s1")["attempts"][1];
  EXPECT_EQ(over_tcp["category"], "slower") << over_tcp.dump(2);
  EXPECT_EQ(over_tcp["model"]["requests"], 1);
  EXPECT_EQ(over_tcp["model"]["checks"], 1);
  EXPECT_TRUE(over_tcp["generator"]["violations"].empty()) << over_tcp.dump(2);
  EXPECT_EQ(over_tcp["candidate_sha256"], sha256_file(baseline));
  const nlohmann::json thrifty = record(storage, "thrifty--rmsnorm--s1")["attempts"][0];
  EXPECT_EQ(thrifty["category"], "budget") << thrifty.dump(2);
  EXPECT_EQ(thrifty["decision"], nullptr);
  EXPECT_NE(thrifty["model"]["over_budget"].get<std::string>().find("output_tokens: 50 of 10"), std::string::npos);
  // Its second attempt asks the proxy for a host it did not name: refused, recorded, and the attempt ends.
  const nlohmann::json sneak = record(storage, "thrifty--rmsnorm--s1")["attempts"][1];
  EXPECT_EQ(sneak["category"], "sandbox") << sneak.dump(2);
  EXPECT_EQ(sneak["model"]["unnamed"], "/elsewhere/v1/chat/completions");
  // Before it, another host by TCP and by a datagram: both recorded, its own loopback not.
  std::set<std::string> reaches;
  for (const nlohmann::json& v : sneak["generator"]["violations"]) {
    reaches.insert(v["kind"].get<std::string>() + " " + v["syscall"].get<std::string>() + " " +
                   v["target"].get<std::string>());
  }
  EXPECT_EQ(reaches, (std::set<std::string>{"network connect 10.1.2.3:80", "network sendto 10.1.2.3:53"}))
      << sneak.dump(2);
  EXPECT_NE(sneak["detail"].get<std::string>().find("first: network connect 10.1.2.3:80"), std::string::npos)
      << sneak.dump(2);

  // The analysis counts what each arm's calls cost, and the attempt past its budget by its category.
  const nlohmann::json an = nlohmann::json::parse(read_file(storage / "analysis.json"));
  EXPECT_EQ(an["arms"][0]["cost"]["model_requests"], 2) << an["arms"].dump(2);
  EXPECT_EQ(an["arms"][0]["cost"]["model_output_tokens"], 100);
  EXPECT_NEAR(an["arms"][1]["cost"]["model_usd"].get<double>(), 0.00375, 1e-12);
  EXPECT_EQ(an["arms"][1]["categories"]["budget"], 1);
  EXPECT_EQ(an["arms"][1]["categories"]["sandbox"], 1);

  // The report shows the calls' cost per arm and links every attempt's exchanges.
  const std::string report = read_file(storage / "report.md");
  EXPECT_NE(report.find("| A agent | 2 | 2000 | 100 | 0.0075 |"), std::string::npos) << report;
  EXPECT_NE(report.find("(trajectories/agent--rmsnorm--s1/attempts/1/model/exchanges.jsonl)"), std::string::npos)
      << report;

  // What reached the model: the proxy's key, never the generator's; the prompt as the agent wrote it.
  std::vector<nlohmann::json> seen;
  for (const std::string& line : lines_of(read_file(root / "model.log"))) seen.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(seen.size(), 3u);  // the agent's two attempts, the thrifty arm's first
  for (const nlohmann::json& s : seen) {
    EXPECT_EQ(s["path"], "/v1/chat/completions");
    EXPECT_EQ(s["authorization"], std::string("Bearer ") + k_key);
    EXPECT_EQ(s["x_api_key"], nullptr);
    EXPECT_NE(s["body"].get<std::string>().find("optimize rmsnorm, attempt "), std::string::npos);
  }
  // Recorded, and nowhere in the storage: the plan names the variable, not its value.
  const std::vector<nlohmann::json> ex =
      read_model_exchanges(storage / "trajectories" / "agent--rmsnorm--s1" / "attempts" / "1" / "model");
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0]["endpoint"], "kwb");
  EXPECT_EQ(ex[1]["status"], 200);
  EXPECT_EQ(files_holding(storage, k_key), std::vector<std::string>{});
  EXPECT_NE(read_file(storage / "experiment.json").find(k_key_env), std::string::npos);

  // The replay: no model (the server is stopped) and no key; the same candidates, categories and costs.
  server.stop();
  const fs::path replayed = root / "replayed";
  const KwbRun again = run_kwb({"experiment", "run", (root / "experiment.toml").string(), "--storage",
                                replayed.string(), "--replay", storage.string()},
                               std::chrono::seconds(600));
  ASSERT_EQ(again.exit_code, 2) << again.output << again.errors;
  for (const auto& [id, n] : {std::pair{"agent--rmsnorm--s1", 0}, std::pair{"agent--rmsnorm--s1", 1},
                              std::pair{"thrifty--rmsnorm--s1", 0}, std::pair{"thrifty--rmsnorm--s1", 1}}) {
    const nlohmann::json a = record(storage, id)["attempts"][n];
    const nlohmann::json b = record(replayed, id)["attempts"][n];
    EXPECT_EQ(a["candidate_sha256"], b["candidate_sha256"]) << id;
    EXPECT_EQ(a["category"], b["category"]) << id;
    EXPECT_EQ(a["model"]["output_tokens"], b["model"]["output_tokens"]) << id;
    EXPECT_EQ(b["model"]["replay_problem"], "") << b.dump(2);
  }
  ::unsetenv("KWB_KEY_DIR");
}

}  // namespace
}  // namespace kwb::test
