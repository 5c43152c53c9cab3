// The build sandbox and the identity's dependencies (issue 11, class 6): the compiler reads only the toolchain,
// system headers, kwb's include folder and the candidate's folder, and every other file it read is hashed into the
// identity and the cache key, so editing a header in the candidate's folder is a new implementation and a rebuild.
#include "builder/build_sandbox.h"
#include "builder/builder.h"
#include "cli_helpers.h"
#include "support/build_paths.h"
#include "support/temp_dir.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kwb::test {
namespace {

namespace fs = std::filesystem;

const fs::path k_with_header = k_source_dir / "tests" / "candidates" / "with_header";
const std::string k_note = "kwb: builds run in a sandbox that can read only the toolchain";

// A fresh folder under /tmp, and a private artifact cache in it for this process (the CLI tests inherit it).
class BuildSandboxTest : public ::testing::Test {
protected:
  void SetUp() override {
    fs::create_directories(m_root / "cache");
    ::setenv("KWB_CACHE_DIR", (m_root / "cache").c_str(), 1);
  }
  // A sandbox whose writable folder is a fresh "out" below the test's folder.
  BuildSandboxSpec out_spec() const {
    BuildSandboxSpec spec;
    spec.writable = m_root / "out";
    fs::create_directories(spec.writable);
    return spec;
  }
  const test::TempDir m_tmp{"kwb-build-sandbox"};
  const fs::path m_root = m_tmp.path();
};

// What an object must export to count as built (builder.h): appended to sources that test something else.
const std::string k_abi =
    "\n#include <kwb/kernel.h>\nKWB_CANDIDATE_ABI\n"
    "extern \"C\" KWB_EXPORT int kwb_run(const kwb_call*) { return 0; }\n";

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::trunc) << text;
}

// A copy of tests/candidates/with_header in a folder of its own.
fs::path copy_with_header(const fs::path& to) {
  fs::create_directories(to);
  fs::copy(k_with_header, to, fs::copy_options::recursive);
  return to / "kernel.cpp";
}

const std::string* dependency_hash(const BuildIdentity& id, const std::string& path) {
  for (const auto& [p, sha] : id.dependencies) {
    if (p == path) return &sha;
  }
  return nullptr;
}

TEST_F(BuildSandboxTest, include_of_a_file_outside_the_folder_fails_with_the_sandbox_named) {
  Artifact a = build_implementation({k_adversarial / "build_include_outside.cpp"});
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.log.find("/etc/passwd: No such file"), std::string::npos) << a.log;
  EXPECT_NE(a.log.find(k_note), std::string::npos) << a.log;
  EXPECT_EQ(a.log.find("root:"), std::string::npos) << a.log;
}

TEST_F(BuildSandboxTest, incbin_of_a_file_outside_the_folder_fails_with_the_sandbox_named) {
  Artifact a = build_implementation({k_adversarial / "build_incbin_outside.cpp"});
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.log.find("/etc/passwd"), std::string::npos) << a.log;
  EXPECT_NE(a.log.find(k_note), std::string::npos) << a.log;
  EXPECT_EQ(a.log.find("root:"), std::string::npos) << a.log;
}

TEST_F(BuildSandboxTest, parent_folder_and_symlinked_files_outside_the_folder_cannot_be_read) {
  write(m_root / "outer" / "secret.h", "#define SECRET 42\n");
  const fs::path folder = m_root / "outer" / "cand";
  write(folder / "up.cpp", "#include \"../secret.h\"\nint f() { return SECRET; }\n");
  Artifact up = build_implementation({folder / "up.cpp"});
  EXPECT_FALSE(up.ok);
  EXPECT_NE(up.log.find("secret.h: No such file"), std::string::npos) << up.log;
  EXPECT_NE(up.log.find(k_note), std::string::npos) << up.log;

  fs::create_symlink(m_root / "outer" / "secret.h", folder / "secret_link.h");
  write(folder / "link.cpp", "#include \"secret_link.h\"\nint f() { return SECRET; }\n");
  Artifact link = build_implementation({folder / "link.cpp"});
  EXPECT_FALSE(link.ok);
  EXPECT_NE(link.log.find("secret_link.h: No such file"), std::string::npos) << link.log;
  EXPECT_NE(link.log.find(k_note), std::string::npos) << link.log;
}

