#include "experiment/trajectory.h"
#include "util/sealed_json.h"

#include "campaign/runner.h"
#include "experiment/generator_sandbox.h"
#include "experiment/generator_syscalls.h"
#include "experiment/model_proxy.h"
#include "record/bundle_reader.h"
#include "record/bundle_snapshot.h"
#include "record/verify.h"
#include "util/data_secret.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/interrupt.h"
#include "util/json_text.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "util/subprocess.h"
#include "util/timing_lock.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace kwb {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_category_names[] = {"kept",    "slower",    "inconclusive", "incorrect",
                                                 "cheat",   "not_built", "controls",     "invalid",
                                                 "sandbox", "budget",    "no_candidate", "error"};

// A candidate larger than this is not a kernel source.
constexpr size_t k_max_candidate_bytes = 1 << 20;

double seconds_since(std::int64_t start_ns) { return static_cast<double>(unix_now_ns() - start_ns) / 1e9; }

std::optional<nlohmann::json> read_json(const fs::path& p) {
  if (!fs::is_regular_file(p)) return std::nullopt;
  try {
    return nlohmann::json::parse(read_file(p));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string tail(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(s.size() - n); }

const nlohmann::json& find_by(const nlohmann::json& list, const std::string& key, const std::string& value,
                              const std::string& what, const fs::path& plan_file) {
  for (const nlohmann::json& e : list) {
    if (e.value(key, "") == value) return e;
  }
  throw DataError(fmt::format("{}: no {} '{}' in the frozen plan", plan_file.string(), what, value));
}

// Everything a trajectory needs to know, from the frozen plan.
struct Trajectory {
  fs::path storage;
  fs::path kwb;
  nlohmann::json plan;
  std::string digest;
  nlohmann::json spec;  // the plan's trajectories[] entry
  nlohmann::json task;
  nlohmann::json arm;
  fs::path dir;
  fs::path task_dir;    // the real task folder (kwb validate's)
  fs::path public_dir;  // its public copy (the generator's)
  fs::path baseline_public;
  std::string ext;  // the baseline's extension, which every candidate gets
  fs::path ledger;
  std::int64_t seed = 0;
  int attempts = 0;
  // The arm's way out (experiment/model_proxy.h): its endpoints and budgets, the prices, the keys read from kwb's
  // environment once (and then removed from it, so that no validate or candidate kwb starts inherits them), and the
  // recorded experiment a replay serves.
  std::vector<ModelEndpoint> endpoints;
  ModelBudget attempt_budget, arm_budget;
  std::vector<ModelPrice> prices;
  std::vector<Secret> secrets;
  fs::path replay_from;

  fs::path work() const { return dir / "work"; }
  fs::path history() const { return dir / "history"; }
  fs::path attempt_dir(int n) const { return dir / "attempts" / std::to_string(n); }
  fs::path record_file() const { return dir / "trajectory.json"; }
};

void save(const Trajectory& t, const nlohmann::json& record) {
  write_file_atomic(t.record_file(), json_text(sealed_json(record, "kwb.trajectory", machine_key()), 2) + "\n");
}

// kwb validate's options from the plan, for one validate.
std::vector<std::string> validate_argv(const Trajectory& t, const std::string& candidate, std::int64_t seed,
                                       const fs::path& bundle, bool against_incumbent, double max_minutes = 0.0) {
  std::vector<std::string> a = {"/usr/bin/env", "KWB_LEDGER=" + t.ledger.string(), t.kwb.string(), "validate",
                                t.task_dir.string(), "--candidate", candidate, "--output-dir", bundle.string(),
                                "--backend", t.plan["settings"]["backend"].get<std::string>(), "--seed",
                                std::to_string(seed), "--json",
                                // This run's own nonce, in the plan's signed command line: run_validate takes no
                                // bundle that another run made, even one under exactly these rules.
                                "--job-nonce", DataSecret::draw().hex()};
  if (against_incumbent) a.insert(a.end(), {"--against", "incumbent"});
  if (max_minutes > 0.0) a.insert(a.end(), {"--max-minutes", fmt::format("{}", max_minutes)});
  for (const nlohmann::json& f : t.plan["settings"]["validate"]) {
    if (max_minutes > 0.0 && f["flag"] == "--max-minutes") continue;
    a.push_back(f["flag"].get<std::string>());
    if (!f["value"].get<std::string>().empty()) a.push_back(f["value"].get<std::string>());
  }
  return a;
}

std::chrono::milliseconds validate_timeout(const Trajectory& t) {
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(t.plan["settings"]["run_limit_minutes"].get<double>() * 60'000.0));
}

// The failure reasons of a bundle's final check, for a final_recheck_failed.
std::vector<std::string> final_check_reasons(const fs::path& bundle) {
  std::vector<std::string> out;
  if (std::optional<nlohmann::json> c = read_json(bundle / "checks" / "candidate_final.json")) {
    for (const nlohmann::json& f : c->value("failures", nlohmann::json::array())) {
      if (f.contains("reason") && f["reason"].is_string()) out.push_back(f["reason"].get<std::string>());
    }
  }
  return out;
}

struct ValidateOutcome : AttemptBundle {
  int exit_code = -1;
  double seconds = 0.0;
};

ValidateOutcome run_validate(const Trajectory& t, const std::vector<std::string>& argv, const fs::path& log_dir) {
  ValidateOutcome o;
  const std::int64_t start = unix_now_ns();
  const CommandResult r = run_command(argv, validate_timeout(t), StderrMode::separate);
  o.seconds = seconds_since(start);
  o.exit_code = r.timed_out ? -1 : r.exit_code;
  write_file_atomic(log_dir / "validate.stdout", r.output);
  write_file_atomic(log_dir / "validate.stderr", r.errors);
  const fs::path bundle = log_dir / "bundle";
  if (!fs::is_regular_file(bundle / "decision.json")) {
    o.error = r.timed_out ? "kwb validate ran past the trajectory's run limit"
                          : fmt::format("kwb validate exited with {} and left no decision: {}", r.exit_code,
                                        tail(r.errors, 400));
    return o;
  }
  static_cast<AttemptBundle&>(o) = read_attempt_bundle(bundle, argv);
  return o;
}

nlohmann::json speedup_json(const std::optional<LogSpeedup>& s) {
  if (!s) return nullptr;
  return {{"log_speedup", s->estimate},
          {"log_low", s->low},
          {"log_high", s->high},
          {"improvement_pct", (1.0 - std::exp(-s->estimate)) * 100.0},
          {"ci_low_pct", (1.0 - std::exp(-s->low)) * 100.0},
          {"ci_high_pct", (1.0 - std::exp(-s->high)) * 100.0}};
}

// The incumbent's source: the last kept attempt's candidate (its private copy, which kwb validate reads through
// the ledger), or nullopt for the task's baseline.
std::optional<int> last_kept(const nlohmann::json& record) {
  std::optional<int> kept;
  for (const nlohmann::json& a : record["attempts"]) {
    if (a.value("kept", false)) kept = a["attempt"].get<int>();
  }
  return kept;
}

// The generator of attempt n: the arm's command in its sandbox, seeing the task's public part, the history, its
// work folder and its arm's files, with the protocol's environment (docs/arms.md).
GeneratorSpec generator_spec(const Trajectory& t, int n, const fs::path& incumbent_public,
                             const std::string& out_name) {
  GeneratorSpec g;
  for (const nlohmann::json& w : t.arm["command"]) g.argv.push_back(w.get<std::string>());
  const fs::path arm_dir = ExperimentPaths{t.storage}.arm(t.arm["name"].get<std::string>());
  g.cwd = arm_dir;
  g.read_only = {arm_dir, t.public_dir, t.history(), abi_include_dir()};
  for (const nlohmann::json& m : t.arm.value("mounts", nlohmann::json::array())) {
    g.read_only.emplace_back(m["path"].get<std::string>());
  }
  g.writable = t.work();
  g.wall = std::chrono::milliseconds(static_cast<std::int64_t>(t.arm["timeout_seconds"].get<double>() * 1000.0));
  g.cpu_seconds = static_cast<std::uint64_t>(std::ceil(t.arm["cpu_seconds"].get<double>()));
  // An experiment frozen before the quota existed gets the default.
  g.work_quota_bytes = static_cast<std::uint64_t>(t.arm.value("work_quota_mib", 256.0) * 1024.0 * 1024.0);
  g.env = {{"KWB_TASK_DIR", t.public_dir.string()},
           {"KWB_TASK", t.task["name"].get<std::string>()},
           {"KWB_BACKEND", t.plan["settings"]["backend"].get<std::string>()},
           {"KWB_BASELINE", t.baseline_public.string()},
           {"KWB_INCUMBENT", incumbent_public.string()},
           {"KWB_SEED", std::to_string(t.seed)},
           {"KWB_REPEAT", std::to_string(t.spec.value("repeat", 1))},
           {"KWB_ATTEMPT", std::to_string(n)},
           {"KWB_ATTEMPTS", std::to_string(t.attempts)},
           {"KWB_ARM", t.arm["name"].get<std::string>()},
           {"KWB_HISTORY", t.history().string()},
           {"KWB_WORK", t.work().string()},
           {"KWB_OUTPUT", (t.work() / out_name).string()},
           {"KWB_INCLUDE_DIR", abi_include_dir().string()}};
  for (auto it = t.arm["env"].begin(); it != t.arm["env"].end(); ++it) g.env.emplace_back(it.key(), it.value());
  g.address_space_bytes = static_cast<std::uint64_t>(t.arm.value("address_space_gib", 4.0) * double(1ull << 30));
  return g;
}

ModelBudget budget_from_json(const nlohmann::json& j) {
  ModelBudget b;
  if (!j.is_object()) return b;
  for (const auto& [key, field] : {std::pair{"requests", &b.requests}, std::pair{"input_tokens", &b.input_tokens},
                                   std::pair{"output_tokens", &b.output_tokens}}) {
    if (j.contains(key) && j[key].is_number_unsigned()) *field = j[key].get<std::uint64_t>();
  }
  if (j.contains("usd") && j["usd"].is_number()) b.usd = j["usd"].get<double>();
  return b;
}

// The arm's endpoints, budgets and prices from the plan; the keys from the environment, which then forgets them. A
// key the plan names and the environment lacks stops the trajectory before any attempt (a replay needs none).
void read_model_settings(Trajectory& t) {
  for (const nlohmann::json& e : t.arm.value("endpoints", nlohmann::json::array())) {
    t.endpoints.push_back({e["name"].get<std::string>(), e["url"].get<std::string>(), e.value("key_env", ""),
                           e.value("key_header", "authorization")});
  }
  t.attempt_budget = budget_from_json(t.arm.value("budget_per_attempt", nlohmann::json()));
  t.arm_budget = budget_from_json(t.arm.value("budget_per_arm", nlohmann::json()));
  for (const nlohmann::json& p : t.plan["settings"].value("prices", nlohmann::json::array())) {
    t.prices.push_back(
        {p["model"].get<std::string>(), p["input_usd_per_mtok"].get<double>(), p["output_usd_per_mtok"].get<double>()});
  }
  if (t.plan["settings"].contains("replay")) t.replay_from = t.plan["settings"]["replay"]["from"].get<std::string>();
  for (const ModelEndpoint& e : t.endpoints) {
    if (e.key_env.empty()) continue;
    const char* value = std::getenv(e.key_env.c_str());
    if ((value == nullptr || *value == '\0') && t.replay_from.empty()) {
      throw DataError(fmt::format(
          "arm {}'s endpoint {} takes its key from {}, which is not set where this trajectory runs: export it in the "
          "environment kwb experiment run (and its jobs) start with, or run it with --replay (docs/arms.md)",
          t.arm["name"].get<std::string>(), e.name, e.key_env));
    }
    if (value != nullptr) t.secrets.push_back({e.key_env, value});
  }
  for (const Secret& s : t.secrets) ::unsetenv(s.name.c_str());
}

// The proxy of one attempt, when the arm names endpoints: listening before the generator starts, in a folder of its
// own under /tmp (a Unix socket's path is at most 107 bytes; the storage's may be longer) that the sandbox binds.
struct SocketFolder {
  fs::path path;
  SocketFolder() {
    std::string pattern = "/tmp/kwb-model-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw Error(ExitCode::io_error, fmt::format("cannot make {}: {}", pattern, std::strerror(errno)));
    }
    path = pattern;
    ::chmod(path.c_str(), 0755);  // the generator's user reaches the socket through it
  }
  ~SocketFolder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  SocketFolder(const SocketFolder&) = delete;
  SocketFolder& operator=(const SocketFolder&) = delete;
};

struct AttemptProxy {
  std::optional<SocketFolder> folder;  // outlives the proxy, which removes its socket first
  std::optional<ModelProxy> proxy;
};

// The feedback channel's check (POST /kwb/check): kwb check of the generator's source on the task's published cases,
// what the generator could run itself were kwb inside its sandbox, in a ledger of the attempt's own. Its answer is the
// check's verdict, failures and cases, with the attempt's folder taken out of the paths.
UpstreamResponse feedback_check(const Trajectory& t, const fs::path& adir, int k, const std::string& source) {
  UpstreamResponse out;
  out.content_type = "application/json";
  if (source.size() > k_max_candidate_bytes) {
    out.status = 413;
    out.body = json_text({{"error", {{"type", "kwb_too_large"}, {"message", "a candidate is at most 1 MiB"}}}});
    return out;
  }
  const fs::path dir = adir / "checks" / std::to_string(k);
  fs::create_directories(dir);
  const fs::path file = dir / ("candidate" + t.ext);
  write_file_atomic(file, source);
  const CommandResult r = run_command({"/usr/bin/env", "KWB_LEDGER=" + (adir / "checks" / "ledger.sqlite").string(),
                                       t.kwb.string(), "check", t.task_dir.string(), "--impl", file.string(),
                                       "--backend", t.plan["settings"]["backend"].get<std::string>(), "--json"},
                                      std::chrono::minutes(5), StderrMode::separate);
  write_file_atomic(dir / "check.json", r.output);
  const nlohmann::json c = nlohmann::json::parse(r.output, nullptr, false);
  if (!c.is_object() || !c.contains("verdict")) {
    out.status = 502;
    out.body = json_text(
        {{"error",
          {{"type", "kwb_check_error"},
           {"message", fmt::format("kwb check exited {} without a result: {}", r.exit_code, tail(r.errors, 1000))}}}});
    return out;
  }
  const auto local = [&](std::string text) {
    for (const std::string& prefix : {dir.string() + "/", dir.string()}) {
      for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at))
        text.erase(at, prefix.size());
    }
    return tail(text, 4000);
  };
  nlohmann::json failures = nlohmann::json::array(), cases = nlohmann::json::array();
  for (const nlohmann::json& f : c.value("failures", nlohmann::json::array())) {
    failures.push_back({{"case", f.value("case", "")},
                        {"call", f.value("call", -1)},
                        {"reason", f.value("reason", "")},
                        {"detail", local(f.value("detail", ""))}});
  }
  for (const nlohmann::json& k2 : c.value("cases", nlohmann::json::array())) {
    cases.push_back({{"name", k2.value("name", "")},
                     {"role", k2.value("role", "")},
                     {"dims", k2.value("dims", "")},
                     {"passed", k2.value("passed", 0)},
                     {"failed", k2.value("failed", 0)},
                     {"max_rel_error", k2.value("max_rel_error", 0.0)}});
  }
  out.status = 200;
  out.body = json_text({{"verdict", c["verdict"]},
                        {"failures", failures},
                        {"cases", cases},
                        {"not_run", c.value("not_run", nlohmann::json::array())}},
                       2);
  return out;
}

