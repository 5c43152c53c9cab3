// The oracle is part of the task (include/kwb/oracle.h): tasks/rmsnorm's oracle computes what it computed when it
// was compiled into kwb; a task in any folder brings its own oracle and passes `kwb check` with a stock kwb; an oracle
// that crashes, hangs, aborts, returns an error or does not compile is a task error (65) naming its file, and kwb
// survives it; outputs are cached by (oracle identity, input data).
#include "oracle/oracle.h"
#include "builder/builder.h"
#include "cli_helpers.h"
#include "session/case_data.h"
#include "session/worker_session.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/paths.h"
#include "util/sha256.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <list>
#include <memory>
#include <string>
#include <vector>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

// ---- tasks/rmsnorm/oracle.cpp, called in its sandboxed worker -----------------------------------------------------

class RmsnormOracle : public ::testing::Test {
protected:
  void SetUp() override {
    ::setenv("KWB_WORKER", KWB_WORKER_BINARY, 1);
    m_task = load_task(k_rmsnorm_lite);
  }

  // A call whose input data this fixture keeps until the test ends: cacheable, as data from published seeds is.
  OracleCall call(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t cols, double eps,
                  bool cacheable = true) {
    const std::vector<float>& xs = m_data.emplace_back(x);
    const std::vector<float>& ws = m_data.emplace_back(w);
    OracleCall c;
    c.case_ = &m_task.cases.front();
    c.inputs = {{reinterpret_cast<const unsigned char*>(xs.data()), xs.size() * 4},
                {reinterpret_cast<const unsigned char*>(ws.data()), ws.size() * 4}};
    c.input_shapes = {{{rows, cols}}, {{cols}}};
    c.output_shapes = {{{rows, cols}}};
    c.scalars = {eps};
    c.cacheable = cacheable;
    return c;
  }

  std::vector<double> rmsnorm(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t cols,
                              double eps) {
    return oracle_outputs(m_task, call(x, w, rows, cols, eps)).at(0);
  }

  Task m_task;
  std::list<std::vector<float>> m_data;
};

TEST_F(RmsnormOracle, matches_hand_computed_row) {
  // x = [3, 4]: mean(x^2) = (9 + 16) / 2 = 12.5; eps = 0.25 -> rms = sqrt(12.75); w = [2, 0.5]
  std::vector<double> y = rmsnorm({3.0f, 4.0f}, {2.0f, 0.5f}, 1, 2, 0.25);
  EXPECT_NEAR(y[0], 3.0 / std::sqrt(12.75) * 2.0, 1e-15);
  EXPECT_NEAR(y[1], 4.0 / std::sqrt(12.75) * 0.5, 1e-15);
}

TEST_F(RmsnormOracle, normalises_each_row_separately) {
  // Row 0: [1, 1, 1, 1] -> rms 1 (eps 0); row 1: [2, 2, 2, 2] -> rms 2: both normalise to 1 * w.
  std::vector<double> y = rmsnorm({1, 1, 1, 1, 2, 2, 2, 2}, {1, 2, 3, 4}, 2, 4, 0.0);
  for (int c = 0; c < 4; ++c) {
    EXPECT_DOUBLE_EQ(y[c], c + 1.0);
    EXPECT_DOUBLE_EQ(y[4 + c], c + 1.0);
  }
}

TEST_F(RmsnormOracle, of_zeros_is_zero_with_eps) {
  std::vector<double> y = rmsnorm({0, 0, 0}, {1, 1, 1}, 1, 3, 1e-6);
  for (double v : y) EXPECT_EQ(v, 0.0);
}

TEST_F(RmsnormOracle, does_not_overflow_where_float_squares_would) {
  // (1e20)^2 = 1e40 overflows float32 but not long double: the oracle stays exact.
  std::vector<double> y = rmsnorm({1e20f, -1e20f}, {1, 1}, 1, 2, 0.0);
  EXPECT_NEAR(y[0], 1.0, 1e-12);
  EXPECT_NEAR(y[1], -1.0, 1e-12);
}

