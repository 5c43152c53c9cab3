#include "../valid_task.h"
#include "pipeline/check.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "task/data.h"
#include "task/task.h"
#include "util/error.h"
#include "util/sha256.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <vector>

namespace fs = std::filesystem;

namespace {

// A minimal valid manifest; tests break one thing at a time.
const char* const k_valid = kwb::test::k_valid_manifest;

class ManifestTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::ofstream(m_dir / "impl.cpp") << "// empty\n";
    std::ofstream(m_dir / "oracle.cpp") << "// the oracle\n";
  }

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

  const kwb::test::TempDir m_tmp{"kwb-manifest"};
  const fs::path m_dir = m_tmp.path();
};

// "FILE:LINE: ..." with the right line.
void expect_location(const std::string& msg, const fs::path& dir, int line) {
  EXPECT_NE(msg.find((fs::canonical(dir) / "task.toml").string() + ":" + std::to_string(line) + ":"), std::string::npos)
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
  ASSERT_EQ(t.backends.at(kwb::BackendKind::cpu).controls.size(), 1u);
  EXPECT_EQ(t.backends.at(kwb::BackendKind::cpu).controls[0].expect, kwb::FailureReason::numeric_mismatch);
  EXPECT_EQ(t.manifest_sha256.size(), 64u);
}

// ---- traffic and index laws bound to dims (docs/task-format.md, "Traffic") ------------------------------------

TEST_F(ManifestTest, reads_declares_the_elements_a_call_reads_and_defaults_to_all) {
  write_with(R"({ name = "x", dtype = "f32", shape = ["rows", "cols"] })",
             R"({ name = "x", dtype = "f32", shape = ["rows", "cols"], reads = "cols" })");
  const kwb::Task t = kwb::load_task(m_dir);
  ASSERT_TRUE(t.signature.inputs[0].reads.has_value());
  EXPECT_EQ(kwb::input_reads(t.signature.inputs[0], t.cases[0]), 8u);  // cols = 8 of rows * cols = 16
  EXPECT_EQ(kwb::input_reads(t.signature.inputs[1], t.cases[0]), 8u);  // weight: no declaration, all 8
  kwb::Case big = t.cases[0];
  big.dims["cols"] = 1000;
  big.dims["rows"] = 1;
  EXPECT_EQ(kwb::input_reads(t.signature.inputs[0], big), 1000u);
}

TEST_F(ManifestTest, reads_is_capped_at_the_tensor_and_refused_when_malformed_or_naming_no_dim) {
  write_with(R"({ name = "x", dtype = "f32", shape = ["rows", "cols"] })",
             R"({ name = "x", dtype = "f32", shape = ["rows", "cols"], reads = "rows * cols * 4" })");
  const kwb::Task t = kwb::load_task(m_dir);
  EXPECT_EQ(kwb::input_reads(t.signature.inputs[0], t.cases[0]), 16u);
  write_with(R"({ name = "x", dtype = "f32", shape = ["rows", "cols"] })",
             R"({ name = "x", dtype = "f32", shape = ["rows", "cols"], reads = "rows *" })");
  EXPECT_NE(load_error().find("reads"), std::string::npos);
  write_with(R"({ name = "x", dtype = "f32", shape = ["rows", "cols"] })",
             R"({ name = "x", dtype = "f32", shape = ["rows", "cols"], reads = "heads * cols" })");
  const std::string e = load_error();
  EXPECT_NE(e.find("reads = \"heads * cols\""), std::string::npos) << e;
  EXPECT_NE(e.find("heads"), std::string::npos) << e;
  write_with(R"({ name = "x", dtype = "f32", shape = ["rows", "cols"] })",
             R"({ name = "x", dtype = "f32", shape = ["rows", "cols"], reads = true })");
  EXPECT_NE(load_error().find("reads"), std::string::npos);
}