// What the recorded trajectory's sealed record says attempt n's exchanges were (SHA-256 of exchanges.jsonl; that of
// nothing when it made no request). DataError when the record is not believed or has no such attempt.
std::string recorded_exchanges_sha256(const Trajectory& t, int n) {
  const fs::path record =
      ExperimentPaths{t.replay_from}.trajectory(t.spec["id"].get<std::string>()) / "trajectory.json";
  const std::optional<nlohmann::json> r = read_json(record);
  if (!r) throw DataError(fmt::format("{}: the recorded trajectory has no record to replay", record.string()));
  if (const std::string why = sealed_json_problem(*r, "kwb.trajectory", trusted_keys()); !why.empty()) {
    throw DataError(fmt::format("{}: not believed: {}; replay from an unchanged copy", record.string(), why));
  }
  const nlohmann::json attempts = r->value("attempts", nlohmann::json::array());
  if (static_cast<int>(attempts.size()) < n) {
    throw DataError(fmt::format("{}: the recording has no attempt {} to replay", record.string(), n));
  }
  const nlohmann::json m = attempts[static_cast<size_t>(n - 1)].value("model", nlohmann::json());
  return m.is_object() ? m.value("exchanges_sha256", sha256_hex("")) : sha256_hex("");
}

void start_proxy(const Trajectory& t, int n, const fs::path& adir, GeneratorSpec& g, AttemptProxy& out) {
  out.folder.emplace();
  ModelProxyConfig c;
  c.endpoints = t.endpoints;
  c.prices = t.prices;
  c.attempt_budget = t.attempt_budget;
  c.arm_budget = t.arm_budget;
  c.arm_spend_file = t.storage / "model_spend" / (t.arm["name"].get<std::string>() + ".json");
  c.record_dir = adir / "model";
  c.socket_dir = out.folder->path;
  if (!t.replay_from.empty()) {
    c.replay_dir = ExperimentPaths{t.replay_from}.trajectory(t.spec["id"].get<std::string>()) / "attempts" /
                   std::to_string(n) / "model";
    c.replay_sha256 = recorded_exchanges_sha256(t, n);
  }
  c.secrets = t.secrets;
  c.check = [&t, adir, k = 0](const std::string& source) mutable { return feedback_check(t, adir, ++k, source); };
  out.proxy.emplace(std::move(c));
  g.read_only.push_back(out.folder->path);
  g.stop_fd = out.proxy->stop_fd();
  g.service_fd = out.proxy->service_fd();
  g.service = [p = &*out.proxy] { p->serve_main_thread(); };
  std::vector<std::string> names;
  for (const ModelEndpoint& e : t.endpoints) names.push_back(e.name);
  g.env.emplace_back("KWB_MODEL_SOCKET", out.proxy->socket_path().string());
  // The same proxy over TCP, for agents that take only a base URL: kwb-generator-shim's loopback bridge.
  g.env.emplace_back("KWB_MODEL_URL", fmt::format("http://127.0.0.1:{}", k_model_bridge_port));
  g.env.emplace_back("KWB_MODEL_ENDPOINTS", fmt::format("{}", fmt::join(names, ",")));
}