TEST_F(RmsnormOracle, outputs_are_cached_by_oracle_identity_and_input_data) {
  const TempDir tmp("kwb-oracle-cache");
  const fs::path cache = tmp / "cache";
  const std::string old_cache = std::getenv("KWB_CACHE_DIR") != nullptr ? std::getenv("KWB_CACHE_DIR") : "";
  ::setenv("KWB_CACHE_DIR", cache.c_str(), 1);
  const OracleCall c = call({3.0f, 4.0f}, {2.0f, 0.5f}, 1, 2, 0.25);
  const std::vector<double> first = oracle_outputs(m_task, c).at(0);
  const fs::path entry = cache / "oracle" / (oracle_cache_key(oracle_artifact(m_task), m_task, c) + ".f64");
  ASSERT_TRUE(fs::is_regular_file(entry));

  // A planted entry with a valid digest is what the next call returns: the oracle did not run again.
  const std::vector<double> planted = {42.0, -42.0};
  std::string payload(reinterpret_cast<const char*>(planted.data()), planted.size() * sizeof(double));
  write_file_atomic(entry, sha256_hex(payload) + payload);
  EXPECT_EQ(oracle_outputs(m_task, c).at(0), planted);

  // A damaged entry is not trusted: the oracle runs again and rewrites it.
  payload[0] ^= 1;
  write_file_atomic(entry, sha256_hex(std::string(64, '0')) + payload);
  EXPECT_EQ(oracle_outputs(m_task, c).at(0), first);

  // Other data is another entry.
  const OracleCall other = call({3.0f, 5.0f}, {2.0f, 0.5f}, 1, 2, 0.25);
  EXPECT_NE(oracle_cache_key(oracle_artifact(m_task), m_task, other),
            oracle_cache_key(oracle_artifact(m_task), m_task, c));
  if (old_cache.empty()) {
    ::unsetenv("KWB_CACHE_DIR");
  } else {
    ::setenv("KWB_CACHE_DIR", old_cache.c_str(), 1);
  }
}

// Data from a fresh nonce never comes again (timing pools, held-out shapes, twins): its outputs are computed and
// never cached, and a planted entry under its key is not read.
TEST_F(RmsnormOracle, outputs_of_data_that_never_recurs_are_neither_cached_nor_read_from_the_cache) {
  const TempDir tmp("kwb-oracle-nocache");
  const fs::path cache = tmp / "cache";
  const std::string old_cache = std::getenv("KWB_CACHE_DIR") != nullptr ? std::getenv("KWB_CACHE_DIR") : "";
  ::setenv("KWB_CACHE_DIR", cache.c_str(), 1);
  const OracleCall c = call({3.0f, 4.0f}, {2.0f, 0.5f}, 1, 2, 0.25, false);
  const std::vector<double> first = oracle_outputs(m_task, c).at(0);
  const fs::path entry = cache / "oracle" / (oracle_cache_key(oracle_artifact(m_task), m_task, c) + ".f64");
  EXPECT_FALSE(fs::exists(entry));
  EXPECT_FALSE(fs::exists(cache / "oracle")) << "nothing was written for data that never recurs";
  const std::vector<double> planted = {42.0, -42.0};
  std::string payload(reinterpret_cast<const char*>(planted.data()), planted.size() * sizeof(double));
  fs::create_directories(entry.parent_path());
  write_file_atomic(entry, sha256_hex(payload) + payload);
  EXPECT_EQ(oracle_outputs(m_task, c).at(0), first) << "the oracle ran; the planted entry was not read";
  if (old_cache.empty()) {
    ::unsetenv("KWB_CACHE_DIR");
  } else {
    ::setenv("KWB_CACHE_DIR", old_cache.c_str(), 1);
  }
}

