#include "ledger/ledger.h"

#include "util/error.h"
#include "util/machine_key.h"
#include "util/provenance.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sqlite3.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>

namespace kwb {

namespace {

// Each entry moves the schema from version i to i + 1. Append only: a released entry is never edited.
const char* const k_migrations[] = {
    // 0 -> 1
    R"SQL(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  task TEXT NOT NULL,
  task_dir TEXT NOT NULL,
  backend TEXT NOT NULL,
  started TEXT NOT NULL,
  finished TEXT NOT NULL,
  outcome TEXT NOT NULL,
  reasons TEXT NOT NULL,
  timing_holds TEXT NOT NULL,
  plan_digest TEXT NOT NULL,
  bundle TEXT NOT NULL,
  kwb_version TEXT NOT NULL,
  pid INTEGER NOT NULL
);
CREATE INDEX runs_task ON runs (task, backend);
CREATE TABLE arms (
  run_id INTEGER NOT NULL REFERENCES runs (id),
  role TEXT NOT NULL,
  source TEXT NOT NULL,
  identity TEXT NOT NULL
);
CREATE TABLE workloads (
  run_id INTEGER NOT NULL REFERENCES runs (id),
  name TEXT NOT NULL,
  verdict TEXT NOT NULL,
  improvement_pct REAL,
  ci_low_pct REAL,
  ci_high_pct REAL
);
CREATE TABLE incumbents (
  task TEXT NOT NULL,
  backend TEXT NOT NULL,
  generation INTEGER NOT NULL,
  identity TEXT NOT NULL,
  source TEXT NOT NULL,
  source_sha256 TEXT NOT NULL,
  bundle TEXT NOT NULL,
  kept TEXT NOT NULL,
  workloads TEXT NOT NULL,
  improvement_pct REAL NOT NULL,
  PRIMARY KEY (task, backend, generation)
);
)SQL",
    // 1 -> 2: the digest of a validate bundle's manifest as the run that wrote it computed it, so that keep accepts
    // only a bundle this machine recorded at the end of its own run (ledger/bundle_entry.h). Older rows have none.
    R"SQL(
ALTER TABLE runs ADD COLUMN manifest_sha256 TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_manifest ON runs (manifest_sha256);
)SQL",
    // 2 -> 3: each validate row's seal, the machine key's signature of its manifest digest, plan digest and
    // decision, so that a ledger file planted beside a bundle cannot vouch for it (ledger/bundle_entry.h). Older
    // rows have none and vouch for nothing.
    R"SQL(
ALTER TABLE runs ADD COLUMN seal TEXT NOT NULL DEFAULT '';
)SQL",
    // 3 -> 4: each incumbent row's seal, the machine key's signature of the row and of the seal of the generation
    // before it (a hash chain), so that a row inserted or edited with sqlite3 is never believed (lineage()). Older
    // rows have none: their lineage reads as broken, naming the row, until it is kept again.
    R"SQL(
ALTER TABLE incumbents ADD COLUMN seal TEXT NOT NULL DEFAULT '';
)SQL",
    // 4 -> 5: where a run's process lives (host, boot, its start in clock ticks since boot), so that a row started
    // and never finished reads KILLED once that process is gone (Ledger::start, select_runs). Older rows finished.
    R"SQL(
ALTER TABLE runs ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN boot_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN proc_start INTEGER NOT NULL DEFAULT 0;
)SQL",
    // 5 -> 6: lineages are keyed by the task's identity by content (task_identity: task.toml, the oracle, baselines
    // and controls), not its name: the `task` column of a new row holds the identity and `task_name` the
    // name as a label. Older rows keep the name as their key, which no identity reaches: a lineage starts anew, and
    // other_lineages() names the old one so the terminal can say so.
    R"SQL(
ALTER TABLE incumbents ADD COLUMN task_name TEXT NOT NULL DEFAULT '';
)SQL",
};
constexpr int k_known_versions = static_cast<int>(sizeof k_migrations / sizeof k_migrations[0]);
static_assert(k_known_versions == Ledger::k_schema_version);

// What an incumbent row's seal signs: every column the row holds, exactly as stored (the workloads as their JSON
// text, the improvement as the double it is), and the seal of the generation before it ("" for generation 0), so
// that no row can be inserted, edited, reordered or spliced in from another lineage.
std::string lineage_seal_message(const std::string& task, BackendKind backend, int64_t generation, const Incumbent& i,
                                 const std::string& workloads_json, double improvement_pct,
                                 const std::string& previous_seal) {
  return fmt::format(
      "kwb lineage seal v2\ntask {}\ntask_name {}\nbackend {}\ngeneration {}\nidentity {}\nsource {}\n"
      "source_sha256 {}\nbundle {}\nkept {}\nworkloads {}\nimprovement_pct {:.17g}\nprevious {}\n",
      task, i.task_name, to_string(backend), generation, i.identity, i.source, i.source_sha256, i.bundle, i.kept,
      workloads_json, improvement_pct, previous_seal);
}