nlohmann::json generator_json(const GeneratorResult& gr) {
  nlohmann::json violations = nlohmann::json::array();
  for (const SandboxViolation& v : gr.violations) {
    violations.push_back({{"kind", v.kind}, {"syscall", v.syscall}, {"target", v.target}});
  }
  return {{"exit_code", gr.exit_code},
          {"signal", gr.signal},
          {"timed_out", gr.timed_out},
          {"wall_seconds", gr.wall_seconds},
          {"cpu_seconds", gr.cpu_seconds},
          {"violations", violations},
          {"violations_dropped", gr.violations_dropped},
          {"folder_problems", gr.folder_problems}};
}

// Why the generator's run gives nothing to validate ("" when it wrote a candidate and did nothing wrong), and the
// attempt's category then: sandbox for a reach outside its view or a work folder past its bounds (the folder is
// reset), no_candidate for a failure or no output.
std::string generator_failure(const GeneratorResult& gr, const GeneratorSpec& g, bool wrote, const std::string& why,
                              AttemptCategory& category) {
  if (!gr.folder_problems.empty()) {
    category = AttemptCategory::sandbox;
    return fmt::format(
        "the generator left its work folder past its bounds ({}): the folder is reset and its "
        "candidate discarded",
        fmt::join(gr.folder_problems, "; "));
  }
  if (!gr.violations.empty()) {
    category = AttemptCategory::sandbox;
    return fmt::format(
        "the generator reached outside its sandbox ({} time(s), first: {} {} {}): its candidate is "
        "discarded",
        gr.violations.size() + gr.violations_dropped, gr.violations.front().kind, gr.violations.front().syscall,
        gr.violations.front().target);
  }
  category = AttemptCategory::no_candidate;
  if (gr.timed_out)
    return fmt::format("the generator ran past its {} s limit", static_cast<double>(g.wall.count()) / 1000.0);
  if (gr.signal != 0) return fmt::format("the generator was killed by signal {}", gr.signal);
  if (gr.exit_code != 0) return fmt::format("the generator exited with {}", gr.exit_code);
  if (!wrote) return "the generator wrote no candidate: " + why;
  return "";
}

