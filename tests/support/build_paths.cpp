// The paths of build_paths.h, from the KWB_PATH_* definitions this file alone is compiled with (tests/CMakeLists.txt).
#include "support/build_paths.h"

namespace kwb::test {

const char* source_dir() { return KWB_PATH_SOURCE_DIR; }
const char* rmsnorm_lite_dir() { return KWB_PATH_RMSNORM_LITE; }
const char* gemm_lite_dir() { return KWB_PATH_GEMM_LITE; }
const char* embedding_lite_dir() { return KWB_PATH_EMBEDDING_LITE; }
const char* kwb_binary() { return KWB_PATH_BINARY; }
const char* worker_binary() { return KWB_PATH_WORKER_BINARY; }
const char* generator_shim_binary() { return KWB_PATH_GENERATOR_SHIM_BINARY; }
const char* test_ledger() { return KWB_PATH_TEST_LEDGER; }

}  // namespace kwb::test