// A batch of calls (a timing pool's) runs on several oracle workers at once and answers each call exactly as one call
// at a time does, in the calls' order; a cacheable call in the batch is answered from the cache as before.
TEST_F(RmsnormOracle, a_batch_of_calls_answers_each_as_a_single_call_does_in_order) {
  std::vector<OracleCall> calls;
  for (int i = 0; i < 7; ++i) {
    const float v = static_cast<float>(i + 1);
    calls.push_back(call({v, 2 * v, -v, 0.5f}, {1.0f, 0.25f, 2.0f, 1.0f + v}, 1, 4, 1e-3 * (i + 1), false));
  }
  const std::vector<std::vector<std::vector<double>>> batch = oracle_outputs(m_task, calls);
  ASSERT_EQ(batch.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(batch[i], oracle_outputs(m_task, calls[i])) << "call " << i;
  }
  EXPECT_NE(batch[0], batch[1]);
}

// The cache cannot fill a disk: an entry over 4 MiB of outputs is never written (its oracle runs again), and a
// folder over 256 MiB loses its oldest entries down to 192 MiB.
TEST_F(RmsnormOracle, the_cache_keeps_no_large_entry_and_prunes_itself_to_its_bound) {
  const TempDir tmp("kwb-oracle-bound");
  const fs::path cache = tmp / "cache";
  const std::string old_cache = std::getenv("KWB_CACHE_DIR") != nullptr ? std::getenv("KWB_CACHE_DIR") : "";
  ::setenv("KWB_CACHE_DIR", cache.c_str(), 1);
  // 600 x 1000 outputs: 4.8 MB of doubles, over the 4 MiB bound.
  const OracleCall big = call(std::vector<float>(600 * 1000, 1.0f), std::vector<float>(1000, 1.0f), 600, 1000, 1e-6);
  EXPECT_EQ(oracle_outputs(m_task, big).at(0).size(), 600u * 1000u);
  EXPECT_FALSE(fs::exists(cache / "oracle" / (oracle_cache_key(oracle_artifact(m_task), m_task, big) + ".f64")));
  // 300 MiB of old entries, then one small real one: the oldest go, the new one stays.
  fs::create_directories(cache / "oracle");
  const std::string filler(std::size_t{10} << 20, 'x');
  for (int i = 0; i < 30; ++i) {
    const fs::path f = cache / "oracle" / ("old" + std::to_string(i) + ".f64");
    write_file_atomic(f, filler);
    fs::last_write_time(f, fs::file_time_type::clock::now() - std::chrono::hours(1) + std::chrono::seconds(i));
  }
  const OracleCall small = call({3.0f, 4.0f}, {2.0f, 0.5f}, 1, 2, 0.25);
  (void)oracle_outputs(m_task, small);
  uintmax_t total = 0;
  for (const auto& e : fs::directory_iterator(cache / "oracle")) total += e.file_size();
  EXPECT_LE(total, uintmax_t{192} << 20);
  EXPECT_TRUE(fs::exists(cache / "oracle" / (oracle_cache_key(oracle_artifact(m_task), m_task, small) + ".f64")));
  EXPECT_FALSE(fs::exists(cache / "oracle" / "old0.f64")) << "the oldest entry goes first";
  EXPECT_TRUE(fs::exists(cache / "oracle" / "old29.f64")) << "the newest old entry stays";
  if (old_cache.empty()) {
    ::unsetenv("KWB_CACHE_DIR");
  } else {
    ::setenv("KWB_CACHE_DIR", old_cache.c_str(), 1);
  }
}

