#include "task/task.h"
#include "util/error.h"
#include "util/sha256.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

namespace fs = std::filesystem;

namespace {

// A minimal valid manifest; tests break one thing at a time.
const char* k_valid = R"(name = "t"
description = "d"
oracle = "oracle.cpp"

[signature]
inputs = [
  { name = "x", dtype = "f32", shape = ["rows", "cols"] },
  { name = "weight", dtype = "f32", shape = ["cols"], distribution = "uniform", low = 0.5, high = 1.5 },
]
outputs = [{ name = "y", dtype = "f32", shape = ["rows", "cols"] }]
scalars = [{ name = "eps", default = 1e-6 }]

[tolerance]
rtol = 1e-4
atol = 0.0

[[cases]]
name = "a"
role = "timing"
dims = { rows = 2, cols = 8 }
distribution = "normal"
scale = 2.0
seed = 1

[backends.cpu]
baseline = "impl.cpp"
reference = "impl.cpp"

[[backends.cpu.controls]]
name = "c"
source = "impl.cpp"
expect = "numeric_mismatch"
)";

class ManifestTest : public ::testing::Test {
protected:
  void SetUp() override {
    m_dir = fs::temp_directory_path() / ("kwb-manifest-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(m_dir);
    std::ofstream(m_dir / "impl.cpp") << "// empty\n";
    std::ofstream(m_dir / "oracle.cpp") << "// the oracle\n";
  }
  void TearDown() override { fs::remove_all(m_dir); }

  void write(const std::string& text) { std::ofstream(m_dir / "task.toml") << text; }

  // Replaces the first occurrence of `from` in the valid manifest.
  void write_with(const std::string& from, const std::string& to) {
    std::string s = k_valid;
    auto pos = s.find(from);
    ASSERT_NE(pos, std::string::npos) << from;
    s.replace(pos, from.size(), to);
    write(s);
  }

  // Loads, expects a DataError, returns its message.
  std::string load_error() {
    try {
      kwb::load_task(m_dir);
    } catch (const kwb::DataError& e) {
      EXPECT_EQ(e.code(), kwb::ExitCode::data_error);
      return e.what();
    }
    ADD_FAILURE() << "expected a DataError";
    return "";
  }

  fs::path m_dir;
};

// "FILE:LINE: ..." with the right line.
void expect_location(const std::string& msg, const fs::path& dir, int line) {
  EXPECT_NE(msg.find((fs::canonical(dir) / "task.toml").string() + ":" + std::to_string(line) + ":"),
            std::string::npos)
      << msg;
}

TEST_F(ManifestTest, valid_manifest_loads_every_field) {
  write(k_valid);
  kwb::Task t = kwb::load_task(m_dir);
  EXPECT_EQ(t.name, "t");
  EXPECT_EQ(t.oracle, fs::canonical(m_dir) / "oracle.cpp");
  EXPECT_EQ(t.oracle_sha256, kwb::sha256_file(m_dir / "oracle.cpp"));
  ASSERT_EQ(t.signature.inputs.size(), 2u);
  EXPECT_EQ(t.signature.inputs[1].distribution->kind, kwb::DistributionKind::uniform);
  EXPECT_DOUBLE_EQ(t.signature.inputs[1].distribution->low, 0.5);
  EXPECT_DOUBLE_EQ(t.signature.scalars[0].default_value, 1e-6);
  EXPECT_DOUBLE_EQ(t.tolerance.rtol, 1e-4);
  ASSERT_EQ(t.cases.size(), 1u);
  EXPECT_EQ(t.cases[0].role, kwb::CaseRole::timing);
  EXPECT_EQ(t.cases[0].dims.at("cols"), 8);
  EXPECT_DOUBLE_EQ(t.cases[0].data.scale, 2.0);
  EXPECT_EQ(t.cases[0].seed, 1u);
  ASSERT_EQ(t.backends.at("cpu").controls.size(), 1u);
  EXPECT_EQ(t.backends.at("cpu").controls[0].expect, "numeric_mismatch");
  EXPECT_EQ(t.manifest_sha256.size(), 64u);
}

TEST_F(ManifestTest, missing_field_names_the_field) {
  write_with("oracle = \"oracle.cpp\"\n", "");
  std::string msg = load_error();
  EXPECT_NE(msg.find("missing field 'oracle'"), std::string::npos) << msg;
  expect_location(msg, m_dir, 1);
}

TEST_F(ManifestTest, oracle_must_be_a_file_inside_the_task_folder) {
  write_with("oracle = \"oracle.cpp\"", "oracle = \"rmsnorm\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'oracle'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'rmsnorm' is not a source file: kwb has no built-in oracles"), std::string::npos) << msg;
  write_with("oracle = \"oracle.cpp\"", "oracle = \"missing.cpp\"");
  msg = load_error();
  EXPECT_NE(msg.find("field 'oracle'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("source 'missing.cpp' does not exist"), std::string::npos) << msg;
  const fs::path outside = m_dir.string() + "-outside.cpp";
  std::ofstream(outside) << "// outside\n";
  write_with("oracle = \"oracle.cpp\"", "oracle = \"../" + outside.filename().string() + "\"");
  msg = load_error();
  fs::remove(outside);
  EXPECT_NE(msg.find("field 'oracle'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the task folder"), std::string::npos) << msg;
}

TEST_F(ManifestTest, wrong_type_names_field_line_and_types) {
  write_with("seed = 1", "seed = \"one\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'cases[0].seed': expected an integer, got a string"), std::string::npos) << msg;
  expect_location(msg, m_dir, 23);
}

TEST_F(ManifestTest, unknown_dtype_lists_the_choices) {
  write_with("dtype = \"f32\", shape = [\"rows\", \"cols\"] }", "dtype = \"f23\", shape = [\"rows\", \"cols\"] }");
  std::string msg = load_error();
  EXPECT_NE(msg.find("unknown dtype 'f23' (expected one of f16, bf16, f32, f64)"), std::string::npos) << msg;
  expect_location(msg, m_dir, 7);
}

TEST_F(ManifestTest, unknown_key_is_an_error_not_ignored) {
  write_with("rtol = 1e-4", "rtoll = 1e-4\nrtol = 1e-4");
  std::string msg = load_error();
  EXPECT_NE(msg.find("unknown field 'tolerance.rtoll'"), std::string::npos) << msg;
  expect_location(msg, m_dir, 14);
}

TEST_F(ManifestTest, bad_shape_expression_points_at_the_character) {
  write_with("shape = [\"rows\", \"cols\"] },\n  { name = \"weight\"", "shape = [\"rows\", \"cols*\"] },\n  { name = \"weight\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("bad shape expression 'cols*'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("signature.inputs[0].shape[1]"), std::string::npos) << msg;
  expect_location(msg, m_dir, 7);
}

TEST_F(ManifestTest, case_missing_a_dim_the_shapes_use) {
  write_with("dims = { rows = 2, cols = 8 }", "dims = { rows = 2 }");
  std::string msg = load_error();
  EXPECT_NE(msg.find("cases[0].dims.cols"), std::string::npos) << msg;
}

TEST_F(ManifestTest, unknown_control_reason_lists_known_reasons) {
  write_with("expect = \"numeric_mismatch\"", "expect = \"wrong\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("unknown failure reason 'wrong'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stale_output"), std::string::npos) << msg;
}

TEST_F(ManifestTest, missing_source_file_says_paths_are_relative) {
  write_with("baseline = \"impl.cpp\"", "baseline = \"nope.cpp\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("source 'nope.cpp' does not exist"), std::string::npos) << msg;
}

TEST_F(ManifestTest, toml_syntax_error_has_a_line) {
  write_with("[tolerance]", "[tolerance");
  std::string msg = load_error();
  EXPECT_NE(msg.find("TOML syntax error"), std::string::npos) << msg;
  expect_location(msg, m_dir, 13);
}

TEST_F(ManifestTest, duplicate_case_names_are_rejected) {
  std::string s = k_valid;
  std::string case_block = s.substr(s.find("[[cases]]"), s.find("[backends.cpu]") - s.find("[[cases]]"));
  s.insert(s.find("[backends.cpu]"), case_block);
  write(s);
  EXPECT_NE(load_error().find("duplicate case 'a'"), std::string::npos);
}

TEST_F(ManifestTest, not_a_folder_is_a_data_error) {
  EXPECT_THROW(kwb::load_task(m_dir / "missing"), kwb::DataError);
}

// Issue 15, class 8: a task names sources only inside its own folder (65, naming the field).
TEST_F(ManifestTest, control_source_outside_the_task_folder_is_refused) {
  std::ofstream(m_dir.parent_path() / ("kwb-outside-" + std::to_string(::getpid()) + ".cpp")) << "// outside\n";
  write_with("source = \"impl.cpp\"", "source = \"../kwb-outside-" + std::to_string(::getpid()) + ".cpp\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'backends.cpu.controls[0].source'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the task folder"), std::string::npos) << msg;
  fs::remove(m_dir.parent_path() / ("kwb-outside-" + std::to_string(::getpid()) + ".cpp"));
}

TEST_F(ManifestTest, absolute_source_path_is_refused) {
  write_with("baseline = \"impl.cpp\"", "baseline = \"" + (m_dir / "impl.cpp").string() + "\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'backends.cpu.baseline'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("relative to the task folder"), std::string::npos) << msg;
}

TEST_F(ManifestTest, source_symlink_pointing_outside_is_refused) {
  fs::create_symlink("/etc/hostname", m_dir / "link.cpp");
  write_with("reference = \"impl.cpp\"", "reference = \"link.cpp\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'backends.cpu.reference'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the task folder"), std::string::npos) << msg;
}

TEST_F(ManifestTest, control_name_that_is_not_a_file_name_is_refused) {
  write_with("name = \"c\"", "name = \"../../x\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'backends.cpu.controls[0].name'"), std::string::npos) << msg;
}

TEST(manifest_test, builtin_rmsnorm_task_loads) {
  kwb::Task t = kwb::load_task(fs::path(KWB_SOURCE_DIR) / "tasks" / "rmsnorm");
  size_t timing = 0;
  for (const kwb::Case& c : t.cases) timing += c.role == kwb::CaseRole::timing;
  EXPECT_EQ(timing, 3u);
  EXPECT_GE(t.backends.at("cpu").controls.size(), 6u);
}

}  // namespace
