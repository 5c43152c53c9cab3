// Every kwb an integration test starts records into one ledger under the build folder, unless the test names its
// own (KWB_LEDGER). Without it, kwb's default, the task folder's .kwb/ledger.sqlite (ledger/ledger.h), would put
// ledgers into the source tree's tasks/ whenever a test runs a shipped task. Set once, before any test runs;
// setenv's last argument 0 leaves a KWB_LEDGER that the environment already sets.
#include "support/build_paths.h"

#include <stdlib.h>

namespace kwb::test {
namespace {

const bool k_hermetic_ledger = ::setenv("KWB_LEDGER", KWB_TEST_LEDGER, 0) == 0;

}  // namespace
}  // namespace kwb::test