// A twin (session/case_data.h) gets its own expected outputs from the oracle.
TEST_F(RmsnormOracle, a_twin_differs_from_its_base_in_a_few_elements_and_has_its_own_expected_output) {
  const Task& task = m_task;
  const InputSet base = make_input_set(task, *task.find_case("prefill"), 0, 7);
  const InputSet twin = make_twin(task, base, 99);
  ASSERT_EQ(twin.inputs.size(), base.inputs.size());
  for (size_t i = 0; i < base.inputs.size(); ++i) {
    EXPECT_TRUE(twin.inputs[i]->sealed());
    const auto a = base.inputs[i]->data();
    const auto b = twin.inputs[i]->data();
    ASSERT_EQ(a.size(), b.size());
    size_t changed = 0;
    for (size_t k = 0; k < a.size(); k += 4) changed += std::memcmp(&a[k], &b[k], 4) != 0;
    EXPECT_GE(changed, 1u);
    EXPECT_LE(changed, 4u);
    EXPECT_EQ(twin.input_fingerprints[i], fingerprint(b));
  }
  size_t differing = 0;
  for (size_t k = 0; k < base.expected[0].size(); ++k) differing += base.expected[0][k] != twin.expected[0][k];
  EXPECT_GT(differing, 0u);
  EXPECT_LT(differing, base.expected[0].size() / 2);
  EXPECT_NE(twin.twin_detail.find("x["), std::string::npos) << twin.twin_detail;
}

// A timing trap runs a call on its set's twin, and making a twin runs the oracle: compare asks a session to trap only
// on sets whose twin exists, and to list the others (SessionOptions::twins_made_between_visits), so the oracle never
// runs between a visit's calls. Without the option a session makes a twin at its first trap, as check does.
TEST_F(RmsnormOracle, a_session_that_makes_no_twins_traps_only_on_sets_that_have_one_and_lists_the_rest) {
  const Task& task = m_task;
  const std::vector<Artifact> built = build_implementations({{k_rmsnorm_lite / "cpu" / "baseline.cpp"}});
  ASSERT_TRUE(built.at(0).ok) << built.at(0).log;
  constexpr int k_calls = 80;  // no trap drawn in 80 calls: (7/8)^80 = 2e-5
  auto run = [&](bool between_visits, std::vector<std::unique_ptr<InputSet>>& pool) {
    for (int i = 0; i < k_calls; ++i) {
      pool.push_back(std::make_unique<InputSet>(make_input_set(task, *task.find_case("decode"), i, 11)));
    }
    SessionOptions so;
    so.timeout = std::chrono::seconds(10);
    so.twins_made_between_visits = between_visits;
    WorkerSession session(task, built.at(0), so);
    EXPECT_TRUE(session.start().ok);
    for (int i = 0; i < k_calls; ++i) {
      const CallResult r = session.call(*pool[static_cast<size_t>(i)], i, CallMode::timing);
      EXPECT_TRUE(r.valid()) << i;
    }
    EXPECT_TRUE(session.shutdown());
    return session.twins_wanted();
  };
  std::vector<std::unique_ptr<InputSet>> pool;
  const std::vector<const InputSet*> wanted = run(true, pool);
  EXPECT_FALSE(wanted.empty());
  for (const auto& set : pool) EXPECT_FALSE(set->twin) << "a twin was made during the visit";
  std::vector<std::unique_ptr<InputSet>> lazy_pool;
  EXPECT_TRUE(run(false, lazy_pool).empty());
  EXPECT_TRUE(std::any_of(lazy_pool.begin(), lazy_pool.end(), [](const auto& set) { return set->twin != nullptr; }));
}

// ---- a task of its own, in a temporary folder ---------------------------------------------------------------------

// y = a * x, elementwise, f32: the smallest task with its own oracle.
constexpr const char* k_scale_task = R"(name = "scale"
description = "y = a * x, elementwise"
oracle = "oracle.c"

[signature]
inputs = [{ name = "x", dtype = "f32", shape = ["n"] }]
outputs = [{ name = "y", dtype = "f32", shape = ["n"] }]
scalars = [{ name = "a", default = 2.5 }]

# One multiply, rounded once to float32: 1 ulp (6e-8) is the honest error; 1e-6 leaves room.
[tolerance]
rtol = 1e-6
atol = 0.0

[[cases]]
name = "small"
role = "correctness"
dims = { n = 100 }
distribution = "normal"
seed = 1

[[cases]]
name = "odd"
role = "correctness"
dims = { n = 1027 }
distribution = "uniform"
seed = 2
scalars = { a = -0.75 }