TEST_F(ManifestTest, shared_marks_an_input_as_the_same_in_every_timed_call_and_only_an_input) {
  write_with(R"({ name = "x", dtype = "f32", shape = ["rows", "cols"] })",
             R"({ name = "x", dtype = "f32", shape = ["rows", "cols"], shared = true })");
  const kwb::Task t = kwb::load_task(m_dir);
  EXPECT_TRUE(t.signature.inputs[0].shared);
  EXPECT_FALSE(t.signature.inputs[1].shared);  // the default
  write_with(R"({ name = "x", dtype = "f32", shape = ["rows", "cols"] })",
             R"({ name = "x", dtype = "f32", shape = ["rows", "cols"], shared = "yes" })");
  const std::string e = load_error();
  EXPECT_NE(e.find("shared"), std::string::npos) << e;
  EXPECT_NE(e.find("true or false"), std::string::npos) << e;
  write_with(R"({ name = "y", dtype = "f32", shape = ["rows", "cols"] })",
             R"({ name = "y", dtype = "f32", shape = ["rows", "cols"], shared = true })");
  const std::string o = load_error();
  EXPECT_NE(o.find("only an input"), std::string::npos) << o;
}

TEST_F(ManifestTest, randint_bounds_may_follow_a_dim_at_every_shape) {
  write_with(
      R"({ name = "weight", dtype = "f32", shape = ["cols"], distribution = "uniform", low = 0.5, high = 1.5 })",
      R"({ name = "weight", dtype = "i32", shape = ["cols"], distribution = "randint", low = 0, high = "rows - 1" })");
  const kwb::Task t = kwb::load_task(m_dir);
  const kwb::Distribution d = kwb::input_law(t.signature.inputs[1], t.cases[0]);
  EXPECT_EQ(d.kind, kwb::DistributionKind::randint);
  EXPECT_EQ(d.low, 0.0);
  EXPECT_EQ(d.high, 1.0);  // rows = 2
  kwb::Case moved = t.cases[0];
  moved.dims["rows"] = 37;  // a held-out shape moves the dim: the bound moves with it
  EXPECT_EQ(kwb::input_law(t.signature.inputs[1], moved).high, 36.0);
  // Data drawn at the moved shape stays within it.
  std::vector<unsigned char> buf(4 * 1000);
  kwb::fill_tensor(kwb::input_law(t.signature.inputs[1], moved), kwb::DType::i32, buf, 9);
  const int32_t* v = reinterpret_cast<const int32_t*>(buf.data());
  for (size_t i = 0; i < 1000; ++i) {
    ASSERT_GE(v[i], 0);
    ASSERT_LE(v[i], 36);
  }
}

TEST_F(ManifestTest, a_randint_bound_naming_no_dim_or_crossing_at_a_case_is_refused) {
  write_with(
      R"({ name = "weight", dtype = "f32", shape = ["cols"], distribution = "uniform", low = 0.5, high = 1.5 })",
      R"({ name = "weight", dtype = "i32", shape = ["cols"], distribution = "randint", low = 0, high = "vocab - 1" })");
  std::string e = load_error();
  EXPECT_NE(e.find("vocab"), std::string::npos) << e;
  EXPECT_NE(e.find("input 'weight'"), std::string::npos) << e;
  write_with(
      R"({ name = "weight", dtype = "f32", shape = ["cols"], distribution = "uniform", low = 0.5, high = 1.5 })",
      R"({ name = "weight", dtype = "i32", shape = ["cols"], distribution = "randint", low = 5, high = "rows - 1" })");
  e = load_error();
  EXPECT_NE(e.find("low = 5, high = 1"), std::string::npos) << e;
}