// Validates attempt n's candidate against the incumbent, records the decision in `a`, and keeps it on
// KEEP_CANDIDATE (kwb keep, into the trajectory's ledger). Returns the attempt's category.
AttemptCategory validate_and_keep(const Trajectory& t, int n, const fs::path& adir, const std::string& out_name,
                                  nlohmann::json& a) {
  const std::vector<std::string> argv =
      validate_argv(t, (adir / out_name).string(), attempt_seed(t.seed, n), adir / "bundle", true);
  const ValidateOutcome v = run_validate(t, argv, adir);
  a["validate_seconds"] = v.seconds;
  a["validate_lock_wait_seconds"] = v.lock_wait_seconds;
  if (!v.decision) {
    a["detail"] = v.error;
    return AttemptCategory::error;
  }
  a["decision"] = (*v.decision)["decision"];
  a["reason_codes"] = v.decision->value("reason_codes", nlohmann::json::array());
  nlohmann::json reasons = v.decision->contains("inputs")
                               ? (*v.decision)["inputs"].value("candidate_check_reasons", nlohmann::json::array())
                               : nlohmann::json::array();
  for (const std::string& r : v.final_reasons) reasons.push_back(r);
  a["check_reasons"] = reasons;
  a["speedup"] = speedup_json(v.ab);
  const AttemptCategory category = categorize_decision(*v.decision, v.final_reasons);
  if (category != AttemptCategory::kept) return category;
  const CommandResult k = run_command(
      {"/usr/bin/env", "KWB_LEDGER=" + t.ledger.string(), t.kwb.string(), "keep", (adir / "bundle").string()},
      std::chrono::minutes(10), StderrMode::separate);
  write_file_atomic(adir / "keep.log", k.output + k.errors);
  if (k.exit_code != 0) {
    a["detail"] =
        fmt::format("kwb keep refused the KEEP_CANDIDATE bundle (exit {}): {}", k.exit_code, tail(k.errors, 400));
    return AttemptCategory::error;
  }
  a["kept"] = true;
  return category;
}