[backends.cpu]
baseline = "scale.c"
reference = "scale.c"
)";

constexpr const char* k_scale_oracle = R"(#include "kwb/oracle.h"

int kwb_oracle(const kwb_oracle_args* args) {
  const kwb_oracle_tensor* x = &args->inputs[0];
  const kwb_oracle_tensor* y = &args->outputs[0];
  for (int64_t i = 0; i < x->elements; ++i) y->data[i] = args->scalars[0] * x->data[i];
  return 0;
}
)";

constexpr const char* k_scale_impl = R"(#include "kwb/kernel.h"

KWB_CANDIDATE_ABI

int kwb_run(const kwb_call* call) {
  const float* x = (const float*)call->inputs[0].data;
  float* y = (float*)call->outputs[0].data;
  const float a = (float)call->scalars[0].value;
  int64_t n = call->inputs[0].shape[0];
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i];
  return 0;
}
)";

class OwnOracle : public ::testing::Test {
protected:
  void SetUp() override {
    write_file_atomic(m_dir / "task.toml", k_scale_task);
    write_file_atomic(m_dir / "scale.c", k_scale_impl);
  }

  KwbRun check_with_oracle(const std::string& oracle_source) {
    write_file_atomic(m_dir / "oracle.c", oracle_source);
    return run_kwb(
        {"check", m_dir.string(), "--impl", (m_dir / "scale.c").string(), "--json", "--timeout-seconds", "5"});
  }

  // A failed oracle: exit 65, the oracle's file named, `what` said, and kwb itself intact (no internal error).
  void expect_task_error(const KwbRun& r, const std::string& what) {
    EXPECT_EQ(r.exit_code, 65) << r.errors;
    EXPECT_NE(r.errors.find((fs::canonical(m_dir) / "oracle.c").string()), std::string::npos) << r.errors;
    EXPECT_NE(r.errors.find(what), std::string::npos) << r.errors;
  }

  const TempDir m_tmp{"kwb-own-oracle"};
  const fs::path m_dir = m_tmp.path();
};

TEST_F(OwnOracle, a_task_with_its_own_oracle_passes_check_with_a_stock_kwb) {
  KwbRun r = check_with_oracle(k_scale_oracle);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.json.dump() << r.errors;
  EXPECT_EQ(r.json["verdict"], "PASS");
}

// The same task with 16-bit tensors: inputs are generated in the dtype, the oracle (unchanged) sees them as doubles,
// and the candidate's 16-bit outputs are read and compared in their dtype. Tolerances: one rounding of the product
// to f16 is 2^-11 (4.9e-4) relative; to bf16 through float, at most 2^-8 (3.9e-3).
std::string sixteen_bit_task(const std::string& dtype, const std::string& rtol) {
  std::string toml = k_scale_task;
  for (size_t at; (at = toml.find("\"f32\"")) != std::string::npos;) toml.replace(at, 5, "\"" + dtype + "\"");
  toml.replace(toml.find("rtol = 1e-6"), 11, "rtol = " + rtol);
  return toml;
}

TEST_F(OwnOracle, an_f16_task_passes_check_against_the_same_double_oracle) {
  write_file_atomic(m_dir / "task.toml", sixteen_bit_task("f16", "1e-3"));
  write_file_atomic(m_dir / "scale.c", R"(#include "kwb/kernel.h"
KWB_CANDIDATE_ABI
int kwb_run(const kwb_call* call) {
  if (call->inputs[0].dtype.code != kDLFloat || call->inputs[0].dtype.bits != 16) return 1;
  const _Float16* x = (const _Float16*)call->inputs[0].data;
  _Float16* y = (_Float16*)call->outputs[0].data;
  for (int64_t i = 0; i < call->inputs[0].shape[0]; ++i) y[i] = (_Float16)(call->scalars[0].value * (double)x[i]);
  return 0;
}
)");
  KwbRun r = check_with_oracle(k_scale_oracle);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.json.dump() << r.errors;
}

