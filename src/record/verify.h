// `kwb verify BUNDLE`: trusts nothing in the bundle but the raw samples and the recorded checks. It checks the
// manifest and every hash, re-derives every block statistic, interval and verdict from samples.csv, re-applies the
// decision rule to what it re-derived, and reports each disagreement with its file.
//
// Intact is not authentic: anyone can edit a bundle and recompute every hash. The report also carries what binds the
// bundle to a machine (its seal, and its signature checked against the keys this machine trusts); the ledger's
// record of the run is the other proof, which ledger/bundle_entry.h adds (record/ does not read the ledger).
#pragma once

#include "record/bundle_signature.h"
#include "record/stages.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kwb {

struct VerifyReport {
  std::vector<std::string> problems;  // "file: what disagrees"
  std::vector<std::string> verified;  // what was re-derived and agreed
  std::vector<std::string> warnings;  // worth a reader's attention, never a reason to fail (provenance_warning)
  BundleSeal seal;                    // what a signature and a ledger row must match
  SignatureCheck signature;           // an invalid signature is also a problem
  bool ok() const { return problems.empty(); }
};

// `stages`: the declaration the bundle's run followed (kwb's own unless a test added a stage).
VerifyReport verify_bundle(const std::filesystem::path& dir, const StageGraph& stages = validate_stages());

}  // namespace kwb
