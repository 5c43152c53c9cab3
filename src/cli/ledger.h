// The verbs' use of the ledger (ledger/ledger.h): recording a finished run, and the incumbent as a baseline.
#pragma once

#include "cli/options.h"
#include "ledger/ledger.h"
#include "pipeline/compare.h"
#include "task/task.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kwb::cli {

// Records a finished run in the ledger (KWB_LEDGER, .kwb/ledger.sqlite): it finishes the row this process started
// with begin_ledger_run, else appends one. A ledger that cannot be written costs a warning on stderr, never the
// run's result or exit code.
void record_in_ledger(const LedgerRun& run);
// Every run leaves a row: check, compare and validate start theirs (outcome RUNNING) before any work. A row whose
// process is killed stays RUNNING and reads KILLED (Ledger::start); one whose verb ends on an error or a signal
// without recording a result is closed by close_pending_run (cli/run.cpp) with `outcome` (ERROR, INTERRUPTED).
void begin_ledger_run(const LedgerRun& run);
void close_pending_run(const std::string& outcome, const std::string& why);
// The same for a validate run, read back from its bundle (ledger/bundle_entry.h), recorded as `kind` ("validate",
// or "revalidate" for the incumbent against generation 0), with the manifest digest the run itself computed when it
// wrote the manifest (not re-read from the folder): what `kwb keep` later requires the bundle to still have.
// An interrupted validate's bundle (a plan, no decision) as a row with outcome INTERRUPTED and `why`.
void record_interrupted_bundle_in_ledger(const std::filesystem::path& bundle, const std::string& kind,
                                         const std::string& why);
void record_bundle_in_ledger(const std::filesystem::path& bundle, const std::string& kind,
                             const std::string& manifest_sha256);
// A compare run as the ledger records it.
LedgerRun ledger_run(const Task& task, const CompareReport& report);

// The current incumbent's source for `task` on `backend`, or nullopt when nothing was kept (the task's baseline is
// the incumbent then). DataError when the incumbent's source was changed or removed since it was kept.
std::optional<std::filesystem::path> incumbent_source(const Task& task, BackendKind backend);

// `kwb history --runs`'s table: one row per run, most recent first as given (id, kind, start and end, outcome, the
// candidate's source and identity, the first workload's estimate, the bundle), each further workload's estimate on a
// line of its own under it.
std::string runs_table(const std::vector<LedgerRun>& runs);

}  // namespace kwb::cli
