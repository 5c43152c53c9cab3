// The ledger: what an optimization loop tried and what it kept (docs/agents.md). One SQLite database per task
// folder (KWB_LEDGER, else .kwb/ledger.sqlite in the task folder), in WAL mode, written in short transactions, so
// several kwb processes can record into it at once. Its schema carries a version (PRAGMA
// user_version) and is migrated forward when an older ledger is opened; a ledger of a newer kwb is refused.
//
// Two kinds of rows:
//   runs        every check, compare, validate and keep: the task, the backend, the arms' identities, the
//               outcome with its reasons, the per-workload figures, the timing lock's holds, and for validate the
//               plan digest, the bundle and its manifest's digest as the run computed it: `kwb verify` re-checks
//               the bundle, and `kwb keep` accepts only a bundle whose manifest, plan digest and decision match the
//               row its own run recorded (ledger/bundle_entry.h).
//   incumbents  per task and backend, the lineage of kept implementations: generation 0 is the task's baseline,
//               and each later one was kept (`kwb keep`) from a verified bundle that decided KEEP_CANDIDATE against
//               the generation before it.
#pragma once

#include "util/backend_kind.h"
#include "util/machine_key.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace kwb {

// The ledger of the task in `task_dir`: $KWB_LEDGER when set (the word "none" turns recording off: nullopt), else
// .kwb/ledger.sqlite in the task folder. The lineage is the task's, so it lives with the task: every loop that runs
// the task, started from whatever folder, reads and writes the same ledger. No task folder (""): $KWB_LEDGER only.
std::optional<std::filesystem::path> ledger_path(const std::filesystem::path& task_dir);
// KWB_LEDGER=none: nothing is recorded.
bool ledger_off();

// UTC as ISO 8601 with milliseconds (2026-12-01T22:15:19.123Z): now, and when this process started (a check or
// compare is one kwb process, so that is when its run started).
std::string utc_now_text();
const std::string& process_started_text();

// The lower bound `kwb history --runs --since TEXT` means, as UTC "YYYY-MM-DDTHH:MM:SS": TEXT is a date
// (2026-12-01, midnight UTC), a date and time (2026-12-01T22:15, 2026-12-01 22:15:19, an optional trailing Z), or
// a duration back from `now` (90s, 45m, 2h, 3d, 1w). UsageError naming --since and the accepted forms otherwise.
std::string since_bound(const std::string& text, std::time_t now);

struct LedgerArm {
  std::string role;  // baseline, candidate, A, B, implementation
  std::string source;
  std::string identity;  // the build key (BuildIdentity::key)
};

struct LedgerWorkload {
  std::string name;
  std::string verdict;
  std::optional<double> improvement_pct, ci_low_pct, ci_high_pct;
};

struct LedgerRun {
  int64_t id = 0;
  std::string kind;  // check, compare, validate, keep
  std::string task;
  std::string task_dir;
  BackendKind backend = BackendKind::cpu;
  std::string started;   // UTC, ISO 8601; record() writes process_started_text() for ""
  std::string finished;  // record() writes now for ""
  std::string outcome;   // check/compare verdict, validate decision, keep result
  std::vector<std::string> reasons;
  std::vector<LedgerArm> arms;
  std::vector<LedgerWorkload> workloads;
  // The timing lock's holds of this run's comparisons: [{acquired_unix_ns, released_unix_ns, waited_seconds}].
  nlohmann::json timing_holds = nlohmann::json::array();
  std::string plan_digest;
  std::string bundle;
  // validate and revalidate: the SHA-256 of the bundle's MANIFEST.sha256 as the run that wrote it computed it.
  std::string manifest_sha256;
  // validate and revalidate: "<public key hex>:<signature hex>", the machine key's Ed25519 signature of the row's
  // manifest digest, plan digest and decision (ledger/bundle_entry.h, ledger_seal_message); "" when no key could be
  // used. Only a row whose seal a trusted key made vouches for a bundle: a ledger file anyone can write is no proof.
  std::string seal;
};

struct Incumbent {
  std::string task;       // the lineage's key: the task's identity (task_identity, task/task.h)
  std::string task_name;  // the task's name when the generation was kept: a label, never a key
  BackendKind backend = BackendKind::cpu;
  int generation = 0;
  std::string identity;       // build key
  std::string source;         // where the source was when it was kept
  std::string source_sha256;  // what it held then
  std::string bundle;         // the bundle it was kept from; "" for generation 0
  std::string kept;           // UTC
  // Over the generation before it: per workload, and their geometric mean (0 for generation 0).
  std::vector<LedgerWorkload> workloads;
  double improvement_pct = 0.0;
  // Over generation 0: the product of every generation's (1 + improvement) - 1, each as measured against its parent.
  double cumulative_pct = 0.0;
  // "<public key hex>:<signature hex>": the machine key's signature of this row and of the seal of the generation
  // before it (Ledger::lineage checks the chain).
  std::string seal;
};

// Which runs Ledger::find_runs returns: each empty or unset field matches every run.
struct RunFilter {
  std::string task;
  std::optional<BackendKind> backend;
  std::vector<std::string> kinds;     // any of these
  std::vector<std::string> outcomes;  // any of these
  std::string since;                  // started at or after this UTC "YYYY-MM-DDTHH:MM:SS" (since_bound)
  std::optional<int64_t> limit;       // the most recent ones only
};

