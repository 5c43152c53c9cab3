// What an input set of a timing workload costs in the parent, and the refusal of a workload whose smallest pool of
// sets cannot fit the machine (pipeline/compare.h: input_set_bytes, pool_misfit), on the shipped embedding task.
#include "pipeline/compare.h"
#include "task/task.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace kwb {
namespace {

const std::filesystem::path k_embedding = std::filesystem::path(KWB_SOURCE_DIR) / "tasks" / "embedding";

TEST(pool_memory_test, an_input_set_is_its_inputs_and_its_expected_outputs_as_doubles) {
  const Task task = load_task(k_embedding);
  const Case& c = task.require_case("--workload", "llama_decode", true);  // table 16384 x 2048 f16, 8 ids
  EXPECT_EQ(input_set_bytes(task, c), size_t{16384} * 2048 * 2 + 8 * 4 + size_t{8} * 2048 * 8);
}

TEST(pool_memory_test, a_workload_whose_smallest_pool_exceeds_half_the_machine_is_refused_with_the_figures) {
  const Task task = load_task(k_embedding);
  const Case& c = task.require_case("--workload", "llama_decode", true);
  EXPECT_EQ(pool_misfit(task, c, uint64_t{24} << 30), "");
  // Six sets of 64.1 MiB (384.8 MiB) against half of 512 MiB.
  const std::string why = pool_misfit(task, c, uint64_t{512} << 20);
  EXPECT_NE(why.find("workload 'llama_decode': an input set takes 64.1 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("at least 6 sets at once (384.8 MiB)"), std::string::npos) << why;
  EXPECT_NE(why.find("512.0 MiB of memory"), std::string::npos) << why;
  EXPECT_NE(why.find("smaller dims"), std::string::npos) << why;
}

}  // namespace
}  // namespace kwb
