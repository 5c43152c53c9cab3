// The parent-side pieces of the adversarial defenses that need no process: the ELF export rule, held-out case
// derivation, twins, and the ill-conditioned data distribution (docs/threat-model.md).
#include "builder/elf_inspect.h"
#include "pipeline/check.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "task/data.h"
#include "task/task.h"

#include <gtest/gtest.h>

#include <link.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace kwb {
namespace {

namespace fs = std::filesystem;

const fs::path k_rmsnorm = fs::path(KWB_SOURCE_DIR) / "tasks" / "rmsnorm";

int find_libm(dl_phdr_info* info, size_t, void* out) {
  const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  if (fs::path(name).filename().string().starts_with("libm.so")) {
    *static_cast<std::string*>(out) = name;
    return 1;
  }
  return 0;
}

fs::path scratch_file(const test::TempDir& dir, const std::string& name, const std::string& bytes) {
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

// ---- ELF exports ------------------------------------------------------------------------------------------------

TEST(elf_inspect_test, reads_the_exports_of_a_real_shared_object_through_its_hash_table) {
  std::string libm;
  ::dl_iterate_phdr(find_libm, &libm);
  ASSERT_FALSE(libm.empty());
  ElfInspection r = inspect_shared_object(libm);
  ASSERT_TRUE(r.ok) << r.error;
  std::set<std::string> names;
  for (const ElfSymbol& s : r.exported) names.insert(s.name);
  EXPECT_TRUE(names.contains("cos"));
  EXPECT_TRUE(names.contains("sqrtf"));
  // Anything that exports libm's functions is interposing on libm.
  EXPECT_FALSE(forbidden_exports(r).empty());
}

TEST(elf_inspect_test, malformed_files_are_reported_not_crashed_on) {
  const test::TempDir dir("kwb-elf-inspect");
  const fs::path text = scratch_file(dir, "not-elf", "hello, I am not a shared object");
  ElfInspection r = inspect_shared_object(text);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("not an ELF"), std::string::npos) << r.error;
  EXPECT_EQ(refuse_to_load(text).reason, FailureReason::load_failed);

  std::string libm;
  ::dl_iterate_phdr(find_libm, &libm);
  std::ifstream in(libm, std::ios::binary);
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  const fs::path truncated = scratch_file(dir, "truncated-elf", head);
  EXPECT_FALSE(inspect_shared_object(truncated).ok);
  EXPECT_FALSE(inspect_shared_object("/nonexistent/impl.so").ok);
}

TEST(elf_inspect_test, only_abi_symbols_and_harmless_instantiations_may_be_exported) {
  auto verdict = [](std::vector<ElfSymbol> exported) {
    ElfInspection r;
    r.ok = true;
    r.exported = std::move(exported);
    return forbidden_exports(r);
  };
  EXPECT_TRUE(
      verdict({{"kwb_run", true, false}, {"kwb_setup", true, false}, {"kwb_abi_version", false, false}}).empty());
  // A weak template instantiation (what std::vector<float> leaves behind) cannot interpose from RTLD_LOCAL.
  EXPECT_TRUE(verdict({{"_ZNSt6vectorIfSaIfEE17_M_realloc_insertIJRKfEEEvN9__gnu_cxx17__normal_iteratorIPfS1_EEDpOT_",
                        true, true}})
                  .empty());
  // Timing, memory, loader and C++ runtime entry points are refused even weak.
  for (const char* name : {"clock_gettime", "gettimeofday", "malloc", "memcpy", "dlsym", "pthread_create", "_Znwm",
                           "_ZdlPv", "__cxa_atexit", "_ZNSt6chrono3_V212steady_clock3nowEv"}) {
    EXPECT_EQ(verdict({{name, true, true}}).size(), 1u) << name;
  }
  // Strong definitions of anything libc or libm exports are refused too.
  EXPECT_EQ(verdict({{"cosf", true, false}}).size(), 1u);
  EXPECT_EQ(verdict({{"strtol", true, false}}).size(), 1u);
}

// ---- held-out cases -------------------------------------------------------------------------------------------

TEST(held_out_test, every_dimension_is_odd_unpublished_and_the_cases_stay_small) {
  const Task task = load_task(k_rmsnorm);
  std::vector<const Case*> all;
  for (const Case& c : task.cases) all.push_back(&c);
  std::map<std::string, std::set<int64_t>> published;
  for (const Case& c : task.cases) {
    for (const auto& [dim, v] : c.dims) published[dim].insert(v);
  }
  const std::vector<Case> held = held_out_cases(task, all, 42);
  ASSERT_EQ(held.size(), task.cases.size());
  for (const Case& h : held) {
    EXPECT_TRUE(h.name.ends_with("~held_out")) << h.name;
    EXPECT_EQ(h.role, CaseRole::correctness);
    size_t bytes = 0;
    for (const auto* list : {&task.signature.inputs, &task.signature.outputs}) {
      for (const TensorSpec& s : *list) bytes += resolve_shape(s, h).elements() * dtype_size(s.dtype);
    }
    EXPECT_LE(bytes, k_held_out_max_bytes) << h.name;
    for (const auto& [dim, v] : h.dims) {
      EXPECT_EQ(v % 2, 1) << h.name << " " << dim << " = " << v;
      EXPECT_FALSE(published[dim].contains(v)) << h.name << " " << dim << " = " << v;
    }
  }
  // A seed means the same shapes (a bundle's final check can be re-derived); another seed, other shapes.
  const std::vector<Case> again = held_out_cases(task, all, 42);
  const std::vector<Case> other = held_out_cases(task, all, 43);
  size_t same = 0, differ = 0;
  for (size_t i = 0; i < held.size(); ++i) {
    same += held[i].dims == again[i].dims;
    differ += held[i].dims != other[i].dims;
  }
  EXPECT_EQ(same, held.size());
  EXPECT_GT(differ, 0u);
}

// ---- ill-conditioned data ---------------------------------------------------------------------------------------

TEST(data_test, log_uniform_spreads_magnitudes_over_the_decades_asked_for_with_both_signs) {
  Distribution d;
  d.kind = DistributionKind::log_uniform;
  d.low = -3;
  d.high = 3;
  std::vector<unsigned char> bytes(4 * 20000);
  fill_tensor(d, DType::f32, bytes, 5);
  size_t negative = 0, below_one = 0;
  for (size_t i = 0; i < 20000; ++i) {
    float v;
    std::memcpy(&v, &bytes[4 * i], 4);
    const double m = std::fabs(v);
    EXPECT_GE(m, 0.9999e-3);
    EXPECT_LT(m, 1.0001e3);
    negative += v < 0;
    below_one += m < 1;
  }
  EXPECT_NEAR(static_cast<double>(negative) / 20000, 0.5, 0.02);
  EXPECT_NEAR(static_cast<double>(below_one) / 20000, 0.5, 0.02);  // half the decades are below 1
}

}  // namespace
}  // namespace kwb
