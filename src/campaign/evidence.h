// What a campaign accepts from a job: a bundle enters the ledger only when
//   1. kwb verify re-derives it without a problem (record/verify.h), every hash, statistic and the decision;
//   2. it is authentic: signed by a key this machine trusts (its own, or a node's in the key folder's trusted/),
//      since the node ran validate with KWB_LEDGER=none and no ledger row can vouch for it (docs/campaigns.md,
//      "Authentication"); a re-hashed or otherwise forged bundle carries no such signature;
//   3. it is this job's: its plan names this job's task, backend, candidate source (SHA-256) and baseline source,
//      so that a genuine bundle of another candidate dropped into the job's folder is refused as well.
// Anything else is rejected evidence: recorded as such in the campaign's state, never in the ledger, never kept.
#pragma once

#include "campaign/campaign_state.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kwb {

struct Evidence {
  enum class Verdict {
    absent,    // no decision.json: validate stopped before deciding (its exit status says why)
    rejected,  // fails one of the three tests above
    accepted,
  };
  Verdict verdict = Verdict::absent;
  std::string decision;         // accepted
  std::string manifest_sha256;  // accepted: the digest the trusted signature signs
  std::string detail;           // rejected: which test failed and why; absent: what is missing
  std::vector<LedgerWorkload> workloads;
  // accepted: where it was timed, from the signed plan (its environment and device): the host name, and the machine
  // as "CPU model, N cores[, device]", the unit a ranking must not mix.
  std::string host, machine;
  // accepted: the decision's first reason, as "code: sentence" (decision.json's reason_codes and reasons).
  std::string reason;
  // accepted: the public key that signed it (64 hex digits): this machine's, or a node's in trusted/.
  std::string signer;
};

// `validate_argv`: the command line the job runs validate with (validate_command_line); the bundle's plan must
// record the same arguments after the program's path. Empty: not checked (callers that have no campaign file).
Evidence examine_bundle(const std::filesystem::path& bundle, const Job& job,
                        const std::vector<std::string>& validate_argv);

}  // namespace kwb
