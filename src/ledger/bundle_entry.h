// The ledger's side of evidence bundles: a validate run read back from its bundle (the bundle, not the process that
// wrote it, is what a ledger row stands for), and `kwb keep`, which promotes a bundle's candidate to incumbent.
#pragma once

#include "ledger/ledger.h"
#include "record/verify.h"

#include <filesystem>
#include <string>

namespace kwb {

// The run a bundle records: task, backend, baseline and candidate (source and build key), decision and reasons,
// the A/B workloads' figures, the timing lock's holds, the plan digest. Error(invalid) naming the file when the
// bundle lacks what a row needs.
LedgerRun run_from_bundle(const std::filesystem::path& bundle);
// The row of a validate run that was interrupted (its bundle has a plan and no decision): outcome INTERRUPTED, with
// `why` (the signal and the stage) as its reason, so that a retry loop's stopped runs are rows too.
LedgerRun interrupted_run_from_bundle(const std::filesystem::path& bundle, const std::string& why);

// What `kwb verify` established beyond the bundle's own consistency: whether this machine's ledger recorded the run
// (a validate or revalidate row with this manifest digest, plan digest and decision), and whether a key this
// machine trusts signed it. Either makes the bundle authentic; without both it is "self-consistent only": its
// hashes agree, but anyone could have recomputed them after an edit.
struct Authenticity {
  bool authentic = false;
  std::optional<LedgerRun> recorded;  // the ledger's row of the run that wrote this bundle
  std::string ledger_detail;          // one sentence: what the ledger said, or why it was not consulted
  std::string summary;                // "authentic: ..." or "self-consistent only: ..."
};

// The validate or revalidate row whose manifest digest, plan digest and decision are the seal's; nullopt if none.
std::optional<LedgerRun> recorded_run(const Ledger& ledger, const BundleSeal& seal);

// `ledger` may be null (KWB_LEDGER=none, or no ledger file yet): only the signature can then make it authentic.
Authenticity authenticity(const VerifyReport& report, const Ledger* ledger);

struct KeepOutcome {
  // 0 kept; 1 refused (the reason says why); 3 the bundle does not verify; 77 the ledger has no record of the run
  // that wrote this bundle as it is (changed after the run, or not recorded here)
  int exit_code = 0;
  std::string message;         // for people
  std::optional<Incumbent> kept;
  std::vector<std::string> problems;  // verify's, when it did not verify
};

// `kwb keep BUNDLE`: the bundle must verify (record/verify.h), be the one this machine's ledger recorded at the end
// of its run (recorded_run: a signature alone is not enough, since the lineage is this ledger's), and have decided
// KEEP_CANDIDATE against the current
// incumbent of its task and backend (generation 0: the task's own baseline); the candidate then becomes the next
// generation. Every attempt is recorded as a "keep" run.
KeepOutcome keep_bundle(Ledger& ledger, const std::filesystem::path& bundle);

}  // namespace kwb