// "rmsnorm (identity 1a2b3c4d5e6f)": a lineage as people know it, and its key.
std::string lineage_label(const std::string& task_name, const std::string& key) {
  if (task_name.empty()) return key;
  return fmt::format("{} (identity {})", task_name, key.substr(0, 12));
}

std::string seal_with(const SigningKey& key, const std::string& message) {
  return key.public_key() + ":" + key.sign(message);
}

// "" when `seal` is a trusted key's signature of `message`; else why not.
std::string seal_problem(const std::string& seal, const std::string& message, const TrustedKeys& keys) {
  if (seal.empty()) return "it has no seal";
  const size_t colon = seal.find(':');
  if (colon == std::string::npos) return "its seal is not <public key>:<signature>";
  const std::string key = seal.substr(0, colon);
  if (!keys.trusts(key)) return fmt::format("its seal was made by a key this machine does not trust ({})", key);
  if (!verify_signature(key, message, seal.substr(colon + 1))) {
    return "its seal does not match what it holds, or the generation before it";
  }
  return "";
}

// One prepared statement: bind by position (1-based), step, read columns.
class Statement {
public:
  Statement(sqlite3* db, const std::string& sql, const std::filesystem::path& path) : m_path(path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &m_stmt, nullptr) != SQLITE_OK) {
      throw Error(ExitCode::io_error, fmt::format("ledger {}: {}", path.string(), sqlite3_errmsg(db)));
    }
  }
  ~Statement() { sqlite3_finalize(m_stmt); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, const std::string& s) {
    sqlite3_bind_text(m_stmt, i, s.c_str(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, BackendKind b) { return bind(i, std::string(to_string(b))); }
  Statement& bind(int i, int64_t v) {
    sqlite3_bind_int64(m_stmt, i, v);
    return *this;
  }
  Statement& bind(int i, std::optional<double> v) {
    if (v && std::isfinite(*v)) {
      sqlite3_bind_double(m_stmt, i, *v);
    } else {
      sqlite3_bind_null(m_stmt, i);
    }
    return *this;
  }
  // true while there is a row.
  bool step() {
    const int rc = sqlite3_step(m_stmt);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(ExitCode::io_error,
                fmt::format("ledger {}: {}", m_path.string(), sqlite3_errmsg(sqlite3_db_handle(m_stmt))));
  }
  std::string text(int col) const {
    const auto* p = sqlite3_column_text(m_stmt, col);
    return p == nullptr ? "" : reinterpret_cast<const char*>(p);
  }
  int64_t integer(int col) const { return sqlite3_column_int64(m_stmt, col); }
  std::optional<double> real(int col) const {
    if (sqlite3_column_type(m_stmt, col) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_double(m_stmt, col);
  }

private:
  sqlite3_stmt* m_stmt = nullptr;
  std::filesystem::path m_path;
};

std::string utc_text(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", buf, ms % 1000);
}

// Read when the program is loaded, before main: a check or compare is one kwb process, so this is its start.
const std::string g_process_started = utc_text(std::chrono::system_clock::now());

std::string seconds_text(std::time_t t) {
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

// Which process a row's run is: the host, the boot and the process's start time (clock ticks after boot, field 22
// of /proc/PID/stat), which together never name two processes, unlike a pid.
struct ProcessMark {
  std::string host, boot_id;
  int64_t start = 0;
};

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The start of process `pid` in ticks after boot; 0 when there is no such process (or it cannot be read).
int64_t process_start_ticks(int64_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  const size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoll(field.c_str(), nullptr, 10);
  }
  return 0;
}

const ProcessMark& this_process() {
  static const ProcessMark mark = [] {
    ProcessMark m;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) m.host = host;
    m.boot_id = first_line("/proc/sys/kernel/random/boot_id");
    m.start = process_start_ticks(::getpid());
    return m;
  }();
  return mark;
}

// A RUNNING row whose process is gone: on this host, another boot, or no process of that pid with that start.
bool process_gone(int64_t pid, const std::string& host, const std::string& boot_id, int64_t start) {
  const ProcessMark& me = this_process();
  if (host.empty() || host != me.host) return false;  // another machine's run: not ours to call
  if (boot_id != me.boot_id) return true;
  return start == 0 || process_start_ticks(pid) != start;
}

// A write transaction that takes the write lock at once (BEGIN IMMEDIATE), so a read-then-write (promote) cannot
// interleave with another process's; rolled back unless committed.
class WriteTransaction {
public:
  explicit WriteTransaction(const std::function<void(const std::string&)>& exec) : m_exec(exec) {
    m_exec("BEGIN IMMEDIATE");
  }
  ~WriteTransaction() {
    if (!m_done) {
      try {
        m_exec("ROLLBACK");
      } catch (...) {
      }
    }
  }
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;
  void commit() {
    m_exec("COMMIT");
    m_done = true;
  }

private:
  std::function<void(const std::string&)> m_exec;
  bool m_done = false;
};

}  // namespace

