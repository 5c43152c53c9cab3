// What an input set of a timing workload costs in the parent, and the refusal of a workload whose smallest pool of
// sets cannot fit the machine (pipeline/compare.h: input_set_bytes, pool_misfit), on the shipped embedding task.
#include "pipeline/compare.h"
#include "support/build_paths.h"
#include "task/task.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace kwb {
namespace {

const std::filesystem::path k_embedding = std::filesystem::path(KWB_SOURCE_DIR) / "tasks" / "embedding";

TEST(pool_memory_test, an_input_set_is_its_inputs_and_its_expected_outputs_as_doubles) {
  const Task task = load_task(k_embedding);
  const Case& c = task.require_case("--workload", "llama_decode", true);  // table 16384 x 2048 f16, 8 ids
  // The table is `shared`: one copy for the pool, not one per set.
  EXPECT_EQ(input_set_bytes(task, c), size_t{8} * 4 + size_t{8} * 2048 * 8);
  EXPECT_EQ(shared_input_bytes(task, c), size_t{16384} * 2048 * 2);
  Task unshared = task;
  unshared.signature.inputs[0].shared = false;
  EXPECT_EQ(input_set_bytes(unshared, c), size_t{16384} * 2048 * 2 + 8 * 4 + size_t{8} * 2048 * 8);
  EXPECT_EQ(shared_input_bytes(unshared, c), 0u);
}

TEST(pool_memory_test, a_workload_whose_smallest_pool_exceeds_half_the_machine_is_refused_with_the_figures) {
  const Task task = load_task(k_embedding);
  const Case& c = task.require_case("--workload", "llama_decode", true);
  EXPECT_EQ(pool_misfit(task, c, uint64_t{24} << 30), "");
  // Six sets of 0.125 MiB and the 64 MiB table once (64.75 MiB) fit half of 512 MiB, not half of 100 MiB.
  EXPECT_EQ(pool_misfit(task, c, uint64_t{512} << 20), "");
  const std::string why = pool_misfit(task, c, uint64_t{100} << 20);
  EXPECT_NE(why.find("workload 'llama_decode': an input set takes 0.1 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("beside 64.0 MiB of shared inputs, one copy for the pool"), std::string::npos) << why;
  EXPECT_NE(why.find("at least 6 sets at once (64."), std::string::npos) << why;
  EXPECT_NE(why.find("100.0 MiB of memory"), std::string::npos) << why;
  // Unshared, every set holds its table: six sets of 64.1 MiB (384.8 MiB) against half of 512 MiB.
  Task unshared = task;
  unshared.signature.inputs[0].shared = false;
  const std::string u = pool_misfit(unshared, c, uint64_t{512} << 20);
  EXPECT_NE(u.find("an input set takes 64.1 MiB (its inputs, and its expected outputs as doubles), and"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find("at least 6 sets at once (384.8 MiB)"), std::string::npos) << u;
  EXPECT_NE(u.find("smaller dims"), std::string::npos) << u;
}

}  // namespace
}  // namespace kwb