// The kinds of failure an attempt's checks found, its final (held-out) re-check's included: each reason's name once,
// sorted, without its detail (which may describe held-out shapes or data). What an agent's harness gets from a
// failed test run: which kind of wrong, not the test.
// A reason's name: a reason may carry a detail after it ("sandbox_violation: socket").
std::string reason_name(const std::string& reason) { return reason.substr(0, reason.find_first_of(": ")); }

nlohmann::json failure_kinds(const nlohmann::json& a) {
  std::set<std::string> kinds;
  for (const nlohmann::json& r : a.value("check_reasons", nlohmann::json::array())) {
    if (r.is_string()) kinds.insert(reason_name(r.get<std::string>()));
  }
  return nlohmann::json(std::vector<std::string>(kinds.begin(), kinds.end()));
}

// The public result, beside the candidate, for this trajectory's later attempts: no evidence, no seeds.
void publish_result(const Trajectory& t, int n, const std::string& out_name, const std::optional<std::string>& source,
                    const nlohmann::json& a) {
  const fs::path h = t.history() / std::to_string(n);
  fs::create_directories(h);
  if (source) write_file_atomic(h / out_name, *source);
  nlohmann::json pub = {{"attempt", n},
                        {"decision", a["decision"]},
                        {"kept", a["kept"]},
                        {"category", a["category"]},
                        {"reason_codes", a["reason_codes"]},
                        {"improvement_pct", nullptr},
                        {"ci_low_pct", nullptr},
                        {"ci_high_pct", nullptr},
                        {"candidate_sha256", a["candidate_sha256"]},
                        {"failure_kinds", failure_kinds(a)},
                        {"meta", a["meta"]}};
  if (a["speedup"].is_object()) {
    for (const char* k : {"improvement_pct", "ci_low_pct", "ci_high_pct"}) pub[k] = a["speedup"][k];
  }
  write_file_atomic(h / "result.json", json_text(pub, 2) + "\n");
  for (const fs::path& p : {h, h / "result.json", h / out_name}) {
    if (fs::exists(p)) ::chmod(p.c_str(), fs::is_directory(p) ? 0755 : 0644);
  }
}

// The attempt's model calls in its record: for an arm that may call a model, and for any that used the proxy (a
// feedback check).
void record_model(const Trajectory& t, const fs::path& adir, const ModelProxyReport& model, nlohmann::json& a) {
  if (t.endpoints.empty() && model.checks + model.refused + model.spend.requests == 0) return;
  a["model"] = model.json();
  const fs::path exchanges = adir / "model" / "exchanges.jsonl";
  a["model"]["exchanges"] = exchanges.lexically_relative(t.storage).string();
  // Sealed with the record: a replay serves the file only with this digest.
  a["model"]["exchanges_sha256"] = sha256_hex(fs::is_regular_file(exchanges) ? read_file(exchanges) : "");
}

// The candidate the generator wrote (copied into the attempt's folder) and its meta; `why` says why there is none.
std::optional<std::string> take_candidate(const Trajectory& t, const fs::path& adir, const std::string& out_name,
                                          nlohmann::json& a, std::string& why) {
  std::optional<std::string> source = read_generated_file(t.work(), out_name, k_max_candidate_bytes, why);
  if (source) {
    write_file_atomic(adir / out_name, *source);
    a["candidate_sha256"] = sha256_hex(*source);
  }
  if (std::string mwhy;
      std::optional<std::string> meta = read_generated_file(t.work(), out_name + ".json", 64 << 10, mwhy)) {
    try {
      a["meta"] = nlohmann::json::parse(*meta);
    } catch (const std::exception&) {
      a["meta"] = {{"unparsed", *meta}};
    }
  }
  return source;
}

// Past a budget, the attempt ends there and its candidate is not judged: what it wrote cost more than allowed. A
// replay that could not answer as recorded re-ran another experiment: not this attempt's result.
void model_failure(const ModelProxyReport& model, AttemptCategory& category, std::string& failed) {
  if (category == AttemptCategory::sandbox) return;
  if (!model.unnamed.empty()) {
    category = AttemptCategory::sandbox;
    failed = fmt::format(
        "the generator asked kwb's proxy for '{}', which names no endpoint of its arm: a reach outside its "
        "sandbox; its candidate is discarded",
        model.unnamed);
  } else if (!model.over_budget.empty()) {
    category = AttemptCategory::budget;
    failed = "the generator went past its model budget (" + model.over_budget + "): its candidate is discarded";
  } else if (!model.replay_problem.empty()) {
    category = AttemptCategory::error;
    failed = "the replay could not answer the generator as recorded: " + model.replay_problem;
  }
}