std::optional<std::filesystem::path> ledger_path(const std::filesystem::path& task_dir) {
  if (const char* env = std::getenv("KWB_LEDGER"); env != nullptr && *env != '\0') {
    if (std::string(env) == "none") return std::nullopt;
    return std::filesystem::absolute(env).lexically_normal();
  }
  if (task_dir.empty()) return std::nullopt;
  return std::filesystem::absolute(task_dir).lexically_normal() / ".kwb" / "ledger.sqlite";
}

bool ledger_off() {
  const char* env = std::getenv("KWB_LEDGER");
  return env != nullptr && std::string(env) == "none";
}

std::string utc_now_text() { return utc_text(std::chrono::system_clock::now()); }

const std::string& process_started_text() { return g_process_started; }

std::string since_bound(const std::string& text, std::time_t now) {
  const auto refuse = [&text]() -> std::string {
    throw UsageError(
        fmt::format("--since {}: not a UTC date, date and time, or duration: give e.g. 2026-12-01, "
                    "2026-12-01T22:15, 2026-12-01T22:15:19Z, or a duration back from now such as 90s, "
                    "45m, 2h, 3d, 1w",
                    text));
  };
  // A duration: digits and one unit.
  if (text.size() >= 2 && std::isdigit(static_cast<unsigned char>(text[0])) &&
      text.find_first_not_of("0123456789") == text.size() - 1) {
    static const std::pair<char, int64_t> units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}, {'w', 604800}};
    for (const auto& [unit, seconds] : units) {
      if (text.back() != unit) continue;
      if (text.size() > 10) return refuse();  // more than 999999999 units: no ledger is that old
      return seconds_text(now - static_cast<std::time_t>(std::stoll(text.substr(0, text.size() - 1)) * seconds));
    }
    return refuse();
  }
  std::string t = text;
  if (!t.empty() && (t.back() == 'Z' || t.back() == 'z')) t.pop_back();
  if (t.size() > 10 && t[10] == ' ') t[10] = 'T';
  static const char* const forms[] = {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"};
  for (const char* form : forms) {
    std::tm tm{};
    const char* end = ::strptime(t.c_str(), form, &tm);
    if (end == nullptr || *end != '\0') continue;
    // Normalized through timegm, so that 2026-02-30 is refused rather than read as March 2.
    std::tm check = tm;
    const std::time_t secs = ::timegm(&check);
    if (check.tm_mday != tm.tm_mday || check.tm_mon != tm.tm_mon) return refuse();
    return seconds_text(secs);
  }
  return refuse();
}

const std::vector<std::string>& run_kinds() {
  static const std::vector<std::string> kinds = {"check", "compare", "validate", "revalidate", "keep"};
  return kinds;
}

const std::vector<std::string>& run_outcomes() {
  // check: PASS FAIL BUILD_FAILED; compare: its verdict; validate: its decision; keep: KEPT, ALREADY_INCUMBENT,
  // REFUSED; a stopped compare or validate: INTERRUPTED; a run not finished yet: RUNNING, one whose process ended
  // without finishing it: KILLED (derived when read; the row says RUNNING); one that ended on an error: ERROR.
  static const std::vector<std::string> outcomes = {"PASS",           "FAIL",          "SAME",    "BUILD_FAILED",
                                                    "INCONCLUSIVE",   "INVALID",       "REFUSED", "INTERRUPTED",
                                                    "KEEP_CANDIDATE", "KEEP_BASELINE", "KEPT",    "ALREADY_INCUMBENT",
                                                    "RUNNING",        "KILLED",        "ERROR"};
  return outcomes;
}