TEST_F(ManifestTest, a_case_needs_a_distribution_only_for_inputs_without_a_law_of_their_own) {
  // x has no law of its own: the case's distribution is required, and the message names x.
  write_with("distribution = \"normal\"\nscale = 2.0\n", "");
  const std::string e = load_error();
  EXPECT_NE(e.find("field 'cases[0].distribution'"), std::string::npos) << e;
  EXPECT_NE(e.find("input 'x' has no law of its own"), std::string::npos) << e;
  // With x's law in the case's inputs (weight has its own in [signature]), no case-wide distribution is needed.
  write_with("distribution = \"normal\"\nscale = 2.0\n",
             "inputs = { x = { distribution = \"normal\", scale = 3.0 } }\n");
  const kwb::Task t = kwb::load_task(m_dir);
  EXPECT_EQ(kwb::input_law(t.signature.inputs[0], t.cases[0]).scale, 3.0);
  EXPECT_EQ(kwb::input_law(t.signature.inputs[1], t.cases[0]).kind, kwb::DistributionKind::uniform);
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
  EXPECT_NE(msg.find("unknown dtype 'f23' (expected one of f16, bf16, f32, f64, i8, u8, i32, i64, bool)"),
            std::string::npos)
      << msg;
  expect_location(msg, m_dir, 7);
}

TEST_F(ManifestTest, unknown_key_is_an_error_not_ignored) {
  write_with("rtol = 1e-4", "rtoll = 1e-4\nrtol = 1e-4");
  std::string msg = load_error();
  EXPECT_NE(msg.find("unknown field 'tolerance.rtoll'"), std::string::npos) << msg;
  expect_location(msg, m_dir, 14);
}