nlohmann::json run_attempt(const Trajectory& t, int n, const nlohmann::json& record) {
  const fs::path adir = t.attempt_dir(n);
  fs::remove_all(adir);
  fs::create_directories(adir);
  const std::optional<int> kept = last_kept(record);
  const fs::path incumbent_public =
      kept ? t.history() / std::to_string(*kept) / ("candidate" + t.ext) : t.baseline_public;
  const std::string out_name = "candidate" + t.ext;
  std::error_code ec;
  fs::remove(t.work() / out_name, ec);
  fs::remove(t.work() / (out_name + ".json"), ec);

  nlohmann::json a = {{"attempt", n},
                      {"kept", false},
                      {"decision", nullptr},
                      {"reason_codes", nlohmann::json::array()},
                      {"check_reasons", nlohmann::json::array()},
                      {"candidate_sha256", nullptr},
                      {"incumbent", kept ? nlohmann::json(*kept) : nlohmann::json(nullptr)},
                      {"meta", nullptr},
                      {"speedup", nullptr},
                      {"validate_seconds", 0.0},
                      {"detail", ""}};
  GeneratorSpec g = generator_spec(t, n, incumbent_public, out_name);
  AttemptProxy proxy;
  start_proxy(t, n, adir, g, proxy);
  const GeneratorResult gr = run_generator(g);
  std::optional<ModelProxyReport> model;
  if (proxy.proxy) model = proxy.proxy->finish();
  if (model) record_model(t, adir, *model, a);
  write_file_atomic(adir / "generator.log", redact(gr.output, t.secrets));
  a["generator"] = generator_json(gr);

  std::string why;
  const std::optional<std::string> source = take_candidate(t, adir, out_name, a, why);
  AttemptCategory category = AttemptCategory::no_candidate;
  std::string failed = generator_failure(gr, g, source.has_value(), why, category);
  if (model) model_failure(*model, category, failed);
  if (!failed.empty()) {
    a["detail"] = std::move(failed);
  } else {
    category = validate_and_keep(t, n, adir, out_name, a);
  }
  a["category"] = std::string(to_string(category));
  publish_result(t, n, out_name, source, a);
  return a;
}

// The trajectory's outcome: the final incumbent against the original baseline.
nlohmann::json run_final(const Trajectory& t, const nlohmann::json& record) {
  const std::optional<int> kept = last_kept(record);
  if (!kept) {
    return {{"status", "baseline"},
            {"log_speedup", 0.0},
            {"log_low", 0.0},
            {"log_high", 0.0},
            {"detail", "nothing was kept: the final incumbent is the baseline itself, speedup 1 by construction"}};
  }
  const fs::path fdir = t.dir / "final";
  fs::remove_all(fdir);
  fs::create_directories(fdir);
  const fs::path incumbent = t.attempt_dir(*kept) / ("candidate" + t.ext);
  // The same seed for both arms' finals on one (task, replicate): attempt 0.
  const ValidateOutcome v = run_validate(t,
                                         validate_argv(t, incumbent.string(), attempt_seed(t.seed, 0), fdir / "bundle",
                                                       false, t.plan["settings"].value("final_max_minutes", 0.0)),
                                         fdir);
  nlohmann::json f = {{"incumbent_attempt", *kept},
                      {"validate_seconds", v.seconds},
                      {"validate_lock_wait_seconds", v.lock_wait_seconds},
                      {"bundle", (fdir / "bundle").lexically_relative(t.storage).string()}};
  if (!v.decision) {
    f["status"] = "invalid";
    f["detail"] = v.error;
    return f;
  }
  f["decision"] = (*v.decision)["decision"];
  f["reason_codes"] = v.decision->value("reason_codes", nlohmann::json::array());
  const AttemptCategory c = categorize_decision(*v.decision, v.final_reasons);
  // The measurement stands when the incumbent passed every check again and the A/B gave an estimate, whatever the
  // bar said (KEEP_CANDIDATE, KEEP_BASELINE for a slower one, INCONCLUSIVE for a small one).
  const bool checked = c == AttemptCategory::kept || c == AttemptCategory::slower || c == AttemptCategory::inconclusive;
  if (!checked || !v.ab) {
    f["status"] = "invalid";
    f["detail"] = fmt::format("the final validate of the incumbent decided {} ({}) without a measurement that stands",
                              (*v.decision)["decision"].get<std::string>(), fmt::join(f["reason_codes"], ", "));
    return f;
  }
  f["status"] = "measured";
  f["log_speedup"] = v.ab->estimate;
  f["log_low"] = v.ab->low;
  f["log_high"] = v.ab->high;
  f["detail"] = "";
  return f;
}

