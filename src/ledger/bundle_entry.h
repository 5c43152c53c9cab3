// The ledger's side of evidence bundles: a validate run read back from its bundle (the bundle, not the process that
// wrote it, is what a ledger row stands for), and `kwb keep`, which promotes a bundle's candidate to incumbent.
#pragma once

#include "ledger/ledger.h"
#include "record/bundle_snapshot.h"
#include "record/verify.h"
#include "util/machine_key.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kwb {

// The run a bundle records: task, backend, baseline and candidate (source and build key), decision and reasons,
// the A/B workloads' figures, the timing lock's holds, the plan digest. Error(invalid) naming the file when the
// bundle lacks what a row needs.
LedgerRun run_from_bundle(const std::filesystem::path& bundle);
// The ledger of the task a bundle's plan names (ledger_path); with no readable plan, $KWB_LEDGER or none.
std::optional<std::filesystem::path> bundle_ledger_path(const std::filesystem::path& bundle);
// Where generation `generation` of `line` (Ledger::lineage) is to be read from: the file it was kept from, while that
// still holds what it held then; else the copy of it a bundle of the lineage holds (the bundle that kept it, or the
// next generation's, whose baseline it was), found by its build identity in the bundle's plan and used only when it
// hashes to the kept source. `note` (empty for the file itself) says that the copy is used and where it is.
// DataError naming the source, the copy it tried and why it does not stand in, and the fix.
struct IncumbentSource {
  std::filesystem::path path;
  std::string note;
};
IncumbentSource incumbent_source_file(const std::vector<Incumbent>& line, size_t generation);
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

// What a validate row's seal signs: its manifest digest, plan digest and decision, in a fixed text.
std::string ledger_seal_message(const BundleSeal& seal);
// A row's seal ("<public key>:<signature>") by `key`.
std::string seal_ledger_row(const SigningKey& key, const BundleSeal& seal);
// Whether `row_seal` is a signature of `seal`'s message by a key in `keys`.
bool ledger_seal_verifies(const std::string& row_seal, const BundleSeal& seal, const TrustedKeys& keys);

// The validate or revalidate row whose manifest digest, plan digest and decision are the seal's, and whose seal a
// trusted key made (trusted_keys(): this machine's own key, and trusted/*.pub); nullopt if none. A ledger is a file:
// since a bundle's plan names the task whose ledger is consulted, a forged bundle could come with a ledger of its own,
// and only the key tells a row this machine wrote from one written anywhere.
std::optional<LedgerRun> recorded_run(const Ledger& ledger, const BundleSeal& seal,
                                      const TrustedKeys& keys = trusted_keys());

// `ledger` may be null (KWB_LEDGER=none, or no ledger file yet): only the signature can then make it authentic.
Authenticity authenticity(const VerifyReport& report, const Ledger* ledger);

struct KeepOutcome {
  // 0 kept, or already the incumbent (nothing changes); 1 refused (the reason says why); 3 the bundle does not verify;
  // 77 the ledger has no record of the run that wrote this bundle as it is (changed after the run, or not recorded
  // here)
  int exit_code = 0;
  std::string message;  // for people
  std::optional<Incumbent> kept;
  std::optional<Incumbent> already;   // the bundle's candidate is the current incumbent already
  std::vector<std::string> problems;  // verify's, when it did not verify
};

// `kwb keep BUNDLE`: the bundle must verify (record/verify.h), be the one this machine's ledger recorded at the end
// of its run (recorded_run: a signature alone is not enough, since the lineage is this ledger's), and have decided
// KEEP_CANDIDATE against the current
// incumbent of its task and backend (generation 0: the task's own baseline); the candidate then becomes the next
// generation. Every attempt is recorded as a "keep" run. It reads the snapshot only (record/bundle_snapshot.h): what
// it verifies is what it promotes, whatever happens to the folder meanwhile.
KeepOutcome keep_bundle(Ledger& ledger, const BundleSnapshot& snapshot);

}  // namespace kwb