// The kinds of runs and the outcomes the ledger records, for the filters' checks and their error messages.
const std::vector<std::string>& run_kinds();
const std::vector<std::string>& run_outcomes();

class Ledger {
public:
  static constexpr int k_schema_version = 6;

  // Opens (creating it and its folder when missing) and migrates. Error(io_error) naming the file when it cannot be
  // opened, is not a kwb ledger, or was written by a newer kwb.
  static Ledger open(const std::filesystem::path& path);
  Ledger(Ledger&& other) noexcept;
  Ledger& operator=(Ledger&& other) noexcept;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
  ~Ledger();

  const std::filesystem::path& path() const { return m_path; }
  int schema_version() const;

  // Appends a finished run in one transaction; returns its id.
  int64_t record(const LedgerRun& run);
  // Every run leaves a row: `start` writes it before any work (outcome RUNNING, with this process's host, boot and
  // start), `finish` completes that row with the outcome. A row still RUNNING when its process is gone reads KILLED
  // (select_runs), so a loop that kills the runs that look bad leaves a trace of each.
  int64_t start(const LedgerRun& run);
  void finish(int64_t id, const LedgerRun& run);
  std::vector<LedgerRun> runs(const std::string& task, BackendKind backend) const;
  // Every run recorded with this manifest digest (none for ""), oldest first.
  std::vector<LedgerRun> runs_with_manifest(const std::string& manifest_sha256) const;
  // The runs the filter matches, most recent first.
  std::vector<LedgerRun> find_runs(const RunFilter& filter) const;

  // The lineage of a task on a backend, generation 0 first; empty when nothing was ever kept. `task` is the key: the
  // task's identity by content (Task::identity), so that a copy of the task under the same name with a case or a
  // control removed, or the task after it changed, has a lineage of its own. Every row's seal is checked, chained
  // from generation 0, against the keys this machine trusts: a row kwb keep did not write (inserted or edited with
  // sqlite3, or copied from another ledger) is Error(data_error) naming the row, never skipped.
  std::vector<Incumbent> lineage(const std::string& task, BackendKind backend) const;

  // The lineages kept under `task_name` on `backend` whose key is not `task` (the task as it was before it changed,
  // or another task of that name): each one's key and its last generation as stored, unchecked (for a notice only:
  // none of it becomes a baseline). Rows written before lineages were keyed by identity are keyed by the name.
  struct OtherLineage {
    std::string task;
    int generations = 0;
    std::string last_source;
  };
  std::vector<OtherLineage> other_lineages(const std::string& task_name, BackendKind backend,
                                           const std::string& task) const;

  // Keeps `candidate` as the next generation, in one transaction that first reads the lineage: `decided_against`
  // (the identity of the baseline the bundle decided against) must be the current incumbent's identity, or, when
  // nothing was kept yet, `generation0` (the task's baseline) must be it, which then becomes generation 0. The
  // candidate must not be in the lineage already. Returns the new incumbent, or the reason it was refused; a
  // candidate that is the current incumbent already is not refused: `already` is that incumbent, and nothing changes.
  struct Promotion {
    std::optional<Incumbent> kept;
    std::optional<Incumbent> already;
    std::string refused;
  };
  // The rows it writes are sealed with the machine key (util/machine_key.h); `task` is the lineage's key (see
  // lineage()), and the candidate's task_name its label.
  Promotion promote(const std::string& task, BackendKind backend, const std::string& decided_against,
                    const Incumbent& generation0, Incumbent candidate);

private:
  const SigningKey& key();  // the machine key, loaded on first use
  // promote's steps: generation 0 written and returned; one row of the lineage written (inside its transaction).
  Incumbent start_lineage(const std::string& task, BackendKind backend, const Incumbent& generation0,
                          const std::string& task_name);
  void insert_incumbent(const std::string& task, BackendKind backend, const Incumbent& row,
                        const std::string& workloads_json);
  explicit Ledger(std::filesystem::path path);
  void exec(const std::string& sql) const;
  void migrate();
  int64_t insert(const LedgerRun& run, bool running);  // inside the caller's transaction
  // `tail` follows the WHERE clause (its order and limit).
  std::vector<LedgerRun> select_runs(const std::string& where, const std::vector<std::string>& values,
                                     const std::string& tail = "ORDER BY id") const;

  std::filesystem::path m_path;
  sqlite3* m_db = nullptr;
  std::optional<SigningKey> m_key;
};

// Workload figures as JSON objects {name, verdict, improvement_pct, ci_low_pct, ci_high_pct} (a figure absent when
// unknown), and back; anything malformed is skipped.
nlohmann::json to_json(const std::vector<LedgerWorkload>& workloads);
std::vector<LedgerWorkload> workloads_from_json(const nlohmann::json& array);

// The geometric mean of the workloads' (1 + improvement/100), minus 1, in percent; 0 without figures.
double summary_improvement_pct(const std::vector<LedgerWorkload>& workloads);

}  // namespace kwb
