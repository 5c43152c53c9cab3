// The builder per backend. Every CUDA source kwb ships (each shipped task's cuda baseline, reference and controls, the
// other-stream cheat) builds with the recorded nvcc command on any machine with the CUDA toolkit, GPU or not, so a
// broken .cu is caught in CI rather than on the first lent GPU (running them needs one: tests/gpu/run.sh).
#include "builder/builder.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "task/task.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace kwb {
namespace {

namespace fs = std::filesystem;

const fs::path k_source = KWB_SOURCE_DIR;

// rmsnorm's cuda baseline, reference and controls (one written as a change of another source is built from the
// changed text kwb writes into its cache folder), and in the test command's full tier (KWB_TEST_BANK=all: each nvcc
// costs seconds) those of every task under tasks/ with a [backends.cuda] section; and the adversarial corpus's .cu
// files. `tasks_with_cuda` counts the tasks that contributed.
std::vector<fs::path> cuda_sources(size_t& tasks_with_cuda) {
  const char* tier = std::getenv("KWB_TEST_BANK");
  const bool all_controls = tier != nullptr && std::string(tier) == "all";
  std::vector<fs::path> out;
  tasks_with_cuda = 0;
  for (const auto& dir : fs::directory_iterator(k_source / "tasks")) {
    if (!fs::exists(dir.path() / "task.toml")) continue;
    const Task task = load_task(dir.path());
    const auto cuda = task.backends.find(BackendKind::cuda);
    if (cuda == task.backends.end() || (!all_controls && task.name != "rmsnorm")) continue;
    ++tasks_with_cuda;
    out.push_back(cuda->second.baseline);
    out.push_back(cuda->second.reference);
    for (const ControlSpec& c : cuda->second.controls) out.push_back(c.source);
  }
  for (const auto& e : fs::recursive_directory_iterator(k_source / "tests" / "adversarial" / "cuda")) {
    if (e.path().extension() == ".cu") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

class BackendBuild : public ::testing::Test {
protected:
  void SetUp() override { ::setenv("KWB_CACHE_DIR", m_cache.string().c_str(), 1); }
  void TearDown() override { ::unsetenv("KWB_CACHE_DIR"); }
  const test::TempDir m_cache{"kwb-backend-build-test"};
};

TEST_F(BackendBuild, every_shipped_cuda_source_compiles_with_the_recorded_nvcc_command) {
  size_t tasks = 0;
  const std::vector<fs::path> sources = cuda_sources(tasks);
  // rmsnorm alone is 8 sources (baseline, fused, six controls), other_stream 1; the full tier adds every task's.
  EXPECT_GE(tasks, 1u);
  ASSERT_GE(sources.size(), 9u + 2 * (tasks - 1));
  std::vector<BuildRequest> requests;
  for (const fs::path& src : sources) requests.push_back({src, 0, BackendKind::cuda});
  std::vector<Artifact> built;
  try {
    built = build_implementations(requests);  // one nvcc per CPU at once
  } catch (const Error& e) {
    if (e.code() == ExitCode::unavailable) GTEST_SKIP() << "no CUDA toolkit on this machine: " << e.what();
    throw;
  }
  ASSERT_EQ(built.size(), sources.size());
  for (size_t i = 0; i < built.size(); ++i) {
    const Artifact& art = built[i];
    ASSERT_TRUE(art.ok) << sources[i] << ":\n" << art.log;
    EXPECT_EQ(art.source, fs::canonical(sources[i]));
    const BuildIdentity& id = art.identity;
    EXPECT_EQ(id.backend, BackendKind::cuda);
    EXPECT_NE(id.compiler_version.find("release"), std::string::npos) << id.compiler_version;
    EXPECT_NE(id.command.find("-cudart=shared"), std::string::npos) << id.command;  // one runtime with the worker
    EXPECT_NE(id.command.find("-gencode=arch=compute_"), std::string::npos) << id.command;
    EXPECT_TRUE(fs::exists(art.path)) << art.path;
    EXPECT_EQ(id.artifact_sha256.size(), 64u);
  }
}

TEST_F(BackendBuild, a_cu_file_needs_the_cuda_backend_and_cuda_needs_a_cu_file) {
  const fs::path cu = k_source / "tasks" / "rmsnorm" / "cuda" / "fused.cu";
  const fs::path cpp = k_source / "tasks" / "rmsnorm" / "cpu" / "fused.cpp";
  EXPECT_THROW(build_implementation({cu, 0, BackendKind::cpu}), DataError);
  EXPECT_THROW(build_implementation({cpp, 0, BackendKind::cuda}), DataError);
}

// The backend is part of the identity: the same source built for cpu and for opencl (which links the ICD loader)
// are two implementations with two cache entries.
TEST_F(BackendBuild, opencl_host_code_links_the_icd_loader_and_has_its_own_identity) {
  const fs::path src = k_source / "tasks" / "rmsnorm" / "opencl" / "fused.cpp";
  Artifact ocl = build_implementation({src, 0, BackendKind::opencl});
  ASSERT_TRUE(ocl.ok) << ocl.log;
  EXPECT_NE(ocl.identity.command.find("-lOpenCL"), std::string::npos) << ocl.identity.command;
  EXPECT_NE(ocl.identity.command.find("-DCL_TARGET_OPENCL_VERSION=300"), std::string::npos);
  EXPECT_EQ(ocl.identity.backend, BackendKind::opencl);
  const fs::path cpu_src = k_source / "tasks" / "rmsnorm" / "cpu" / "fused.cpp";
  Artifact a = build_implementation({cpu_src, 0, BackendKind::cpu});
  Artifact b = build_implementation({cpu_src, 0, BackendKind::opencl});
  ASSERT_TRUE(a.ok && b.ok);
  EXPECT_NE(a.identity.key, b.identity.key);
}

}  // namespace
}  // namespace kwb