nlohmann::json to_json(const std::vector<LedgerWorkload>& ws) {
  nlohmann::json a = nlohmann::json::array();
  for (const LedgerWorkload& w : ws) {
    nlohmann::json j = {{"name", w.name}, {"verdict", w.verdict}};
    if (w.improvement_pct) j["improvement_pct"] = *w.improvement_pct;
    if (w.ci_low_pct) j["ci_low_pct"] = *w.ci_low_pct;
    if (w.ci_high_pct) j["ci_high_pct"] = *w.ci_high_pct;
    a.push_back(j);
  }
  return a;
}

std::vector<LedgerWorkload> workloads_from_json(const nlohmann::json& a) {
  std::vector<LedgerWorkload> out;
  if (!a.is_array()) return out;
  for (const nlohmann::json& j : a) {
    if (!j.is_object()) continue;
    LedgerWorkload w;
    w.name = j.value("name", "");
    w.verdict = j.value("verdict", "");
    auto num = [&](const char* k) -> std::optional<double> {
      if (auto it = j.find(k); it != j.end() && it->is_number()) return it->get<double>();
      return std::nullopt;
    };
    w.improvement_pct = num("improvement_pct");
    w.ci_low_pct = num("ci_low_pct");
    w.ci_high_pct = num("ci_high_pct");
    out.push_back(std::move(w));
  }
  return out;
}

double summary_improvement_pct(const std::vector<LedgerWorkload>& workloads) {
  double log_sum = 0.0;
  int n = 0;
  for (const LedgerWorkload& w : workloads) {
    if (!w.improvement_pct || *w.improvement_pct <= -100.0) continue;
    log_sum += std::log1p(*w.improvement_pct / 100.0);
    ++n;
  }
  return n == 0 ? 0.0 : std::expm1(log_sum / n) * 100.0;
}

Ledger::Ledger(std::filesystem::path path) : m_path(std::move(path)) {}

Ledger::Ledger(Ledger&& other) noexcept
    : m_path(std::move(other.m_path)), m_db(std::exchange(other.m_db, nullptr)), m_key(std::move(other.m_key)) {}

Ledger& Ledger::operator=(Ledger&& other) noexcept {
  if (this != &other) {
    if (m_db != nullptr) sqlite3_close(m_db);
    m_path = std::move(other.m_path);
    m_db = std::exchange(other.m_db, nullptr);
    m_key = std::move(other.m_key);
  }
  return *this;
}

Ledger::~Ledger() {
  if (m_db != nullptr) sqlite3_close(m_db);
}

void Ledger::exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err != nullptr ? err : sqlite3_errmsg(m_db);
    sqlite3_free(err);
    throw Error(ExitCode::io_error, fmt::format("ledger {}: {}", m_path.string(), msg));
  }
}