TEST_F(OwnOracle, a_bf16_task_passes_check_and_an_unwritten_element_is_found) {
  write_file_atomic(m_dir / "task.toml", sixteen_bit_task("bf16", "1e-2"));
  const std::string candidate = R"(#include "kwb/kernel.h"
#include <string.h>
KWB_CANDIDATE_ABI
int kwb_run(const kwb_call* call) {
  if (call->inputs[0].dtype.code != kDLBfloat || call->inputs[0].dtype.bits != 16) return 1;
  const uint16_t* x = (const uint16_t*)call->inputs[0].data;
  uint16_t* y = (uint16_t*)call->outputs[0].data;
  for (int64_t i = SKIP; i < call->inputs[0].shape[0]; ++i) {
    uint32_t u = (uint32_t)x[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    f = (float)(call->scalars[0].value * f);
    memcpy(&u, &f, 4);
    y[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  return 0;
}
)";
  std::string honest = candidate;
  honest.replace(honest.find("SKIP"), 4, "0");
  write_file_atomic(m_dir / "scale.c", honest);
  KwbRun r = check_with_oracle(k_scale_oracle);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 0) << r.json.dump() << r.errors;

  std::string lazy = candidate;
  lazy.replace(lazy.find("SKIP"), 4, "1");
  write_file_atomic(m_dir / "scale.c", lazy);
  r = check_with_oracle(k_scale_oracle);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.errors;
  EXPECT_EQ(r.json["failures"].at(0).at("reason"), "output_not_written") << r.json.dump();
}

TEST_F(OwnOracle, a_wrong_candidate_fails_against_the_tasks_own_oracle) {
  // The same oracle, a candidate that forgets the scalar: every element is off by a factor.
  write_file_atomic(m_dir / "scale.c",
                    std::string(k_scale_impl).replace(std::string(k_scale_impl).find("a * x[i]"), 8, "x[i]"));
  KwbRun r = check_with_oracle(k_scale_oracle);
  ASSERT_FALSE(r.json.is_discarded()) << r.output << r.errors;
  EXPECT_EQ(r.exit_code, 1) << r.errors;
  EXPECT_EQ(r.json["failures"].at(0).at("reason"), "numeric_mismatch") << r.json.dump();
}

TEST_F(OwnOracle, an_oracle_that_segfaults_is_a_task_error_naming_it) {
  KwbRun r = check_with_oracle(R"(#include "kwb/oracle.h"
int kwb_oracle(const kwb_oracle_args* args) { (void)args; *(volatile int*)0 = 1; return 0; }
)");
  expect_task_error(r, "the task's oracle failed on case");
  EXPECT_NE(r.errors.find("crashed"), std::string::npos) << r.errors;
}

TEST_F(OwnOracle, an_oracle_that_loops_forever_is_a_task_error_naming_it) {
  KwbRun r = check_with_oracle(R"(#include "kwb/oracle.h"
int kwb_oracle(const kwb_oracle_args* args) { (void)args; for (volatile int i = 0;; i = i + 1) {} return 0; }
)");
  expect_task_error(r, "timeout");
}

TEST_F(OwnOracle, an_oracle_that_aborts_is_a_task_error_naming_it) {
  KwbRun r = check_with_oracle(R"(#include "kwb/oracle.h"
#include <stdlib.h>
int kwb_oracle(const kwb_oracle_args* args) { (void)args; abort(); }
)");
  expect_task_error(r, "aborted");
}

TEST_F(OwnOracle, an_oracle_that_returns_an_error_is_a_task_error_quoting_its_message) {
  KwbRun r = check_with_oracle(R"(#include "kwb/oracle.h"
#include <stdio.h>
int kwb_oracle(const kwb_oracle_args* args) {
  snprintf(args->error, args->error_capacity, "scale wants a scalar named 'b', got '%s'", args->scalar_names[0]);
  return 7;
}
)");
  expect_task_error(r, "kwb_oracle returned 7: scale wants a scalar named 'b', got 'a'");
}

TEST_F(OwnOracle, an_oracle_that_does_not_compile_is_a_task_error_with_the_compiler_output) {
  KwbRun r = check_with_oracle("int kwb_oracle(const kwb_oracle_args* args) { return oops; }\n");
  expect_task_error(r, "does not build");
  EXPECT_NE(r.errors.find("oops"), std::string::npos) << r.errors;
}

// A `shared` input (tasks/embedding's table, a model's weights) is one buffer in every set of a pool, drawn once
// from the pool's nonce; the other inputs are each set's own. A later batch of the same pool shares it too (given
// the pool's first set), every set's expected output is the oracle's for its own ids, and a trap's twin changes the
// ids and keeps the table.
TEST(SharedInputs, a_pool_draws_a_shared_input_once_and_its_twins_change_only_the_others) {
  ::setenv("KWB_WORKER", KWB_WORKER_BINARY, 1);
  const Task task = load_task(k_source_dir / "tasks" / "embedding");
  ASSERT_TRUE(task.signature.inputs[0].shared);
  ASSERT_FALSE(task.signature.inputs[1].shared);
  const Case* workload = nullptr;
  for (const Case& c : task.cases) {
    if (c.name == "prefill") workload = &c;
  }
  ASSERT_NE(workload, nullptr);
  const uint64_t nonce = 0x5EED5EEDull;
  std::vector<InputSet> pool = make_input_sets(task, *workload, 1000, 3, nonce);
  std::vector<InputSet> more = make_input_sets(task, *workload, 1003, 2, nonce, &pool.front());
  for (InputSet& s : more) pool.push_back(std::move(s));
  ASSERT_EQ(pool.size(), 5u);
  for (size_t k = 0; k < pool.size(); ++k) {
    EXPECT_EQ(pool[k].inputs[0], pool[0].inputs[0]) << "set " << k << ": the table is not the pool's one buffer";
    EXPECT_EQ(pool[k].input_fingerprints[0], pool[0].input_fingerprints[0]);
    if (k > 0) {
      EXPECT_NE(pool[k].input_fingerprints[1], pool[0].input_fingerprints[1]) << "set " << k;
    }
    // Each set's outputs are its own: the oracle's for this table and these ids, as one call computes them.
    OracleCall one;
    one.case_ = workload;
    one.inputs = {pool[k].inputs[0]->data(), pool[k].inputs[1]->data()};
    one.input_shapes = pool[k].input_shapes;
    one.output_shapes = pool[k].output_shapes;
    EXPECT_EQ(pool[k].expected, oracle_outputs(task, one)) << "set " << k;
  }
  EXPECT_NE(pool[1].expected, pool[0].expected);
  // Not shared: a set of its own, whose table is drawn for it.
  const InputSet alone = make_input_set(task, *workload, 1000, nonce);
  EXPECT_NE(alone.inputs[0], pool[0].inputs[0]);
  EXPECT_EQ(alone.input_fingerprints[0], pool[0].input_fingerprints[0]);  // the same draw: set 1000's
  const InputSet other = make_input_set(task, *workload, 1001, nonce);
  EXPECT_NE(other.input_fingerprints[0], pool[0].input_fingerprints[0]);
  // A twin: the ids change, the table stays the base's buffer, and its expected output is its own.
  const InputSet twin = make_twin(task, pool[2], 77);
  EXPECT_EQ(twin.inputs[0], pool[2].inputs[0]);
  EXPECT_NE(twin.input_fingerprints[1], pool[2].input_fingerprints[1]);
  EXPECT_NE(twin.twin_detail.find("ids["), std::string::npos) << twin.twin_detail;
  EXPECT_EQ(twin.twin_detail.find("table["), std::string::npos) << twin.twin_detail;
  EXPECT_NE(twin.expected, pool[2].expected);
}

}  // namespace
}  // namespace kwb::test
