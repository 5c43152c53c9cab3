// What kwb was built from, recorded in every plan (plan.json, kwb.git_sha and kwb.git_dirty) so a reader knows
// which source produced a verdict. Computed by cmake/provenance.cmake before every build, not only at configure.
#pragma once

#include <optional>
#include <string>

namespace kwb {

struct Provenance {
  std::string git_sha;            // the commit checked out, or "unknown" outside a git checkout
  std::optional<bool> git_dirty;  // true: the tree held changes that commit lacks; empty: unknown
};

Provenance build_provenance();

}  // namespace kwb