TEST_F(BuildSandboxTest, a_header_in_the_folder_is_hashed_into_the_identity_and_the_cache_key) {
  const fs::path source = copy_with_header(m_root / "cand");
  const fs::path header = source.parent_path() / "local.h";

  Artifact first = build_implementation({source});
  ASSERT_TRUE(first.ok) << first.log;
  EXPECT_FALSE(first.from_cache);
  const std::string* local = dependency_hash(first.identity, "local.h");
  ASSERT_NE(local, nullptr) << to_json(first.identity).dump(2);
  EXPECT_EQ(*local, sha256_file(header));
  ASSERT_NE(dependency_hash(first.identity, "<kwb-include>/kwb/kernel.h"), nullptr);
  EXPECT_EQ(*dependency_hash(first.identity, "<kwb-include>/kwb/kernel.h"), first.identity.abi_header_sha256);
  EXPECT_EQ(dependency_hash(first.identity, "kernel.cpp"), nullptr);  // the source is source_sha256
  for (const auto& [p, sha] : first.identity.dependencies) EXPECT_FALSE(p.starts_with("/")) << p;  // no system files
  const nlohmann::json listed = to_json(first.identity)["dependencies"];
  EXPECT_TRUE(std::any_of(listed.begin(), listed.end(), [](const auto& d) { return d["path"] == "local.h"; }));

  Artifact again = build_implementation({source});
  ASSERT_TRUE(again.ok) << again.log;
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.identity.key, first.identity.key);
  EXPECT_EQ(again.identity.dependencies, first.identity.dependencies);

  const std::string original = read_file(header);
  write(header, "#pragma once\n#define KWB_WITH_HEADER_OUTPUT_SCALE 2.0f\n");
  Artifact edited = build_implementation({source});
  ASSERT_TRUE(edited.ok) << edited.log;
  EXPECT_FALSE(edited.from_cache);
  EXPECT_NE(edited.identity.key, first.identity.key);
  EXPECT_EQ(*dependency_hash(edited.identity, "local.h"), sha256_file(header));
  EXPECT_NE(edited.identity.artifact_sha256, first.identity.artifact_sha256);
  EXPECT_EQ(edited.identity.source_sha256, first.identity.source_sha256);

  write(header, original);
  Artifact restored = build_implementation({source});
  ASSERT_TRUE(restored.ok) << restored.log;
  EXPECT_TRUE(restored.from_cache);
  EXPECT_EQ(restored.identity.key, first.identity.key);
  EXPECT_EQ(restored.identity.artifact_sha256, first.identity.artifact_sha256);

  fs::remove(header);  // a recorded dependency gone: a miss, and the rebuild fails
  Artifact missing = build_implementation({source});
  EXPECT_FALSE(missing.ok);
  EXPECT_FALSE(missing.from_cache);
}

TEST_F(BuildSandboxTest, a_layout_variant_build_records_the_same_dependencies_under_another_key) {
  const fs::path source = copy_with_header(m_root / "cand");
  Artifact plain = build_implementation({source});
  BuildRequest variant{source};
  variant.layout_variant = 1;
  Artifact padded = build_implementation(variant);
  ASSERT_TRUE(plain.ok) << plain.log;
  ASSERT_TRUE(padded.ok) << padded.log;
  EXPECT_EQ(padded.identity.dependencies, plain.identity.dependencies);
  EXPECT_NE(padded.identity.key, plain.identity.key);
  EXPECT_NE(padded.identity.artifact_sha256, plain.identity.artifact_sha256);
}

TEST_F(BuildSandboxTest, an_incbin_of_a_file_in_the_folder_is_a_dependency) {
  const fs::path folder = m_root / "cand";
  write(folder / "blob.bin", "first");
  write(folder / "kwb.files", "blob.bin\n");
  write(folder / "k.cpp",
        "__asm__(\".pushsection .rodata\\n.incbin \\\"blob.bin\\\"\\n.popsection\\n\");\nint f() { return 1; }\n" +
            k_abi);
  Artifact first = build_implementation({folder / "k.cpp"});
  ASSERT_TRUE(first.ok) << first.log;
  if (first.identity.compiler_version.find("clang") != std::string::npos) {
    GTEST_SKIP() << "clang's integrated assembler writes no dependency list";
  }
  ASSERT_NE(dependency_hash(first.identity, "blob.bin"), nullptr) << to_json(first.identity).dump(2);
  write(folder / "blob.bin", "second");
  Artifact second = build_implementation({folder / "k.cpp"});
  ASSERT_TRUE(second.ok) << second.log;
  EXPECT_FALSE(second.from_cache);
  EXPECT_NE(second.identity.key, first.identity.key);
}