TEST_F(ManifestTest, bad_shape_expression_points_at_the_character) {
  write_with("shape = [\"rows\", \"cols\"] },\n  { name = \"weight\"",
             "shape = [\"rows\", \"cols*\"] },\n  { name = \"weight\"");
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

TEST_F(ManifestTest, not_a_folder_is_a_data_error) { EXPECT_THROW(kwb::load_task(m_dir / "missing"), kwb::DataError); }

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

// Issue 13: errors a user can act on. Each names the file, the line of what is wrong, the field and the fix.

TEST_F(ManifestTest, dims_whose_tensors_overflow_64_bits_are_rejected_at_the_dims_line) {
  write_with("dims = { rows = 2, cols = 8 }", "dims = { rows = 4000000000000, cols = 4000000000000 }");
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'cases[0].dims'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overflows"), std::string::npos) << msg;
  expect_location(msg, m_dir, 20);
}

TEST_F(ManifestTest, dims_whose_tensors_exceed_the_per_case_limit_give_the_byte_size_and_the_limit) {
  // 2 f32 tensors of 10^12 elements: 8e12 bytes, no overflow, far over the limit.
  write_with("dims = { rows = 2, cols = 8 }", "dims = { rows = 1000000, cols = 1000000 }");
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'cases[0].dims'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8000004000000 bytes"), std::string::npos) << msg;  // x, weight and y
  EXPECT_NE(msg.find("16 GiB"), std::string::npos) << msg;
  expect_location(msg, m_dir, 20);
}

TEST_F(ManifestTest, a_case_at_the_per_case_limit_loads) {
  // x and y: 2 x 2^31 f32 elements = 16 GiB, plus weight (2^16 f32 elements): over by 256 KiB, refused; one row
  // fewer is within.
  write_with("dims = { rows = 2, cols = 8 }", "dims = { rows = 32768, cols = 65536 }");
  EXPECT_NE(load_error().find("field 'cases[0].dims'"), std::string::npos);
  write_with("dims = { rows = 2, cols = 8 }", "dims = { rows = 32767, cols = 65536 }");
  EXPECT_NO_THROW(kwb::load_task(m_dir));
}

TEST_F(ManifestTest, non_finite_or_negative_tolerances_are_rejected_at_their_line) {
  for (const char* bad : {"inf", "nan", "-inf", "+inf", "-1e-3"}) {
    write_with("rtol = 1e-4", std::string("rtol = ") + bad);
    std::string msg = load_error();
    EXPECT_NE(msg.find("field 'tolerance.rtol'"), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find("a finite number >= 0"), std::string::npos) << bad << ": " << msg;
    expect_location(msg, m_dir, 14);
    write_with("atol = 0.0", std::string("atol = ") + bad);
    msg = load_error();
    EXPECT_NE(msg.find("field 'tolerance.atol'"), std::string::npos) << bad << ": " << msg;
    expect_location(msg, m_dir, 15);
  }
}

TEST_F(ManifestTest, misspelled_table_is_unknown_at_its_line_with_a_suggestion) {
  write_with("[tolerance]", "[tolerence]");
  std::string msg = load_error();
  EXPECT_NE(msg.find("unknown field 'tolerence'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'tolerance'?"), std::string::npos) << msg;
  expect_location(msg, m_dir, 13);
}

TEST_F(ManifestTest, misspelled_required_key_is_unknown_at_its_line_not_a_missing_field) {
  write_with("rtol = 1e-4", "rtl = 1e-4");
  std::string msg = load_error();
  EXPECT_NE(msg.find("unknown field 'tolerance.rtl'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'rtol'?"), std::string::npos) << msg;
  expect_location(msg, m_dir, 14);
}

TEST_F(ManifestTest, a_missing_key_is_not_blamed_on_a_similar_valid_one) {
  // rtol is missing; atol is one letter away from it but is a field of [tolerance] in its own right.
  write_with("rtol = 1e-4\n", "");
  std::string msg = load_error();
  EXPECT_NE(msg.find("missing field 'tolerance.rtol'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("atol"), std::string::npos) << msg;
}

TEST_F(ManifestTest, unknown_optional_key_suggests_the_closest_known_one) {
  write_with("seed = 1", "seed = 1\nsed = 2");
  std::string msg = load_error();
  EXPECT_NE(msg.find("unknown field 'cases[0].sed'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'seed'?"), std::string::npos) << msg;
  expect_location(msg, m_dir, 24);
}

TEST_F(ManifestTest, unknown_backend_is_reported_at_its_line_with_the_known_ones) {
  // The controls keep [backends.cpu] alive with no baseline: the unknown name must be reported, not the baseline.
  write_with("[backends.cpu]", "[backends.cpux]");
  std::string msg = load_error();
  EXPECT_NE(msg.find("unknown backend 'cpux'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu, opencl, cuda"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'cpu'?"), std::string::npos) << msg;
  expect_location(msg, m_dir, 25);
}

// A special-value mix (an attention mask's -inf): both keys, a probability, any float value; each refusal names the
// key at its line.
TEST_F(ManifestTest, a_special_value_mix_is_read_and_refused_when_half_given_or_not_a_probability) {
  write_with("scale = 2.0", "scale = 2.0\nspecial_fraction = 0.25\nspecial_value = -inf");
  const kwb::Task t = kwb::load_task(m_dir);
  EXPECT_DOUBLE_EQ(t.cases[0].data.special_fraction, 0.25);
  EXPECT_TRUE(std::isinf(t.cases[0].data.special_value) && t.cases[0].data.special_value < 0);

  write_with("scale = 2.0", "scale = 2.0\nspecial_fraction = 0.25");
  std::string msg = load_error();
  EXPECT_NE(msg.find("special_fraction and special_value go together"), std::string::npos) << msg;
  expect_location(msg, m_dir, 23);

  write_with("scale = 2.0", "scale = 2.0\nspecial_fraction = 1.5\nspecial_value = nan");
  msg = load_error();
  EXPECT_NE(msg.find("field 'cases[0].special_fraction'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a probability in (0, 1]"), std::string::npos) << msg;
}

// A control written as a change of another source: the changed text lands in kwb's cache folder, named like the
// base, with a #line naming the base; a `replace` that does not occur exactly once, or both forms at once, is an
// error at its line (the control's source is at line 31, so replace is at 32).
TEST_F(ManifestTest, a_control_given_as_a_change_of_its_base_is_written_once_into_the_cache) {
  ::setenv("KWB_CACHE_DIR", (m_dir / "cache").c_str(), 1);
  std::ofstream(m_dir / "impl.cpp") << "float f(float x) { return x + 1.0f; }\n";
  write_with("source = \"impl.cpp\"", "base = \"impl.cpp\"\nreplace = \"x + 1.0f\"\nwith = \"x\"");
  const kwb::Task t = kwb::load_task(m_dir);
  const kwb::ControlSpec& c = t.backends.at(kwb::BackendKind::cpu).controls.at(0);
  EXPECT_EQ(c.base, fs::canonical(m_dir / "impl.cpp"));
  EXPECT_EQ(c.source.filename(), "impl.cpp");
  EXPECT_EQ(c.source.parent_path().parent_path(), m_dir / "cache" / "controls");
  std::ifstream in(c.source);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "#line 1 \"" + c.base.string() + "\"\nfloat f(float x) { return x; }\n");
  // The same change gives the same file.
  EXPECT_EQ(kwb::load_task(m_dir).backends.at(kwb::BackendKind::cpu).controls.at(0).source, c.source);

  write_with("source = \"impl.cpp\"", "base = \"impl.cpp\"\nreplace = \"y + 2\"\nwith = \"x\"");
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'backends.cpu.controls[0].replace': must occur exactly once"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 0 times"), std::string::npos) << msg;
  expect_location(msg, m_dir, 32);

  write_with("source = \"impl.cpp\"", "source = \"impl.cpp\"\nbase = \"impl.cpp\"");
  msg = load_error();
  EXPECT_NE(msg.find("give either 'source'"), std::string::npos) << msg;
  ::unsetenv("KWB_CACHE_DIR");
}

TEST(manifest_test, builtin_rmsnorm_task_loads) {
  kwb::Task t = kwb::load_task(fs::path(KWB_SOURCE_DIR) / "tasks" / "rmsnorm");
  size_t timing = 0;
  for (const kwb::Case& c : t.cases) timing += c.role == kwb::CaseRole::timing;
  EXPECT_EQ(timing, 3u);
  EXPECT_GE(t.backends.at(kwb::BackendKind::cpu).controls.size(), 6u);
}

// [dims]: what the operator requires of a dim, read strictly, kept by every published case (the task does not load
// otherwise) and by every held-out shape.
TEST_F(ManifestTest, dim_constraints_are_read_kept_by_the_cases_and_refused_when_wrong) {
  const std::string dims_table = "\n[dims]\ncols = { multiple_of = 4, min = 4 }\nrows = { equal_to = \"cols\" }\n";
  const std::string case_dims = "dims = { rows = 2, cols = 8 }";
  std::string s = k_valid;
  s.replace(s.find("[[cases]]"), 0, dims_table + "\n");
  s.replace(s.find(case_dims), case_dims.size(), "dims = { rows = 8, cols = 8 }");
  write(s);
  const kwb::Task t = kwb::load_task(m_dir);
  ASSERT_EQ(t.dim_constraints.size(), 2u);
  EXPECT_EQ(t.dim_constraints.at("cols").multiple_of, 4);
  EXPECT_EQ(t.dim_constraints.at("cols").min, 4);
  EXPECT_EQ(t.dim_constraints.at("rows").equal_to, "cols");
  // Held-out shapes keep them: cols an odd multiple of 4, never published, rows equal to it.
  std::vector<const kwb::Case*> all;
  for (const kwb::Case& c : t.cases) all.push_back(&c);
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    for (const kwb::Case& h : kwb::held_out_cases(t, all, seed)) {
      const int64_t cols = h.dims.at("cols");
      EXPECT_EQ(cols % 4, 0) << cols;
      EXPECT_EQ((cols / 4) % 2, 1) << cols;  // no wider power of two divides it than the task asks for
      EXPECT_NE(cols, 8);
      EXPECT_EQ(h.dims.at("rows"), cols);
      EXPECT_EQ(kwb::constraint_violation(t.dim_constraints, h.dims), "");
    }
  }
  // A published case that breaks a constraint is refused at its dims, naming the dim, the value and the key.
  std::string bad = s;
  bad.replace(bad.find("dims = { rows = 8, cols = 8 }"), 29, "dims = { rows = 6, cols = 6 }");
  write(bad);
  std::string msg = load_error();
  EXPECT_NE(msg.find("dim 'cols' = 6 must be a multiple of 4 ([dims] cols.multiple_of)"), std::string::npos) << msg;
  // Unknown dims, keys, chains and self-references are refused with the fix.
  for (const auto& [table, expected] : std::vector<std::pair<std::string, std::string>>{
           {"nope = { multiple_of = 2 }", "no tensor shape uses a dim named 'nope'"},
           {"cols = { multiple_of = 0 }", "must be an integer from 1 to"},
           {"cols = { even = true }", "even"},
           {"cols = { equal_to = \"cols\" }", "is not another dim"},
           {"rows = { equal_to = \"cols\", min = 2 }", "takes that dim's constraints"}}) {
    std::string v = k_valid;
    v.replace(v.find("[[cases]]"), 0, "[dims]\n" + table + "\n\n");
    write(v);
    msg = load_error();
    EXPECT_NE(msg.find(expected), std::string::npos) << table << ": " << msg;
  }
}

// Per-output tolerances: [tolerance.NAME] gives one output its own rule (abs_rel, ulp or exact); the others keep
// [tolerance]; an integer or boolean output is exact without a table, and a table may not loosen it.
TEST_F(ManifestTest, each_output_gets_its_own_tolerance_or_the_default) {
  std::string s = k_valid;
  s.replace(s.find("outputs = [{ name = \"y\", dtype = \"f32\", shape = [\"rows\", \"cols\"] }]"),
            std::string("outputs = [{ name = \"y\", dtype = \"f32\", shape = [\"rows\", \"cols\"] }]").size(),
            "outputs = [{ name = \"y\", dtype = \"f32\", shape = [\"rows\", \"cols\"] },\n"
            "  { name = \"z\", dtype = \"bf16\", shape = [\"rows\"] },\n"
            "  { name = \"idx\", dtype = \"i64\", shape = [\"rows\"] }]");
  s.replace(s.find("atol = 0.0\n"), std::string("atol = 0.0\n").size(),
            "atol = 0.0\n[tolerance.z]\nmode = \"ulp\"\nulp = 2\n");
  write(s);
  const kwb::Task t = kwb::load_task(m_dir);
  ASSERT_EQ(t.output_tolerance.size(), 3u);
  EXPECT_EQ(t.output_tolerance[0].mode, kwb::ToleranceMode::abs_rel);
  EXPECT_DOUBLE_EQ(t.output_tolerance[0].rtol, 1e-4);
  EXPECT_EQ(t.output_tolerance[1].mode, kwb::ToleranceMode::ulp);
  EXPECT_DOUBLE_EQ(t.output_tolerance[1].ulp, 2.0);
  EXPECT_EQ(t.output_tolerance[2].mode, kwb::ToleranceMode::exact);

  // A table that would loosen an integer output is refused, naming it and the fix.
  std::string loose = s;
  loose.replace(loose.find("[tolerance.z]"), 0, "[tolerance.idx]\nrtol = 0.5\natol = 1.0\n");
  write(loose);
  std::string msg = load_error();
  EXPECT_NE(msg.find("output 'idx' is i64: integer and boolean outputs are compared exactly"), std::string::npos)
      << msg;
  // A table for no output names the outputs there are.
  std::string typo = s;
  typo.replace(typo.find("[tolerance.z]"), std::string("[tolerance.z]").size(), "[tolerance.zz]");
  write(typo);
  msg = load_error();
  EXPECT_NE(msg.find("field 'tolerance.zz': no output is named 'zz' (outputs: y, z, idx)"), std::string::npos) << msg;
  // ulp mode takes ulp, not rtol; an unknown mode lists the three.
  std::string mixed = s;
  mixed.replace(mixed.find("ulp = 2"), std::string("ulp = 2").size(), "ulp = 2\nrtol = 1e-3");
  write(mixed);
  msg = load_error();
  EXPECT_NE(msg.find("field 'tolerance.z.rtol': mode \"ulp\" takes 'ulp', not 'rtol'"), std::string::npos) << msg;
  std::string unknown = s;
  unknown.replace(unknown.find("mode = \"ulp\""), std::string("mode = \"ulp\"").size(), "mode = \"ulps\"");
  write(unknown);
  msg = load_error();
  EXPECT_NE(msg.find("unknown tolerance mode 'ulps' (expected abs_rel, ulp or exact)"), std::string::npos) << msg;
}

// A task whose outputs are all integers needs no [tolerance] at all.
TEST_F(ManifestTest, a_task_of_integer_outputs_needs_no_tolerance_table) {
  std::string s = k_valid;
  s.replace(s.find("{ name = \"y\", dtype = \"f32\""), std::string("{ name = \"y\", dtype = \"f32\"").size(),
            "{ name = \"y\", dtype = \"i32\"");
  s.replace(s.find("[tolerance]\nrtol = 1e-4\natol = 0.0\n"),
            std::string("[tolerance]\nrtol = 1e-4\natol = 0.0\n").size(), "");
  write(s);
  const kwb::Task t = kwb::load_task(m_dir);
  EXPECT_EQ(t.output_tolerance.at(0).mode, kwb::ToleranceMode::exact);
}

// An integer input filled by a floating law, or by an integer law beyond its range, is refused where the case is,
// naming the input, its dtype and the law.
TEST_F(ManifestTest, integer_inputs_need_an_integer_law_within_their_range) {
  std::string s = k_valid;
  s.replace(s.find("{ name = \"x\", dtype = \"f32\""), std::string("{ name = \"x\", dtype = \"f32\"").size(),
            "{ name = \"x\", dtype = \"i8\"");
  write(s);
  std::string msg = load_error();
  EXPECT_NE(msg.find("input 'x' (i8): i8 data needs an integer law (randint, arange, permutation, zeros or constant), "
                     "not normal"),
            std::string::npos)
      << msg;
  s.replace(s.find("distribution = \"normal\"\nscale = 2.0"),
            std::string("distribution = \"normal\"\nscale = 2.0").size(),
            "distribution = \"randint\"\nlow = -100\nhigh = 300");
  write(s);
  msg = load_error();
  EXPECT_NE(msg.find("randint reaches -100 to 300 here, beyond what i8 holds exactly (-128 to 127)"), std::string::npos)
      << msg;
  s.replace(s.find("high = 300"), std::string("high = 300").size(), "high = 100\nscale = 3.0");
  write(s);
  msg = load_error();
  EXPECT_NE(msg.find("randint takes no 'scale'"), std::string::npos) << msg;
  s.replace(s.find("high = 100\nscale = 3.0"), std::string("high = 100\nscale = 3.0").size(), "high = 100");
  write(s);
  const kwb::Task t = kwb::load_task(m_dir);
  EXPECT_EQ(t.cases.at(0).data.kind, kwb::DistributionKind::randint);
  EXPECT_DOUBLE_EQ(t.cases.at(0).data.high, 100.0);
}

// A case may draw a named input by a law of its own, over both the case's law and the input's own in the signature;
// an input it names must exist, and the law must fit its dtype.
TEST_F(ManifestTest, a_case_may_give_one_input_a_law_of_its_own) {
  std::string s = k_valid;
  s.replace(s.find("seed = 1\n"), std::string("seed = 1\n").size(),
            "seed = 1\ninputs = { weight = { distribution = \"constant\", value = 2.0 } }\n");
  write(s);
  const kwb::Task t = kwb::load_task(m_dir);
  const kwb::Case& c = t.cases.at(0);
  EXPECT_EQ(kwb::input_law(t.signature.inputs[1], c).kind, kwb::DistributionKind::constant);  // over its own
  EXPECT_DOUBLE_EQ(kwb::input_law(t.signature.inputs[1], c).value, 2.0);
  EXPECT_EQ(kwb::input_law(t.signature.inputs[0], c).kind, kwb::DistributionKind::normal);  // the case's
  std::string unknown = s;
  unknown.replace(unknown.find("inputs = { weight"), std::string("inputs = { weight").size(), "inputs = { wieght");
  write(unknown);
  std::string msg = load_error();
  EXPECT_NE(msg.find("field 'cases[0].inputs.wieght': no input is named 'wieght' (inputs: x, weight)"),
            std::string::npos)
      << msg;
}

}  // namespace