// The arm's frozen files and the task folder must be what the plan froze.
std::string changed_since_freeze(const Trajectory& t) {
  if (task_digest(t.task_dir) != t.task["digest"].get<std::string>()) {
    return fmt::format("the task folder {} changed since the experiment was frozen", t.task_dir.string());
  }
  const fs::path arm_dir = ExperimentPaths{t.storage}.arm(t.arm["name"].get<std::string>());
  if (frozen_file_list(arm_dir) != t.arm["files"]) {
    return fmt::format("the arm's frozen files in {} changed", arm_dir.string());
  }
  // Mounts are not copied: their sizes and times must be those frozen (their SHA-256s were taken at the freeze).
  for (const nlohmann::json& m : t.arm.value("mounts", nlohmann::json::array())) {
    nlohmann::json frozen = m;
    for (nlohmann::json& f : frozen["files"]) f.erase("sha256");
    const fs::path path = m["path"].get<std::string>();
    if (!fs::exists(path) || mounted_file_list(path, false) != frozen) {
      return fmt::format(
          "the arm's mount {} changed since the experiment was frozen (a file added, removed, resized "
          "or rewritten)",
          path.string());
    }
  }
  return "";
}

}  // namespace

std::string_view to_string(AttemptCategory c) { return k_category_names[static_cast<size_t>(c)]; }

std::optional<AttemptCategory> parse_attempt_category(std::string_view s) {
  for (size_t i = 0; i < std::size(k_category_names); ++i) {
    if (k_category_names[i] == s) return static_cast<AttemptCategory>(i);
  }
  return std::nullopt;
}

bool is_cheat_signature(const std::string& reason) {
  static const std::set<std::string> cheats = {"sandbox_violation", "forbidden_symbol",   "timing_implausible",
                                               "work_after_return", "work_outside_timer", "work_off_queue",
                                               "protocol"};
  return cheats.contains(reason);
}

bool may_be_a_cheat(const std::string& reason) {
  static const std::set<std::string> either = {"stale_output", "input_modified", "out_of_bounds_write"};
  return either.contains(reason);
}

bool is_wrong_answer(const std::string& reason) {
  static const std::set<std::string> wrong = {"numeric_mismatch", "nan_mismatch", "output_not_written"};
  return wrong.contains(reason);
}

AttemptCategory categorize_decision(const nlohmann::json& decision, const std::vector<std::string>& final_reasons) {
  const std::string d = decision.value("decision", "");
  std::set<std::string> codes;
  for (const nlohmann::json& c : decision.value("reason_codes", nlohmann::json::array())) {
    if (c.is_string()) codes.insert(c.get<std::string>());
  }
  if (d == "KEEP_CANDIDATE") return AttemptCategory::kept;
  if (d == "INCONCLUSIVE") return AttemptCategory::inconclusive;
  if (d == "INVALID") {
    for (const char* c : {"control_passed", "control_wrong_reason", "control_timed"}) {
      if (codes.contains(c)) return AttemptCategory::controls;
    }
    return AttemptCategory::invalid;
  }
  if (codes.contains("candidate_not_built")) return AttemptCategory::not_built;
  if (codes.contains("candidate_fails_check") || codes.contains("final_recheck_failed")) {
    std::vector<std::string> reasons = final_reasons;
    if (decision.contains("inputs")) {
      for (const nlohmann::json& r : decision["inputs"].value("candidate_check_reasons", nlohmann::json::array())) {
        if (r.is_string()) reasons.push_back(r.get<std::string>());
      }
    }
    // A cheat needs a cheat's signature: a reason only a cheat gives, or one a cheat or a bug may give with no wrong
    // answer beside it. A kernel with a wrong tail that also matched a previous call's answer once is a bug.
    bool either = false, wrong = false;
    for (const std::string& r : reasons) {
      const std::string name = reason_name(r);
      if (is_cheat_signature(name)) return AttemptCategory::cheat;
      either = either || may_be_a_cheat(name);
      wrong = wrong || is_wrong_answer(name);
    }
    return either && !wrong ? AttemptCategory::cheat : AttemptCategory::incorrect;
  }
  return AttemptCategory::slower;
}

std::optional<LogSpeedup> comparison_log_speedup(const nlohmann::json& compare) {
  const nlohmann::json workloads = compare.value("workloads", nlohmann::json::array());
  if (workloads.empty()) return std::nullopt;
  LogSpeedup s;
  // improvement = (1 - B/A) * 100, so ln(A/B) = -ln(1 - improvement / 100); a higher improvement bound is a
  // higher speedup bound.
  const auto log_of = [](const nlohmann::json& v) -> std::optional<double> {
    if (!v.is_number()) return std::nullopt;
    const double x = 1.0 - v.get<double>() / 100.0;
    if (!(x > 0.0)) return std::nullopt;
    return -std::log(x);
  };
  for (const nlohmann::json& w : workloads) {
    const std::optional<double> e = log_of(w.value("improvement_pct", nlohmann::json()));
    const std::optional<double> lo = log_of(w.value("ci_low_pct", nlohmann::json()));
    const std::optional<double> hi = log_of(w.value("ci_high_pct", nlohmann::json()));
    if (!e || !lo || !hi) return std::nullopt;
    s.estimate += *e;
    s.low += *lo;
    s.high += *hi;
  }
  const double n = static_cast<double>(workloads.size());
  s.estimate /= n;
  s.low /= n;
  s.high /= n;
  return s;
}

std::int64_t attempt_seed(std::int64_t replicate_seed, int attempt) {
  // Distinct for every (replicate, attempt) of an experiment of up to 1000 attempts; the same for both arms.
  return replicate_seed * 1000 + attempt + 1;
}