TEST_F(BuildSandboxTest, the_compiler_sees_a_clean_environment) {
  // The environment kwb runs with never reaches the compiler: an include path there is not searched, even one the
  // sandbox could read.
  const fs::path folder = m_root / "cand";
  write(folder / "sub" / "injected.h", "#define INJECTED 1\n");
  write(folder / "env.cpp", "#include <injected.h>\nint f() { return INJECTED; }\n");
  ::setenv("CPATH", (folder / "sub").c_str(), 1);
  Artifact a = build_implementation({folder / "env.cpp"});
  ::unsetenv("CPATH");
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.log.find("injected.h: No such file"), std::string::npos) << a.log;
}

// What any process in the sandbox sees: no network but loopback, no capabilities, no home or /etc/passwd, its own
// PID namespace, the limits, and a writable private folder only.
TEST_F(BuildSandboxTest, the_sandbox_has_no_network_no_capabilities_and_limits) {
  BuildSandboxSpec spec;
  spec.writable = m_root / "out";
  spec.read_only = {k_with_header};
  fs::create_directories(spec.writable);
  const std::string script =
      "grep -c : /proc/net/dev; grep CapEff /proc/self/status; ulimit -v; ulimit -t; "
      "test -e /etc/passwd && echo passwd-visible; test -e /root && echo root-visible; "
      "touch " +
      (k_with_header / "x").string() +
      " 2>/dev/null && echo ro-writable; "
      "touch " +
      (spec.writable / "w").string() + " && echo out-writable";
  CommandResult r = run_in_build_sandbox({"sh", "-c", script}, spec);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string interfaces, caps, vmem, cpu;
  std::getline(lines, interfaces);
  std::getline(lines, caps);
  std::getline(lines, vmem);
  std::getline(lines, cpu);
  EXPECT_EQ(interfaces, "1") << r.output;  // lo only
  EXPECT_NE(caps.find("0000000000000000"), std::string::npos) << r.output;
  EXPECT_EQ(vmem, std::to_string((4ull << 30) / 1024)) << r.output;
  EXPECT_EQ(cpu, "300") << r.output;
  EXPECT_EQ(r.output.find("passwd-visible"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("root-visible"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ro-writable"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("out-writable"), std::string::npos) << r.output;
}

TEST_F(BuildSandboxTest, the_wall_clock_limit_kills_the_whole_sandbox) {
  const BuildSandboxSpec spec = out_spec();
  BuildSandboxLimits limits;
  limits.wall = std::chrono::milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  CommandResult r = run_in_build_sandbox({"sh", "-c", "sleep 30 & sleep 30"}, spec, limits);
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Commands given together run at once, up to `jobs`: two that each wait for the other's mark finish together with
// two jobs; with one job the first waits in vain until its wall-clock limit, and the second then finds its mark.
TEST_F(BuildSandboxTest, commands_run_together_up_to_the_job_count_each_with_its_own_limit) {
  const BuildSandboxSpec spec = out_spec();
  auto waits_for = [&](const std::string& mine, const std::string& other) {
    const std::string dir = spec.writable.string();
    return SandboxedCommand{{"sh", "-c",
                             fmt::format("touch {0}/{1}; while [ ! -e {0}/{2} ]; do sleep 0.01; done; "
                                         "echo {1}",
                                         dir, mine, other)},
                            spec};
  };
  BuildSandboxLimits limits;
  limits.wall = std::chrono::seconds(1);
  std::vector<CommandResult> together = run_all_in_build_sandbox({waits_for("a", "b"), waits_for("b", "a")}, 2, limits);
  ASSERT_EQ(together.size(), 2u);
  EXPECT_FALSE(together[0].timed_out);
  EXPECT_FALSE(together[1].timed_out);
  EXPECT_EQ(together[0].output, "a\n");  // each result in its command's place
  EXPECT_EQ(together[1].output, "b\n");

  fs::remove_all(spec.writable);
  fs::create_directories(spec.writable);
  std::vector<CommandResult> one_at_a_time =
      run_all_in_build_sandbox({waits_for("a", "b"), waits_for("b", "a")}, 1, limits);
  EXPECT_TRUE(one_at_a_time[0].timed_out);
  EXPECT_FALSE(one_at_a_time[1].timed_out);
  EXPECT_EQ(one_at_a_time[1].exit_code, 0) << one_at_a_time[1].output;
}

// Each sandbox keeps its own wall-clock limit when another one's runs out first: two silent sandboxes started at
// different times (the second once a quick first command has ended) are both killed at their own limit, and the
// batch ends.
TEST_F(BuildSandboxTest, a_timed_out_sandbox_leaves_the_others_their_own_limits) {
  const BuildSandboxSpec spec = out_spec();
  BuildSandboxLimits limits;
  limits.wall = std::chrono::milliseconds(700);
  const auto start = std::chrono::steady_clock::now();
  std::vector<CommandResult> r = run_all_in_build_sandbox(
      {{{"sh", "-c", "sleep 30"}, spec}, {{"true"}, spec}, {{"sh", "-c", "sleep 30"}, spec}}, 2, limits);
  EXPECT_TRUE(r[0].timed_out);
  EXPECT_FALSE(r[1].timed_out);
  EXPECT_EQ(r[1].exit_code, 0) << r[1].output;
  EXPECT_TRUE(r[2].timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(run_all_in_build_sandbox({}, 2, limits).empty());
}

// A batch of builds (a compare's layout pools, validate's implementations): results in the requests' order, the same
// request built once, and a source that does not compile failing alone.
TEST_F(BuildSandboxTest, a_batch_of_builds_keeps_the_order_builds_a_repeated_request_once_and_fails_alone) {
  const fs::path good = copy_with_header(m_root / "good");
  const fs::path bad = m_root / "bad" / "k.cpp";
  write(bad, "int f() { return oops; }\n" + k_abi);
  BuildRequest padded{good};
  padded.layout_variant = 3;
  std::vector<Artifact> built = build_implementations({{good}, {bad}, padded, {good}});
  ASSERT_EQ(built.size(), 4u);
  ASSERT_TRUE(built[0].ok) << built[0].log;
  EXPECT_FALSE(built[1].ok);
  EXPECT_NE(built[1].log.find("oops"), std::string::npos) << built[1].log;
  ASSERT_TRUE(built[2].ok) << built[2].log;
  EXPECT_EQ(built[2].identity.layout_variant, 3);
  EXPECT_NE(built[2].identity.key, built[0].identity.key);
  EXPECT_EQ(built[3].path, built[0].path);
  EXPECT_EQ(built[3].identity.artifact_sha256, built[0].identity.artifact_sha256);
  EXPECT_FALSE(built[0].from_cache);

  // The same bytes in another folder (a copy of the baseline given as the candidate) share the cache key: built once,
  // the copy from the cache, each artifact naming its own source.
  const fs::path copy_source = copy_with_header(m_root / "copy");
  std::vector<Artifact> twins = build_implementations({{copy_source, 5}, {good, 5}});
  ASSERT_TRUE(twins[0].ok) << twins[0].log;
  ASSERT_TRUE(twins[1].ok) << twins[1].log;
  EXPECT_NE(twins[0].from_cache, twins[1].from_cache);
  EXPECT_EQ(twins[0].identity.key, twins[1].identity.key);
  EXPECT_EQ(twins[0].identity.artifact_sha256, twins[1].identity.artifact_sha256);
  EXPECT_EQ(twins[1].source, fs::canonical(good));
  EXPECT_EQ(sha256_file(twins[1].path), twins[1].identity.artifact_sha256);

  // The same batch again comes whole from the cache, identities unchanged.
  std::vector<Artifact> again = build_implementations({{good}, padded});
  EXPECT_TRUE(again[0].from_cache);
  EXPECT_TRUE(again[1].from_cache);
  EXPECT_EQ(again[0].identity.key, built[0].identity.key);
  EXPECT_EQ(again[1].identity.artifact_sha256, built[2].identity.artifact_sha256);
}

TEST_F(BuildSandboxTest, a_cuda_build_records_its_folder_headers) {
  const fs::path folder = m_root / "cand";
  write(folder / "scale.h", "#define SCALE 3.0f\n");
  write(folder / "kwb.files", "scale.h\n");
  write(folder / "k.cu",
        "#include \"scale.h\"\n__global__ void k(float* x) { x[threadIdx.x] *= SCALE; }\n"
        "extern \"C\" void launch(float* x) { k<<<1, 32>>>(x); }\n" +
            k_abi);
  BuildRequest request{folder / "k.cu"};
  request.backend = BackendKind::cuda;
  Artifact a;
  try {
    a = build_implementation(request);
  } catch (const Error& e) {
    if (e.code() == ExitCode::unavailable) GTEST_SKIP() << e.what();
    throw;
  }
  ASSERT_TRUE(a.ok) << a.log;
  const std::string* scale = dependency_hash(a.identity, "scale.h");
  ASSERT_NE(scale, nullptr) << to_json(a.identity).dump(2);
  EXPECT_EQ(*scale, sha256_file(folder / "scale.h"));
}

// Where bubblewrap cannot create namespaces (an unprivileged user, user namespaces exhausted), kwb refuses to build
// with exit 69 and says why; it never compiles unsandboxed. Simulated with util-linux unshare: in a user namespace
// that allows one more, an unprivileged process whose bwrap needs a second.
TEST_F(BuildSandboxTest, without_namespaces_the_build_is_unavailable_never_unsandboxed) {
  const std::string inner = fmt::format("{} check {} --impl {} --json", KWB_BINARY, k_rmsnorm_lite.string(),
                                        (k_with_header / "kernel.cpp").string());
  const std::string script =
      "echo 1 > /proc/sys/user/max_user_namespaces || exit 99; unshare -U sh -c 'test $(id -u) != 0 || exit 98; " +
      inner + "'";
  CommandResult r =
      run_command({"unshare", "-Ur", "sh", "-c", script}, std::chrono::seconds(120), StderrMode::separate);
  if (r.exit_code == 99 || r.exit_code == 98 || r.errors.starts_with("unshare:")) {
    GTEST_SKIP() << "cannot simulate a machine without user namespaces here: " << r.errors;
  }
  EXPECT_EQ(r.exit_code, 69) << r.output << r.errors;
  EXPECT_NE(r.errors.find("kwb compiles candidates only inside a bubblewrap sandbox"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("never compiles a candidate without it"), std::string::npos) << r.errors;
}

// Through the CLI: the corpus candidates are build failures (exit 65) whose detail names the sandbox and carries
// none of the file they tried to read.
TEST_F(BuildSandboxTest, check_rejects_the_build_time_readers_as_build_failures) {
  for (const char* name : {"build_include_outside.cpp", "build_incbin_outside.cpp"}) {
    KwbRun r = run_kwb({"check", k_rmsnorm_lite.string(), "--impl", (k_adversarial / name).string(), "--json"});
    EXPECT_EQ(r.exit_code, 65) << name << r.output << r.errors;
    ASSERT_FALSE(r.json.is_discarded()) << r.output;
    ASSERT_EQ(r.json["failures"].size(), 1u) << r.output;
    EXPECT_EQ(r.json["failures"][0]["reason"], "build_failed");
    const std::string detail = r.json["failures"][0]["detail"];
    EXPECT_NE(detail.find(k_note), std::string::npos) << detail;
    EXPECT_EQ(detail.find("root:"), std::string::npos) << detail;
  }
}

// A file beside the source that its folder's kwb.files does not declare does not exist for the compiler: the
// attack (tests/adversarial/build_include_beside.cpp) is a build failure, and the secret shows nowhere, in the text
// output or in --json. Declared, the same header is read and hashed into the identity.
TEST_F(BuildSandboxTest, check_cannot_include_an_undeclared_file_beside_the_source) {
  const fs::path folder = m_root / "beside";
  fs::create_directories(folder);
  fs::copy_file(k_adversarial / "build_include_beside.cpp", folder / "build_include_beside.cpp");
  fs::copy_file(k_adversarial / "rmsnorm_common.h", folder / "rmsnorm_common.h");
  fs::copy_file(k_adversarial / "kwb.files", folder / "kwb.files");
  const std::string secret = "kwb-secret-7f3a9c token_that_must_never_leak";
  write(folder / "kwb_secret.txt", secret + "\n");
  const std::string source = (folder / "build_include_beside.cpp").string();
  for (const bool json : {true, false}) {
    std::vector<std::string> args = {"check", k_rmsnorm_lite.string(), "--impl", source};
    if (json) args.push_back("--json");
    KwbRun r = run_kwb(args);
    EXPECT_EQ(r.exit_code, 65) << r.output << r.errors;
    EXPECT_EQ(r.output.find("kwb-secret-7f3a9c"), std::string::npos) << r.output;
    EXPECT_EQ(r.errors.find("kwb-secret-7f3a9c"), std::string::npos) << r.errors;
    EXPECT_NE((r.output + r.errors).find("kwb_secret.txt: No such file"), std::string::npos) << r.output << r.errors;
    if (json) {
      ASSERT_FALSE(r.json.is_discarded()) << r.output;
      ASSERT_EQ(r.json["failures"].size(), 1u) << r.output;
      EXPECT_EQ(r.json["failures"][0]["reason"], "build_failed");
    }
  }
  // The control: once declared, the compiler reads the file (and fails on its text, which is not C++).
  write(folder / "kwb.files", "rmsnorm_common.h\nkwb_secret.txt\n");
  Artifact declared = build_implementation({folder / "build_include_beside.cpp"});
  EXPECT_FALSE(declared.ok);
  EXPECT_EQ(declared.log.find("kwb_secret.txt: No such file"), std::string::npos) << declared.log;
}

// Declarations are paths inside the candidate's folder: one that leaves it is the candidate's bad input (65).
TEST_F(BuildSandboxTest, a_declaration_outside_the_folder_is_refused_naming_its_line) {
  write(m_root / "outer" / "secret.h", "#define SECRET 42\n");
  const fs::path folder = m_root / "outer" / "cand";
  write(folder / "k.cpp", "#include \"../secret.h\"\nint f() { return SECRET; }\n" + k_abi);
  for (const std::string& line : {std::string("../secret.h"), (m_root / "outer" / "secret.h").string()}) {
    write(folder / "kwb.files", "# comment\n" + line + "\n");
    try {
      (void)build_implementation({folder / "k.cpp"});
      ADD_FAILURE() << line << " was accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("kwb.files:2"), std::string::npos) << e.what();
    }
  }
  fs::remove(folder / "kwb.files");
  fs::create_symlink(m_root / "outer" / "secret.h", folder / "secret_link.h");
  write(folder / "kwb.files", "secret_link.h\n");
  EXPECT_THROW((void)build_implementation({folder / "k.cpp"}), DataError);
}

// The stale PASS of the issue: a header edited after a passing check is a new implementation, built and checked
// again, and the plan (the identity in the report) lists it.
TEST_F(BuildSandboxTest, check_after_editing_a_folder_header_rebuilds_and_fails) {
  const fs::path source = copy_with_header(m_root / "cand");
  const std::vector<std::string> args = {
      "check", k_rmsnorm_lite.string(), "--impl", source.string(), "--json", "--case", "zeros", "--case", "decode"};
  KwbRun pass = run_kwb(args);
  ASSERT_EQ(pass.exit_code, 0) << pass.output << pass.errors;
  const nlohmann::json deps = pass.json["implementation"]["identity"]["dependencies"];
  EXPECT_TRUE(std::any_of(deps.begin(), deps.end(), [](const auto& d) { return d["path"] == "local.h"; }))
      << deps.dump(2);

  write(source.parent_path() / "local.h", "#pragma once\n#define KWB_WITH_HEADER_OUTPUT_SCALE 2.0f\n");
  KwbRun fail = run_kwb(args);
  EXPECT_EQ(fail.exit_code, 1) << fail.output << fail.errors;
  EXPECT_EQ(fail.json["verdict"], "FAIL");
  EXPECT_NE(fail.json["implementation"]["identity"]["key"], pass.json["implementation"]["identity"]["key"]);
}

}  // namespace
}  // namespace kwb::test
