// Where the test programs find the repository, the build's binaries and its test tasks. The paths are compiled into
// one file, build_paths.cpp (tests/CMakeLists.txt), not into every test file as -D definitions: an absolute path on
// every compile command would make every test file's build-cache key (ccache, scripts/build.sh) differ from one clone
// of the repository to the next. The macros keep the names the tests have always used and read as before:
//
//   const std::filesystem::path task = std::filesystem::path(KWB_SOURCE_DIR) / "tasks" / "rmsnorm";
#pragma once

namespace kwb::test {

const char* source_dir();             // the repository's root
const char* rmsnorm_lite_dir();       // build/<preset>/test-tasks/rmsnorm (tests/CMakeLists.txt says what it lacks)
const char* gemm_lite_dir();          // build/<preset>/test-tasks/gemm
const char* embedding_lite_dir();     // build/<preset>/test-tasks/embedding
const char* kwb_binary();             // the kwb this build made
const char* worker_binary();          // its kwb-worker
const char* generator_shim_binary();  // its kwb-generator-shim
const char* test_ledger();            // the ledger the integration tests record into (hermetic_ledger.cpp)

}  // namespace kwb::test

#define KWB_SOURCE_DIR (::kwb::test::source_dir())
#define KWB_RMSNORM_LITE (::kwb::test::rmsnorm_lite_dir())
#define KWB_GEMM_LITE (::kwb::test::gemm_lite_dir())
#define KWB_EMBEDDING_LITE (::kwb::test::embedding_lite_dir())
#define KWB_BINARY (::kwb::test::kwb_binary())
#define KWB_WORKER_BINARY (::kwb::test::worker_binary())
#define KWB_GENERATOR_SHIM_BINARY (::kwb::test::generator_shim_binary())
#define KWB_TEST_LEDGER (::kwb::test::test_ledger())