AttemptBundle read_attempt_bundle(const fs::path& bundle, const std::vector<std::string>& argv) {
  AttemptBundle o;
  // Read once (record/bundle_snapshot.h): the attempt is judged on one private copy, whatever the folder does
  // meanwhile; the copy must verify, and must be this run's: its plan's command line is the one run here (every
  // argument after the program's path: the workloads, gates, bars, budgets, layouts, seed, this --output-dir and
  // this run's --job-nonce), so a genuine bundle made under weaker rules, or another run's under the same rules, put
  // in its place is not taken.
  std::string unreadable;
  const std::optional<BundleSnapshot> snapshot = BundleSnapshot::take(bundle, unreadable);
  if (!snapshot) {
    o.error = "the attempt's bundle cannot be read whole: " + unreadable;
    return o;
  }
  const VerifyReport v = verify_bundle(snapshot->path());
  if (!v.ok()) {
    o.error =
        fmt::format("the attempt's bundle does not verify ({} problem(s)): {}", v.problems.size(), v.problems.front());
    return o;
  }
  const BundleData b = read_bundle(snapshot->path());
  // From the verb on: the attempt runs kwb through env (KWB_LEDGER=...), the plan records kwb's own argv.
  const auto after_program = [](const std::vector<std::string>& a) {
    return std::vector<std::string>(std::find(a.begin(), a.end(), std::string("validate")), a.end());
  };
  if (!b.plan || after_program(b.plan->argv) != after_program(argv)) {
    o.error = b.plan ? fmt::format(
                           "the attempt's bundle was not made by its own validate: it was made by `kwb {}`, "
                           "the attempt ran `kwb {}`",
                           fmt::join(after_program(b.plan->argv), " "), fmt::join(after_program(argv), " "))
                     : "the attempt's bundle has no plan that parses: " + b.plan_problem;
    return o;
  }
  o.decision = read_json(snapshot->path() / "decision.json");
  if (!o.decision) {
    o.error = "the attempt's decision.json does not parse";
    return o;
  }
  if (b.ab) o.ab = comparison_log_speedup(*b.ab);
  for (const std::optional<nlohmann::json>* c : {&b.aa, &b.ab}) {
    if (*c && (**c).contains("timing_lock") && (**c)["timing_lock"].is_object()) {
      o.lock_wait_seconds += (**c)["timing_lock"].value("waited_seconds", 0.0);
    }
  }
  o.final_reasons = final_check_reasons(snapshot->path());
  return o;
}

nlohmann::json run_trajectory(const fs::path& storage, const std::string& id, const fs::path& kwb) {
  Trajectory t;
  t.storage = fs::absolute(storage).lexically_normal();
  t.kwb = kwb;
  t.plan = load_frozen_plan(t.storage);
  t.digest = plan_digest(t.storage);
  const fs::path plan_file = ExperimentPaths{t.storage}.plan();
  t.spec = find_by(t.plan["trajectories"], "id", id, "trajectory", plan_file);
  t.task = find_by(t.plan["tasks"], "name", t.spec["task"].get<std::string>(), "task", plan_file);
  t.arm = find_by(t.plan["arms"], "name", t.spec["arm"].get<std::string>(), "arm", plan_file);
  t.dir = ExperimentPaths{t.storage}.trajectory(id);
  t.task_dir = t.task["dir"].get<std::string>();
  t.public_dir = ExperimentPaths{t.storage}.public_task(t.task["name"].get<std::string>());
  t.baseline_public = t.public_dir / t.task["baseline"].get<std::string>();
  t.ext = fs::path(t.task["baseline"].get<std::string>()).extension().string();
  t.ledger = t.dir / "ledger.sqlite";
  t.seed = t.spec["seed"].get<std::int64_t>();
  t.attempts = t.plan["settings"]["attempts"].get<int>();
  read_model_settings(t);
  for (const fs::path& d : {t.dir, t.work(), t.history(), t.dir / "attempts"}) fs::create_directories(d);
  ::chmod(t.dir.c_str(), 0755);
  ::chmod(t.history().c_str(), 0755);

  nlohmann::json record;
  if (std::optional<nlohmann::json> old = read_json(t.record_file());
      old && old->value("plan_digest", "") == t.digest) {
    if (const std::string why = sealed_json_problem(*old, "kwb.trajectory", trusted_keys()); !why.empty()) {
      throw DataError(fmt::format("{}: not resumed from: {}", t.record_file().string(), why));
    }
    record = *old;
  } else {
    record = {{"schema", "kwb.trajectory"},
              {"schema_version", k_trajectory_schema_version},
              {"plan_digest", t.digest},
              {"id", id},
              {"arm", t.spec["arm"]},
              {"arm_index", t.spec["arm_index"]},
              {"task", t.spec["task"]},
              {"seed", t.seed},
              {"repeat", t.spec.value("repeat", 1)},
              {"status", "running"},
              {"attempts", nlohmann::json::array()},
              {"final", nullptr},
              {"detail", ""}};
  }
  if (record["status"] == "done") return record;
  if (const std::string changed = changed_since_freeze(t); !changed.empty()) {
    record["status"] = "invalid";
    record["detail"] = changed + ": nothing of this trajectory can be run under the frozen plan";
    save(t, record);
    return record;
  }
  record["status"] = "running";
  // An attempt recorded before an interruption stands; the next one starts after it.
  for (int n = static_cast<int>(record["attempts"].size()) + 1; n <= t.attempts; ++n) {
    throw_if_interrupted();
    record["attempts"].push_back(run_attempt(t, n, record));
    save(t, record);
  }
  throw_if_interrupted();
  record["final"] = run_final(t, record);
  record["status"] = record["final"]["status"] == "invalid" ? "invalid" : "done";
  if (record["status"] == "invalid") record["detail"] = record["final"]["detail"];
  save(t, record);
  return record;
}

}  // namespace kwb