Ledger Ledger::open(const std::filesystem::path& path) {
  Ledger l(path);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (sqlite3_open_v2(path.c_str(), &l.m_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW,
                      nullptr) != SQLITE_OK) {
    const std::string msg = l.m_db != nullptr ? sqlite3_errmsg(l.m_db) : "out of memory";
    throw Error(ExitCode::io_error, fmt::format("ledger {}: cannot open it: {} (set KWB_LEDGER to another file, or "
                                                "KWB_LEDGER=none to record nothing)",
                                                path.string(), msg));
  }
  // Writers wait for each other instead of failing: a transaction here is milliseconds long.
  sqlite3_busy_timeout(l.m_db, 30'000);
  l.exec("PRAGMA journal_mode = WAL");
  l.exec("PRAGMA foreign_keys = ON");
  l.migrate();
  return l;
}

int Ledger::schema_version() const {
  Statement s(m_db, "PRAGMA user_version", m_path);
  s.step();
  return static_cast<int>(s.integer(0));
}

void Ledger::migrate() {
  WriteTransaction tx([this](const std::string& sql) { exec(sql); });
  const int v = schema_version();
  if (v > k_known_versions) {
    throw Error(ExitCode::io_error, fmt::format("ledger {}: schema version {} was written by a newer kwb (this one "
                                                "knows up to {}): use that kwb, or another KWB_LEDGER",
                                                m_path.string(), v, k_known_versions));
  }
  if (v == 0) {
    // A new file, or someone else's SQLite database: only an empty one may become a ledger.
    Statement s(m_db, "SELECT count(*) FROM sqlite_master", m_path);
    s.step();
    if (s.integer(0) != 0) {
      throw Error(ExitCode::io_error, fmt::format("ledger {}: an SQLite database that is not a kwb ledger (it has "
                                                  "tables and no ledger schema version); set KWB_LEDGER to another "
                                                  "file",
                                                  m_path.string()));
    }
  }
  for (int i = v; i < k_known_versions; ++i) exec(k_migrations[i]);
  if (v < k_known_versions) exec(fmt::format("PRAGMA user_version = {}", k_known_versions));
  tx.commit();
}

namespace {

// The run's arms and workloads, as rows of their tables for run `id`.
void insert_children(sqlite3* db, const std::filesystem::path& path, int64_t id, const LedgerRun& run);

}  // namespace

int64_t Ledger::record(const LedgerRun& run) {
  WriteTransaction tx([this](const std::string& sql) { exec(sql); });
  const int64_t id = insert(run, false);
  tx.commit();
  return id;
}

int64_t Ledger::start(const LedgerRun& run) {
  WriteTransaction tx([this](const std::string& sql) { exec(sql); });
  const int64_t id = insert(run, true);
  tx.commit();
  return id;
}

void Ledger::finish(int64_t id, const LedgerRun& run) {
  WriteTransaction tx([this](const std::string& sql) { exec(sql); });
  Statement up(m_db,
               "UPDATE runs SET kind = ?, task = ?, task_dir = ?, backend = ?, finished = ?, outcome = ?, reasons = ?, "
               "timing_holds = ?, plan_digest = ?, bundle = ?, manifest_sha256 = ?, seal = ? WHERE id = ? AND "
               "outcome = 'RUNNING'",
               m_path);
  up.bind(1, run.kind).bind(2, run.task).bind(3, run.task_dir).bind(4, run.backend);
  up.bind(5, run.finished.empty() ? utc_now_text() : run.finished).bind(6, run.outcome);
  up.bind(7, nlohmann::json(run.reasons).dump()).bind(8, run.timing_holds.dump()).bind(9, run.plan_digest);
  up.bind(10, run.bundle).bind(11, run.manifest_sha256).bind(12, run.seal).bind(13, id);
  up.step();
  if (sqlite3_changes(m_db) != 1) {
    // The started row is gone or finished already (a ledger edited meanwhile): the run is still recorded, whole.
    insert(run, false);
  } else {
    exec(fmt::format("DELETE FROM arms WHERE run_id = {}; DELETE FROM workloads WHERE run_id = {};", id, id));
    insert_children(m_db, m_path, id, run);
  }
  tx.commit();
}

int64_t Ledger::insert(const LedgerRun& run, bool running) {
  Statement ins(m_db,
                "INSERT INTO runs (kind, task, task_dir, backend, started, finished, outcome, reasons, timing_holds, "
                "plan_digest, bundle, kwb_version, pid, manifest_sha256, seal, host, boot_id, proc_start) VALUES (?, "
                "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                m_path);
  ins.bind(1, run.kind).bind(2, run.task).bind(3, run.task_dir).bind(4, run.backend);
  ins.bind(5, run.started.empty() ? process_started_text() : run.started);
  ins.bind(6, running ? std::string() : run.finished.empty() ? utc_now_text() : run.finished);
  ins.bind(7, running ? std::string("RUNNING") : run.outcome);
  ins.bind(8, nlohmann::json(run.reasons).dump()).bind(9, run.timing_holds.dump());
  const Provenance built = build_provenance();
  ins.bind(10, run.plan_digest).bind(11, run.bundle);
  ins.bind(12,
           fmt::format("{} {}{}", KWB_VERSION, built.git_sha, built.git_dirty.value_or(false) ? " (modified)" : ""));
  ins.bind(13, static_cast<int64_t>(::getpid())).bind(14, run.manifest_sha256).bind(15, run.seal);
  const ProcessMark& me = this_process();
  ins.bind(16, me.host).bind(17, me.boot_id).bind(18, me.start);
  ins.step();
  const int64_t id = sqlite3_last_insert_rowid(m_db);
  insert_children(m_db, m_path, id, run);
  return id;
}

namespace {

void insert_children(sqlite3* db, const std::filesystem::path& path, int64_t id, const LedgerRun& run) {
  for (const LedgerArm& a : run.arms) {
    Statement s(db, "INSERT INTO arms (run_id, role, source, identity) VALUES (?, ?, ?, ?)", path);
    s.bind(1, id).bind(2, a.role).bind(3, a.source).bind(4, a.identity);
    s.step();
  }
  for (const LedgerWorkload& w : run.workloads) {
    Statement s(db,
                "INSERT INTO workloads (run_id, name, verdict, improvement_pct, ci_low_pct, ci_high_pct) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                path);
    s.bind(1, id).bind(2, w.name).bind(3, w.verdict).bind(4, w.improvement_pct).bind(5, w.ci_low_pct);
    s.bind(6, w.ci_high_pct);
    s.step();
  }
}

}  // namespace

std::vector<LedgerRun> Ledger::runs(const std::string& task, BackendKind backend) const {
  return select_runs("task = ? AND backend = ?", {task, std::string(to_string(backend))});
}

std::vector<LedgerRun> Ledger::runs_with_manifest(const std::string& manifest_sha256) const {
  if (manifest_sha256.empty()) return {};
  return select_runs("manifest_sha256 = ?", {manifest_sha256});
}

std::vector<LedgerRun> Ledger::find_runs(const RunFilter& f) const {
  std::vector<std::string> where = {"1"};
  std::vector<std::string> values;
  const auto any_of = [&](const char* column, const std::vector<std::string>& options) {
    if (options.empty()) return;
    std::string marks;
    for (const std::string& o : options) {
      marks += marks.empty() ? "?" : ", ?";
      values.push_back(o);
    }
    where.push_back(fmt::format("{} IN ({})", column, marks));
  };
  if (!f.task.empty()) any_of("task", {f.task});
  if (f.backend) any_of("backend", {std::string(to_string(*f.backend))});
  any_of("kind", f.kinds);
  // KILLED is a RUNNING row whose process is gone: stored as RUNNING, told apart when read (select_runs).
  std::vector<std::string> stored = f.outcomes;
  for (std::string& o : stored) {
    if (o == "KILLED") o = "RUNNING";
  }
  any_of("outcome", stored);
  if (!f.since.empty()) {
    // Every start is written as YYYY-MM-DDTHH:MM:SS followed by a fraction and Z or by Z alone: its first 19
    // characters compare as the times do.
    where.push_back("substr(started, 1, 19) >= ?");
    values.push_back(f.since);
  }
  const bool derived = std::find(f.outcomes.begin(), f.outcomes.end(), "RUNNING") != f.outcomes.end() ||
                       std::find(f.outcomes.begin(), f.outcomes.end(), "KILLED") != f.outcomes.end();
  std::vector<LedgerRun> runs =
      select_runs(fmt::format("{}", fmt::join(where, " AND ")), values,
                  f.limit && !derived ? fmt::format("ORDER BY id DESC LIMIT {}", *f.limit) : "ORDER BY id DESC");
  if (derived) {
    std::erase_if(runs, [&](const LedgerRun& r) {
      return std::find(f.outcomes.begin(), f.outcomes.end(), r.outcome) == f.outcomes.end();
    });
    if (f.limit && runs.size() > static_cast<size_t>(*f.limit)) runs.resize(static_cast<size_t>(*f.limit));
  }
  return runs;
}

std::vector<LedgerRun> Ledger::select_runs(const std::string& where, const std::vector<std::string>& values,
                                           const std::string& tail) const {
  std::vector<LedgerRun> out;
  Statement s(m_db,
              "SELECT id, kind, task, task_dir, backend, started, finished, outcome, reasons, timing_holds, "
              "plan_digest, bundle, manifest_sha256, seal, pid, host, boot_id, proc_start FROM runs WHERE " +
                  where + " " + tail,
              m_path);
  for (size_t i = 0; i < values.size(); ++i) s.bind(static_cast<int>(i + 1), values[i]);
  while (s.step()) {
    LedgerRun r;
    r.id = s.integer(0);
    r.kind = s.text(1);
    r.task = s.text(2);
    r.task_dir = s.text(3);
    r.backend = parse_backend_field(s.text(4), m_path.string() + ": runs.backend");
    r.started = s.text(5);
    r.finished = s.text(6);
    r.outcome = s.text(7);
    const nlohmann::json reasons = nlohmann::json::parse(s.text(8), nullptr, false);
    if (reasons.is_array()) {
      for (const auto& x : reasons) {
        if (x.is_string()) r.reasons.push_back(x.get<std::string>());
      }
    }
    r.timing_holds = nlohmann::json::parse(s.text(9), nullptr, false);
    if (r.timing_holds.is_discarded()) r.timing_holds = nlohmann::json::array();
    r.plan_digest = s.text(10);
    r.bundle = s.text(11);
    r.manifest_sha256 = s.text(12);
    r.seal = s.text(13);
    if (r.outcome == "RUNNING" && process_gone(s.integer(14), s.text(15), s.text(16), s.integer(17))) {
      r.outcome = "KILLED";
      r.reasons.push_back(
          fmt::format("its process (pid {} on {}) ended without finishing the run: killed, or the "
                      "machine went down",
                      s.integer(14), s.text(15)));
    }
    Statement a(m_db, "SELECT role, source, identity FROM arms WHERE run_id = ? ORDER BY rowid", m_path);
    a.bind(1, r.id);
    while (a.step()) r.arms.push_back({a.text(0), a.text(1), a.text(2)});
    Statement w(m_db,
                "SELECT name, verdict, improvement_pct, ci_low_pct, ci_high_pct FROM workloads WHERE run_id = ? "
                "ORDER BY rowid",
                m_path);
    w.bind(1, r.id);
    while (w.step()) r.workloads.push_back({w.text(0), w.text(1), w.real(2), w.real(3), w.real(4)});
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Incumbent> Ledger::lineage(const std::string& task, BackendKind backend) const {
  std::vector<Incumbent> out;
  Statement s(m_db,
              "SELECT generation, identity, source, source_sha256, bundle, kept, workloads, improvement_pct, seal, "
              "task_name FROM incumbents WHERE task = ? AND backend = ? ORDER BY generation",
              m_path);
  s.bind(1, task).bind(2, backend);
  double cumulative = 1.0;
  std::string previous_seal;
  const TrustedKeys keys = trusted_keys();
  while (s.step()) {
    Incumbent i;
    i.task = task;
    i.backend = backend;
    const int64_t generation = s.integer(0);
    i.generation = static_cast<int>(generation);
    i.identity = s.text(1);
    i.source = s.text(2);
    i.source_sha256 = s.text(3);
    i.bundle = s.text(4);
    i.kept = s.text(5);
    const std::string workloads_json = s.text(6);
    i.workloads = workloads_from_json(nlohmann::json::parse(workloads_json, nullptr, false));
    i.improvement_pct = s.real(7).value_or(0.0);
    i.seal = s.text(8);
    i.task_name = s.text(9);
    // The chain: generations 0, 1, 2, ... each sealed by a trusted key over itself and the seal before it.
    std::string why = generation == static_cast<int64_t>(out.size())
                          ? seal_problem(i.seal,
                                         lineage_seal_message(task, backend, generation, i, workloads_json,
                                                              i.improvement_pct, previous_seal),
                                         keys)
                          : fmt::format("it is generation {} where generation {} should be", generation, out.size());
    if (!why.empty()) {
      throw Error(ExitCode::data_error,
                  fmt::format("ledger {}: the lineage of task {} on {} is broken at generation {} ({}): {}. kwb keep "
                              "seals every generation with this machine's key, chained to the one before, so this "
                              "row was written or changed by something else and no incumbent of this lineage is "
                              "believed. Restore the ledger from a copy, or delete the task's lineage (sqlite3 {} "
                              "\"DELETE FROM incumbents WHERE task = '{}' AND backend = '{}'\") and keep its "
                              "generations again from their bundles",
                              m_path.string(), lineage_label(i.task_name, task), backend, generation, i.source, why,
                              m_path.string(), task, to_string(backend)));
    }
    previous_seal = i.seal;
    cumulative *= 1.0 + i.improvement_pct / 100.0;
    i.cumulative_pct = (cumulative - 1.0) * 100.0;
    out.push_back(std::move(i));
  }
  return out;
}

std::vector<Ledger::OtherLineage> Ledger::other_lineages(const std::string& task_name, BackendKind backend,
                                                         const std::string& task) const {
  std::vector<OtherLineage> out;
  Statement s(m_db,
              "SELECT task, COUNT(*), (SELECT source FROM incumbents AS last WHERE last.task = i.task AND "
              "last.backend = i.backend ORDER BY generation DESC LIMIT 1) FROM incumbents AS i "
              "WHERE (task_name = ? OR task = ?) AND backend = ? AND task != ? GROUP BY task ORDER BY task",
              m_path);
  s.bind(1, task_name).bind(2, task_name).bind(3, backend).bind(4, task);
  while (s.step()) out.push_back({s.text(0), static_cast<int>(s.integer(1)), s.text(2)});
  return out;
}

const SigningKey& Ledger::key() {
  if (!m_key) m_key.emplace(machine_key());
  return *m_key;
}

namespace {

// A candidate already in the lineage (the same bundle kept twice, or its source validated again) says so first:
// that, not the age of its bundle, is why it is refused. As the current incumbent it is `already`, not refused.
std::optional<Ledger::Promotion> already_in(const std::vector<Incumbent>& line, const Incumbent& candidate,
                                            const std::string& task, BackendKind backend) {
  const Incumbent& current = line.back();
  for (const Incumbent& i : line) {
    if (i.identity != candidate.identity) continue;
    Ledger::Promotion p;
    if (i.generation == current.generation) {
      p.already = i;  // the state keep asks for holds already: not a refusal
    } else {
      p.refused = fmt::format(
          "this candidate is already generation {} of task {} on {}, and the incumbent is now "
          "generation {} ({}): an older generation is not kept again",
          i.generation, task, backend, current.generation, current.source);
    }
    return p;
  }
  return std::nullopt;
}

// Why a bundle decided against another baseline than the incumbent is not kept.
std::string stale_bundle(const std::vector<Incumbent>& line, const std::string& decided_against,
                         const std::string& task, BackendKind backend) {
  const Incumbent& current = line.back();
  int against = -1;
  for (const Incumbent& i : line) {
    if (i.identity == decided_against) against = i.generation;
  }
  if (against >= 0) {
    return fmt::format(
        "stale bundle: it decided against generation {} ({}), but the incumbent of task {} "
        "on {} is now generation {} ({}): validate the candidate against it (kwb validate "
        "--against incumbent)",
        against, line[static_cast<size_t>(against)].source, task, backend, current.generation, current.source);
  }
  return fmt::format(
      "the bundle decided against {}, which is not in the lineage of task {} on {} "
      "(the incumbent is generation {}, {}): validate against it (kwb validate "
      "--against incumbent)",
      decided_against.substr(0, 12), task, backend, current.generation, current.source);
}

}  // namespace

void Ledger::insert_incumbent(const std::string& task, BackendKind backend, const Incumbent& row,
                              const std::string& workloads_json) {
  Statement s(m_db,
              "INSERT INTO incumbents (task, backend, generation, identity, source, source_sha256, bundle, kept, "
              "workloads, improvement_pct, seal, task_name) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              m_path);
  s.bind(1, task).bind(2, backend).bind(3, static_cast<int64_t>(row.generation)).bind(4, row.identity);
  s.bind(5, row.source).bind(6, row.source_sha256).bind(7, row.bundle).bind(8, row.kept);
  s.bind(9, workloads_json).bind(10, std::optional<double>(row.improvement_pct)).bind(11, row.seal);
  s.bind(12, row.task_name);
  s.step();
}

Incumbent Ledger::start_lineage(const std::string& task, BackendKind backend, const Incumbent& generation0,
                                const std::string& task_name) {
  Incumbent g0 = generation0;
  g0.task_name = task_name;
  g0.generation = 0;
  g0.improvement_pct = 0.0;
  g0.workloads.clear();
  g0.bundle.clear();
  g0.kept = seconds_text(std::time(nullptr)) + "Z";
  g0.seal = seal_with(key(), lineage_seal_message(task, backend, 0, g0, "[]", 0.0, ""));
  insert_incumbent(task, backend, g0, "[]");
  return g0;
}

Ledger::Promotion Ledger::promote(const std::string& task, BackendKind backend, const std::string& decided_against,
                                  const Incumbent& generation0, Incumbent candidate) {
  WriteTransaction tx([this](const std::string& sql) { exec(sql); });
  std::vector<Incumbent> line = lineage(task, backend);
  Promotion p;
  if (line.empty()) {
    if (decided_against != generation0.identity) {
      p.refused = fmt::format(
          "nothing of task {} on {} has been kept yet, so its incumbent is the task's baseline "
          "({}), but this bundle decided against another baseline ({}): validate against the "
          "task's baseline (kwb validate --against incumbent)",
          task, backend, generation0.source, decided_against.substr(0, 12));
      return p;
    }
    line.push_back(start_lineage(task, backend, generation0, candidate.task_name));
  }
  if (std::optional<Promotion> known = already_in(line, candidate, task, backend)) return *known;
  const Incumbent& current = line.back();
  if (decided_against != current.identity) {
    p.refused = stale_bundle(line, decided_against, task, backend);
    return p;
  }
  candidate.task = task;
  candidate.backend = backend;
  candidate.generation = current.generation + 1;
  candidate.kept = seconds_text(std::time(nullptr)) + "Z";
  candidate.improvement_pct = summary_improvement_pct(candidate.workloads);
  if (!std::isfinite(candidate.improvement_pct)) candidate.improvement_pct = 0.0;  // stored as it is read back
  candidate.cumulative_pct =
      ((1.0 + current.cumulative_pct / 100.0) * (1.0 + candidate.improvement_pct / 100.0) - 1.0) * 100.0;
  const std::string workloads_json = to_json(candidate.workloads).dump();
  candidate.seal = seal_with(key(), lineage_seal_message(task, backend, candidate.generation, candidate, workloads_json,
                                                         candidate.improvement_pct, current.seal));
  insert_incumbent(task, backend, candidate, workloads_json);
  tx.commit();
  p.kept = std::move(candidate);
  return p;
}

}  // namespace kwb
