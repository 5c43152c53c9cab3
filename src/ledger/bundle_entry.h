// The ledger's side of evidence bundles: a validate run read back from its bundle (the bundle, not the process that
// wrote it, is what a ledger row stands for), and `kwb keep`, which promotes a bundle's candidate to incumbent.
#pragma once

#include "ledger/ledger.h"

#include <filesystem>
#include <string>

namespace kwb {

// The run a bundle records: task, backend, baseline and candidate (source and build key), decision and reasons,
// the A/B workloads' figures, the timing lock's holds, the plan digest. Error(invalid) naming the file when the
// bundle lacks what a row needs.
LedgerRun run_from_bundle(const std::filesystem::path& bundle);

struct KeepOutcome {
  int exit_code = 0;           // 0 kept; 1 refused (the reason says why); 3 the bundle does not verify
  std::string message;         // for people
  std::optional<Incumbent> kept;
  std::vector<std::string> problems;  // verify's, when it did not verify
};

// `kwb keep BUNDLE`: the bundle must verify (record/verify.h) and have decided KEEP_CANDIDATE against the current
// incumbent of its task and backend (generation 0: the task's own baseline); the candidate then becomes the next
// generation. Every attempt is recorded as a "keep" run.
KeepOutcome keep_bundle(Ledger& ledger, const std::filesystem::path& bundle);

}  // namespace kwb
