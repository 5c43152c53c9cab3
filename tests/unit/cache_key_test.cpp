// Cache keys cover everything that changes what is cached (issue 15): a check made under one runtime setting of the
// workers (POCL_MAX_PTHREAD_COUNT=1) never stands for another, a device runtime's compiled kernels are never shared
// across settings, and an artifact built under one PATH is not reused under another.
#include "builder/builder.h"
#include "pipeline/check.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "worker/worker_process.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>

namespace kwb {
namespace {

namespace fs = std::filesystem;

const fs::path k_repository = KWB_SOURCE_DIR;

// Sets (or, with nullopt, removes) an environment variable for the scope.
class ScopedEnv {
public:
  ScopedEnv(const char* name, std::optional<std::string> value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    set(value);
  }
  ~ScopedEnv() { set(m_old); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const std::optional<std::string>& value) {
    if (value) {
      ::setenv(m_name, value->c_str(), 1);
    } else {
      ::unsetenv(m_name);
    }
  }

private:
  const char* m_name;
  std::optional<std::string> m_old;
};

class CacheKey : public ::testing::Test {
protected:
  void SetUp() override {
    m_task.manifest_sha256 = "manifest";
    m_task.oracle_sha256 = "oracle";
    m_artifact.identity.artifact_sha256 = "artifact";
    m_artifact.identity.source_sha256 = "source";
    m_artifact.identity.key = "identity";
  }
  // The worker's digest is part of both keys; this test binary stands in for kwb-worker.
  ScopedEnv m_worker{"KWB_WORKER", fs::read_symlink("/proc/self/exe").string()};
  Task m_task;
  Artifact m_artifact;
};

TEST_F(CacheKey, a_check_is_keyed_on_the_task_oracle_source) {
  const CheckOptions co;
  const std::string before = check_cache_key(m_task, m_artifact, co);
  m_task.oracle_sha256 = "another oracle";
  EXPECT_NE(check_cache_key(m_task, m_artifact, co), before);
}

TEST_F(CacheKey, a_check_is_keyed_on_every_runtime_setting_its_workers_get) {
  ScopedEnv threads("POCL_MAX_PTHREAD_COUNT", std::nullopt);
  const CheckOptions co;
  const std::string by_default = check_cache_key(m_task, m_artifact, co);
  EXPECT_EQ(check_cache_key(m_task, m_artifact, co), by_default);  // a key, not a draw
  threads.set("1");
  const std::string one_thread = check_cache_key(m_task, m_artifact, co);
  threads.set("4");
  const std::string four_threads = check_cache_key(m_task, m_artifact, co);
  EXPECT_NE(one_thread, by_default);
  EXPECT_NE(four_threads, by_default);
  EXPECT_NE(one_thread, four_threads);
  threads.set("1");
  EXPECT_EQ(check_cache_key(m_task, m_artifact, co), one_thread);

  // The device selection and the other runtimes' settings reach workers too; what never reaches them does not count.
  threads.set(std::nullopt);
  for (const char* name : {"KWB_OPENCL_DEVICE", "CUDA_VISIBLE_DEVICES", "OCL_ICD_VENDORS"}) {
    ScopedEnv v(name, "1");
    EXPECT_NE(check_cache_key(m_task, m_artifact, co), by_default) << name;
  }
  {
    ScopedEnv v("MALLOC_ARENA_MAX", "1");  // kept from workers (docs/worker-protocol.md)
    EXPECT_EQ(check_cache_key(m_task, m_artifact, co), by_default);
  }
}

TEST_F(CacheKey, a_check_is_keyed_on_every_option) {
  ScopedEnv threads("POCL_MAX_PTHREAD_COUNT", std::nullopt);
  std::set<std::string> keys = {check_cache_key(m_task, m_artifact, CheckOptions{})};
  const std::vector<std::function<void(CheckOptions&)>> changes = {
      [](CheckOptions& o) { o.backend = BackendKind::opencl; },
      [](CheckOptions& o) { o.timeout = std::chrono::seconds(5); },
      [](CheckOptions& o) { o.nonce = 7; },
      [](CheckOptions& o) { o.calls_per_case = 2; },
      [](CheckOptions& o) { o.only_cases = {"decode"}; },
      [](CheckOptions& o) { o.stop_after_reason = FailureReason::crashed; },
      [](CheckOptions& o) { o.held_out = true; },
      [](CheckOptions& o) {
        o.held_out = true;
        o.held_out_only = true;
      },
  };
  for (const auto& change : changes) {
    CheckOptions o;
    change(o);
    EXPECT_TRUE(keys.insert(check_cache_key(m_task, m_artifact, o)).second);
  }
  Task other_task = m_task;
  other_task.manifest_sha256 = "another manifest";
  EXPECT_TRUE(keys.insert(check_cache_key(other_task, m_artifact, CheckOptions{})).second);
  Artifact other = m_artifact;
  other.identity.artifact_sha256 = "another artifact";
  EXPECT_TRUE(keys.insert(check_cache_key(m_task, other, CheckOptions{})).second);
}

TEST_F(CacheKey, a_device_runtime_cache_is_keyed_on_the_workers_runtime_settings) {
  ScopedEnv threads("POCL_MAX_PTHREAD_COUNT", std::nullopt);
  const std::string by_default = worker_runtime_cache_key(BackendKind::opencl, "identity");
  EXPECT_EQ(worker_runtime_cache_key(BackendKind::opencl, "identity"), by_default);
  EXPECT_NE(worker_runtime_cache_key(BackendKind::opencl, "another identity"), by_default);
  EXPECT_NE(worker_runtime_cache_key(BackendKind::cuda, "identity"), by_default);
  threads.set("1");
  const std::string one_thread = worker_runtime_cache_key(BackendKind::opencl, "identity");
  EXPECT_NE(one_thread, by_default);
  {
    ScopedEnv device("KWB_OPENCL_DEVICE", "1");
    EXPECT_NE(worker_runtime_cache_key(BackendKind::opencl, "identity"), one_thread);
  }
  EXPECT_EQ(worker_runtime_cache_key(BackendKind::opencl, "identity"), one_thread);
}

// The compiler driver finds the assembler and the linker on PATH, which the build sandbox passes on: another PATH is
// another build.
TEST(CacheKeyBuild, an_artifact_is_keyed_on_the_path_its_compile_gets) {
  const test::TempDir cache("kwb-cache-key-test");
  ScopedEnv cache_dir("KWB_CACHE_DIR", cache.string());
  const fs::path src = k_repository / "tasks" / "rmsnorm" / "cpu" / "baseline.cpp";
  const Artifact first = build_implementation({src, 0, BackendKind::cpu});
  ASSERT_TRUE(first.ok) << first.log;
  const Artifact again = build_implementation({src, 0, BackendKind::cpu});
  ASSERT_TRUE(again.ok) << again.log;
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.identity.key, first.identity.key);
  {
    const fs::path empty = cache / "empty-bin";
    fs::create_directories(empty);
    const char* path = std::getenv("PATH");
    ScopedEnv other_path("PATH", empty.string() + ":" + (path != nullptr ? path : "/usr/bin:/bin"));
    const Artifact other = build_implementation({src, 0, BackendKind::cpu});
    ASSERT_TRUE(other.ok) << other.log;
    EXPECT_FALSE(other.from_cache);
    EXPECT_NE(other.identity.key, first.identity.key);
  }
}

}  // namespace
}  // namespace kwb
