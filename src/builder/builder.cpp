#include "builder/builder.h"
#include "util/json_text.h"

#include "builder/build_sandbox.h"
#include "builder/depfile.h"
#include "builder/elf_inspect.h"
#include "util/backend_kind.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "util/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <variant>

namespace kwb {

namespace fs = std::filesystem;

nlohmann::json to_json(const BuildIdentity& id) {
  nlohmann::json deps = nlohmann::json::array();
  for (const auto& [path, sha] : id.dependencies) deps.push_back({{"path", path}, {"sha256", sha}});
  return {{"source_sha256", id.source_sha256},
          {"command", id.command},
          {"compiler", id.compiler},
          {"compiler_version", id.compiler_version},
          {"abi_header_sha256", id.abi_header_sha256},
          {"layout_variant", id.layout_variant},
          {"backend", to_string(id.backend)},
          {"dependencies", deps},
          {"key", id.key},
          {"artifact_sha256", id.artifact_sha256}};
}

BuildIdentity build_identity_from_json(const nlohmann::json& j) {
  BuildIdentity id;
  id.source_sha256 = j.value("source_sha256", "");
  id.command = j.value("command", "");
  id.compiler = j.value("compiler", "");
  id.compiler_version = j.value("compiler_version", "");
  id.backend = parse_backend_field(j.value("backend", ""), "build identity: backend");
  id.abi_header_sha256 = j.value("abi_header_sha256", "");
  id.layout_variant = j.value("layout_variant", 0);
  if (auto it = j.find("dependencies"); it != j.end() && it->is_array()) {
    for (const auto& d : *it) id.dependencies.emplace_back(d.value("path", ""), d.value("sha256", ""));
  }
  id.key = j.value("key", "");
  id.artifact_sha256 = j.value("artifact_sha256", "");
  return id;
}

namespace {

// What a build makes: an implementation (optimized for this machine) or a task's oracle (built for accuracy, with
// kwb's adapter compiled in before it).
enum class BuildPurpose { implementation, oracle };

struct Toolchain {
  std::string compiler;
  std::vector<std::string> flags;       // before the sources
  std::vector<std::string> link_flags;  // after the sources (libraries)
  std::vector<std::string> version_argv;
  bool nvcc = false;
};

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

#ifndef KWB_DEFAULT_NVCC
#define KWB_DEFAULT_NVCC "nvcc"
#endif

// The CUDA runtime library next to the nvcc that builds the candidate; the candidate's rpath points there, so the
// worker and the candidate share one runtime (backend/cuda_backend.cpp opens the same file).
fs::path cuda_library_dir(const std::string& nvcc) {
  fs::path bin = fs::path(nvcc).parent_path();
  if (bin.empty()) return {};
  for (const char* rel : {"../lib64", "../targets/x86_64-linux/lib", "../lib"}) {
    std::error_code ec;
    fs::path dir = fs::weakly_canonical(bin / rel, ec);
    if (!ec && fs::exists(dir / "libcudart.so", ec)) return dir;
  }
  return {};
}

}  // namespace

std::string implementation_compiler(BackendKind backend) {
  return backend == BackendKind::cuda ? env_or("KWB_NVCC", KWB_DEFAULT_NVCC) : env_or("KWB_CXX", "c++");
}

namespace {

Toolchain toolchain_for(const fs::path& source, BackendKind backend, BuildPurpose purpose) {
  const std::string ext = source.extension().string();
  if (backend == BackendKind::cuda) {
    if (ext != ".cu") {
      throw DataError(fmt::format("{}: a cuda implementation must be a .cu file (got '{}')", source.string(), ext));
    }
    // One SASS target plus its PTX (so a newer GPU can still JIT it); KWB_CUDA_ARCH picks another, e.g. 100.
    const std::string arch = env_or("KWB_CUDA_ARCH", "90");
    for (char c : arch) {
      if (c < '0' || c > '9') throw UsageError(fmt::format("KWB_CUDA_ARCH='{}': expected digits such as 90", arch));
    }
    Toolchain t{env_or("KWB_NVCC", KWB_DEFAULT_NVCC),
                {"-O3", "-std=c++17", "-shared", "-Xcompiler=-fPIC,-fvisibility=hidden", "-cudart=shared",
                 fmt::format("-gencode=arch=compute_{0},code=[sm_{0},compute_{0}]", arch)},
                {},
                {},
                true};
    t.version_argv = {t.compiler, "--version"};
    return t;
  }
  // -march=native: the artifact is judged on this machine; the CPU model is part of the recorded environment.
  // -fvisibility=hidden: only the KWB_EXPORT'ed ABI symbols leave the object.
  std::vector<std::string> common = {"-O3", "-march=native", "-fPIC", "-fvisibility=hidden", "-shared"};
  if (purpose == BuildPurpose::oracle) {
    // An oracle is built for accuracy, not speed: every operation rounded as written (no contraction into FMA, no
    // reassociation, NaN and Inf honoured), for the generic x86-64 (or aarch64) target, so its outputs do not
    // depend on which CPU built it.
    common = {"-O2",   "-ffp-contract=off",   "-fno-fast-math", "-fno-finite-math-only", "-fno-associative-math",
              "-fPIC", "-fvisibility=hidden", "-shared"};
  }
  Toolchain t;
  if (ext == ".cpp" || ext == ".cc" || ext == ".cxx") {
    t = {env_or("KWB_CXX", "c++"), {"-std=c++20"}, {}, {}, false};
  } else if (ext == ".c") {
    t = {env_or("KWB_CC", "cc"), {"-std=c11"}, {}, {}, false};
  } else if (ext == ".cu" && purpose == BuildPurpose::implementation) {
    throw DataError(fmt::format("{}: a .cu implementation needs --backend cuda", source.string()));
  } else if (purpose == BuildPurpose::oracle) {
    throw DataError(
        fmt::format("{}: unsupported oracle source type '{}' (expected .c, .cpp, .cc or .cxx)", source.string(), ext));
  } else {
    throw DataError(
        fmt::format("{}: unsupported source type '{}' (expected .c, .cpp, .cc or .cxx; .cu with --backend cuda)",
                    source.string(), ext));
  }
  t.flags.insert(t.flags.end(), common.begin(), common.end());
  if (backend == BackendKind::opencl) {
    // Host code against the OpenCL 3.0 headers, linked to the ICD loader (libOpenCL.so.1), which the worker has
    // already opened: the candidate's OpenCL calls bind to the worker's bookkeeping first
    // (backend/opencl_intercept.cpp).
    t.flags.push_back("-DCL_TARGET_OPENCL_VERSION=300");
    t.link_flags.push_back("-lOpenCL");
  }
  t.version_argv = {t.compiler, "--version"};
  return t;
}

// nvcc's first line names the driver, not the version; the "release" line does ("Cuda compilation tools, release
// 13.0, V13.0.88").
std::string compiler_version_of(const Toolchain& tc) {
  if (!tc.nvcc) return first_line_of(tc.version_argv);
  CommandResult r = run_command(tc.version_argv, std::chrono::seconds(30));
  if (r.timed_out || r.exit_code != 0) return "";
  size_t at = r.output.find("release");
  if (at == std::string::npos) return first_line_of(tc.version_argv);
  size_t begin = r.output.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  const size_t end = r.output.find('\n', at);
  return r.output.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// Layout variants (docs/timing.md, "Layout"): a padding function placed before the implementation's code shifts
// every address in .text by layout_pad_bytes(variant), so each arm is measured over several code layouts instead
// of one (Mytkowicz et al. ASPLOS 2009; Curtsinger & Berger, Stabilizer, ASPLOS 2013).
std::string layout_pad_source(int variant) {
  return fmt::format(
      "/* kwb layout padding, variant {0} */\n"
      "__attribute__((used, noinline)) void kwb_layout_pad_{0}(void) {{ __asm__ volatile(\".skip {1}, 0x90\"); }}\n",
      variant, layout_pad_bytes(variant));
}

constexpr const char* k_include_tag = "<kwb-include>";

// What the sandbox lets the compiler read besides the toolchain: said after every failed build that may have
// tried to read something else.
std::string sandbox_note(const fs::path& folder, const fs::path& include_dir) {
  return fmt::format(
      "kwb: builds run in a sandbox that can read only the toolchain, the system headers, kwb's include folder ({}), "
      "the candidate's source and the files beside it that {} declares; no other file can be #included or "
      ".incbin'ed (docs/candidate-abi.md, \"Files beside the source\")",
      include_dir.string(), (folder / k_declared_files).string());
}

}  // namespace

CandidateFiles candidate_files(const fs::path& source) {
  CandidateFiles out;
  const fs::path real_source = fs::canonical(source);
  const fs::path folder = real_source.parent_path();
  out.files.push_back(real_source);
  const fs::path list = folder / k_declared_files;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(list, ec))) return out;
  if (!fs::is_regular_file(fs::symlink_status(list, ec))) {
    throw DataError(
        fmt::format("{}: not a regular file; it must list the files beside the source a compile may "
                    "read, one per line (docs/candidate-abi.md)",
                    list.string()));
  }
  std::vector<std::string> names;
  std::istringstream lines(read_file(list));
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.erase(0, 1);
    if (line.empty()) continue;
    auto refuse = [&](const std::string& why) {
      throw DataError(fmt::format("{}:{}: '{}' {}; declare files by their path relative to {}", list.string(), number,
                                  line, why, folder.string()));
    };
    const fs::path name = fs::path(line).lexically_normal();
    if (name.is_absolute()) refuse("is absolute");
    if (name.empty() || *name.begin() == "..") refuse("leaves the candidate's folder");
    const fs::path at = folder / name;
    if (!fs::exists(fs::symlink_status(at, ec))) {
      names.push_back(name.string());
      continue;  // the compile that includes it says "No such file"
    }
    const fs::path real = fs::canonical(at, ec);
    if (ec || !path_is_within(real, folder)) refuse("leads outside the candidate's folder");
    if (!fs::is_regular_file(real, ec)) refuse("is not a regular file");
    names.push_back(name.string());
    // At its own path, so that the depfile names it as the source includes it; a symlink inside the folder is
    // bound where it points as well.
    out.files.push_back(at);
    if (real != at) out.files.push_back(real);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const std::string& n : names) out.declared += n + "\n";
  return out;
}

namespace {

// The file a recorded dependency names, or nullopt when the name is not one the builder writes.
std::optional<fs::path> dependency_file(const std::string& name, const fs::path& folder, const fs::path& include_dir) {
  const std::string tag = std::string(k_include_tag) + "/";
  fs::path p = name.starts_with(tag) ? include_dir / name.substr(tag.size()) : folder / name;
  p = p.lexically_normal();
  if (name.empty() || fs::path(name).is_absolute() || !(path_is_within(p, folder) || path_is_within(p, include_dir))) {
    return std::nullopt;
  }
  return p;
}

// The hash of a dependency if it still resolves (after symlinks) inside the candidate's folder or kwb's include
// folder; nullopt when it is missing or leads elsewhere.
std::optional<std::string> hash_dependency(const fs::path& file, const fs::path& folder, const fs::path& include_dir) {
  std::error_code ec;
  const fs::path real = fs::canonical(file, ec);
  if (ec || !fs::is_regular_file(real, ec)) return std::nullopt;
  if (!path_is_within(real, folder) && !path_is_within(real, include_dir)) return std::nullopt;
  return sha256_file(real);
}

std::string full_key(const std::string& pre_key, const std::vector<std::pair<std::string, std::string>>& deps) {
  Sha256 key;
  key.update(pre_key);
  key.update(std::string_view("\0", 1));
  for (const auto& [path, sha] : deps) {
    key.update(path);
    key.update(std::string_view("\0", 1));
    key.update(sha);
    key.update(std::string_view("\0", 1));
  }
  return key.hex_digest();
}

// The manifest of a pre-key: the dependency lists of its last builds, newest first (one per state of the files
// they read, so switching a header back and forth reuses both objects).
constexpr size_t k_manifest_entries = 8;

nlohmann::json read_manifest(const fs::path& manifest) {
  std::error_code ec;
  if (!fs::is_regular_file(manifest, ec)) return nlohmann::json::array();
  nlohmann::json j = nlohmann::json::parse(read_file(manifest), nullptr, false);
  if (j.is_discarded() || !j.contains("entries") || !j["entries"].is_array()) return nlohmann::json::array();
  return j["entries"];
}

// The first recorded dependency list whose files all still hash to what was recorded.
std::optional<std::vector<std::pair<std::string, std::string>>> current_dependencies(const nlohmann::json& entries,
                                                                                     const fs::path& folder,
                                                                                     const fs::path& include_dir) {
  for (const auto& entry : entries) {
    if (!entry.is_object() || !entry.contains("dependencies") || !entry["dependencies"].is_array()) continue;
    std::vector<std::pair<std::string, std::string>> deps;
    bool current = true;
    for (const auto& d : entry["dependencies"]) {
      const std::string name =
          d.is_object() && d.contains("path") && d["path"].is_string() ? d["path"].get<std::string>() : "";
      const std::string sha =
          d.is_object() && d.contains("sha256") && d["sha256"].is_string() ? d["sha256"].get<std::string>() : "";
      const std::optional<fs::path> file = dependency_file(name, folder, include_dir);
      const std::optional<std::string> now = file ? hash_dependency(*file, folder, include_dir) : std::nullopt;
      if (!now || *now != sha) {
        current = false;
        break;
      }
      deps.emplace_back(name, sha);
    }
    if (current) return deps;
  }
  return std::nullopt;
}

// A fresh private folder for one compile, removed when the build is over.
class PrivateDir {
public:
  explicit PrivateDir(const fs::path& parent) {
    fs::create_directories(parent);
    std::string templ = (parent / "build.XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) throw_system_error("mkdtemp", __FILE__, __LINE__, errno);
    m_path = templ;
  }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  ~PrivateDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  const fs::path& path() const { return m_path; }

private:
  fs::path m_path;
};

// An object that compiled but does not export the ABI is a bad source like one that does not compile (exit 65, the
// file named): every worker would refuse it (missing_symbol) in every case, and the fix is in the source.
Artifact& require_abi_exports(Artifact& art) {
  const ElfInspection elf = inspect_shared_object(art.path);
  if (!elf.ok) return art;  // the worker's load refusal (load_failed) says what is wrong with the file
  auto exported = [&](const char* name) {
    return std::any_of(elf.exported.begin(), elf.exported.end(), [&](const ElfSymbol& s) { return s.name == name; });
  };
  if (!exported("kwb_abi_version")) {
    art.log += fmt::format(
        "{}: does not export kwb_abi_version: put KWB_CANDIDATE_ABI once at file scope, after "
        "#include <kwb/kernel.h> (docs/candidate-abi.md)\n",
        art.source.string());
  }
  if (!exported("kwb_run")) {
    art.log += fmt::format(
        "{}: does not export kwb_run: define it as extern \"C\" KWB_EXPORT int kwb_run(const "
        "kwb_call* call) (docs/candidate-abi.md)\n",
        art.source.string());
  }
  art.ok = exported("kwb_abi_version") && exported("kwb_run");
  return art;
}

// A build whose compile is still to run: everything prepare_build decided, for finish_build.
struct PendingBuild {
  Artifact art;
  std::unique_ptr<PrivateDir> work;
  SandboxedCommand command;
  fs::path folder;
  fs::path include_dir;
  fs::path artifacts;
  fs::path manifest;
  std::string pre_key;
};

// The implementation's source, resolved: it must exist, and not lie directly in / (the compiler may read its folder).
fs::path checked_source(const fs::path& source) {
  if (!fs::is_regular_file(source)) {
    throw DataError(fmt::format("{}: implementation source does not exist", source.string()));
  }
  fs::path canonical = fs::canonical(source);
  const fs::path folder = canonical.parent_path();
  if (folder == folder.root_path()) {
    throw DataError(
        fmt::format("{}: an implementation directly in / cannot be built (the compiler may read its "
                    "whole folder): move it into a folder of its own",
                    canonical.string()));
  }
  return canonical;
}

// The compile command as the identity records it: the flags, with placeholders for the paths that differ between
// machines and builds. The dependency-output flags (-MD -MF, -Wa,--MD) change nothing in the object and are not
// recorded.
std::string recorded_command(const Toolchain& tc, bool cuda_rpath, int layout_variant, bool companion) {
  std::string cmd = tc.compiler;
  for (const std::string& f : tc.flags) cmd += " " + f;
  cmd += " -I<kwb-include>";
  if (cuda_rpath) cmd += " -Xlinker=-rpath,<cuda-lib>";
  if (layout_variant > 0) cmd += " <layout-pad>";
  if (companion) cmd += " <companion>";
  cmd += " <source>";
  for (const std::string& f : tc.link_flags) cmd += " " + f;
  cmd += " -o <artifact>";
  return cmd;
}

// The key of everything known before the compile. It also covers what reaches the compile besides the command
// (build_environment_identity: PATH, the compiler's real path, the CPU -march=native targets) and the CUDA library
// folder the rpath names.
std::string pre_compile_key(const BuildIdentity& id, const fs::path& cuda_lib, const std::string& companion_source,
                            const std::string& declared, const std::string& compiler) {
  std::vector<std::string> pre_parts = {id.source_sha256,
                                        id.command,
                                        id.compiler_version,
                                        id.abi_header_sha256,
                                        std::string(to_string(id.backend)),
                                        std::to_string(id.layout_variant),
                                        layout_pad_source(id.layout_variant),
                                        "cuda-lib=" + cuda_lib.string(),
                                        "companion=" + companion_source,
                                        "declared=" + declared};
  for (std::string& e : build_environment_identity(compiler)) pre_parts.push_back(std::move(e));
  Sha256 pre;
  for (const std::string& part : pre_parts) {
    pre.update(part);
    pre.update(std::string_view("\0", 1));
  }
  return pre.hex_digest();
}

// A cached object is reused only if every file the last build read still hashes the same, and the object still
// hashes to what was recorded when it was built. True (art filled in) on a hit.
bool cache_hit(Artifact& art, const fs::path& artifacts, const std::string& pre_key, const fs::path& folder,
               const fs::path& include_dir) {
  BuildIdentity& id = art.identity;
  const auto deps = current_dependencies(read_manifest(artifacts / pre_key / "manifest.json"), folder, include_dir);
  if (!deps) return false;
  id.dependencies = *deps;
  id.key = full_key(pre_key, id.dependencies);
  const fs::path so = artifacts / id.key / "impl.so";
  const fs::path meta = artifacts / id.key / "identity.json";
  art.path = so;
  if (fs::exists(so) && fs::exists(meta)) {
    nlohmann::json recorded = nlohmann::json::parse(read_file(meta), nullptr, false);
    if (!recorded.is_discarded() && recorded.value("artifact_sha256", "") == sha256_file(so)) {
      id.artifact_sha256 = recorded["artifact_sha256"];
      art.ok = true;
      art.from_cache = true;
      return true;
    }
  }
  id.dependencies.clear();
  id.key.clear();
  return false;
}

// The compiler's argv: the layout padding and the companion before the source (each compile rewrites the
// depfiles, and the candidate's must be the last), the dependency outputs, the object in the private folder.
std::vector<std::string> compile_argv(const Toolchain& tc, const BuildIdentity& id, const fs::path& source,
                                      const fs::path& include_dir, const fs::path& cuda_lib, const fs::path& work,
                                      const std::string& companion_source) {
  std::vector<std::string> argv = {tc.compiler};
  argv.insert(argv.end(), tc.flags.begin(), tc.flags.end());
  argv.push_back("-I" + include_dir.string());
  if (tc.nvcc && !cuda_lib.empty()) argv.push_back("-Xlinker=-rpath," + cuda_lib.string());
  if (id.layout_variant > 0) {
    const fs::path pad = work / "layout_pad.c";
    write_file_atomic(pad, layout_pad_source(id.layout_variant));
    // C++ drivers would compile a .c file as C++; the padding is valid in both (nvcc hands a .c to the host
    // compiler).
    argv.push_back(pad.string());
  }
  if (!companion_source.empty()) {
    const fs::path companion = work / "companion.c";
    write_file_atomic(companion, companion_source);
    argv.push_back(companion.string());
  }
  argv.push_back(source.string());
  argv.insert(argv.end(), tc.link_flags.begin(), tc.link_flags.end());
  argv.insert(argv.end(), {"-MD", "-MF", (work / "deps.d").string()});
  // GNU as names the files .incbin and .include read; clang's integrated assembler has no such output, and nvcc
  // runs the assembler again for its device-link stub, which would overwrite the candidate's list.
  const bool gnu_as = !tc.nvcc && id.compiler_version.find("clang") == std::string::npos;
  if (gnu_as) argv.push_back("-Wa,--MD," + (work / "as.d").string());
  argv.push_back("-o");
  argv.push_back((work / "impl.so").string());
  return argv;
}

// Everything of a build before its compile: the identity, the cache lookup (a hit is returned as the artifact) and
// the sandboxed compile command with its private output folder.
std::variant<Artifact, PendingBuild> prepare_build(const BuildRequest& request, BuildPurpose purpose,
                                                   const std::string& companion_source) {
  PendingBuild pending;
  Artifact& art = pending.art;
  art.source = checked_source(request.source);
  const fs::path folder = art.source.parent_path();
  const Toolchain tc = toolchain_for(art.source, request.backend, purpose);
  const fs::path cuda_lib = tc.nvcc ? cuda_library_dir(tc.compiler) : fs::path();
  const fs::path include_dir = fs::weakly_canonical(abi_include_dir());
  const CandidateFiles visible = candidate_files(art.source);

  BuildIdentity& id = art.identity;
  id.source_sha256 = sha256_file(art.source);
  id.compiler = tc.compiler;
  id.compiler_version = compiler_version_of(tc);
  if (id.compiler_version.empty()) {
    throw Error(ExitCode::unavailable,
                fmt::format("compiler '{}' cannot be run ({})", tc.compiler,
                            tc.nvcc ? "install the CUDA toolkit or set KWB_NVCC" : "set KWB_CXX / KWB_CC"));
  }
  id.backend = request.backend;
  id.abi_header_sha256 = sha256_file(include_dir / "kwb" / (purpose == BuildPurpose::oracle ? "oracle.h" : "kernel.h"));
  id.layout_variant = request.layout_variant;
  id.command = recorded_command(tc, tc.nvcc && !cuda_lib.empty(), request.layout_variant, !companion_source.empty());
  const std::string pre_key = pre_compile_key(id, cuda_lib, companion_source, visible.declared, tc.compiler);
  const fs::path artifacts = cache_dir() / "artifacts";
  if (cache_hit(art, artifacts, pre_key, folder, include_dir)) return require_abi_exports(art);

  require_build_sandbox();
  pending.work = std::make_unique<PrivateDir>(artifacts / pre_key);
  BuildSandboxSpec& spec = pending.command.spec;
  // The source and its declared files, never the whole folder: a file beside the source that nobody declared
  // (another candidate's, a secret) does not exist in the sandbox.
  spec.read_only = visible.files;
  spec.read_only.push_back(include_dir);
  if (!cuda_lib.empty()) spec.read_only.push_back(cuda_lib);
  spec.writable = pending.work->path();
  spec.workdir = folder;
  pending.command.argv =
      compile_argv(tc, id, art.source, include_dir, cuda_lib, pending.work->path(), companion_source);
  pending.folder = folder;
  pending.include_dir = include_dir;
  pending.artifacts = artifacts;
  pending.manifest = artifacts / pre_key / "manifest.json";
  pending.pre_key = pre_key;
  return pending;
}

// A failed compile's log, with what kwb knows of why: its limits, or the sandbox hiding a file it looked for.
void explain_failed_compile(const CommandResult& r, const fs::path& folder, const fs::path& include_dir,
                            std::string& log) {
  if (r.timed_out) log += "\n(compiler killed after 5 minutes)";
  // bwrap passes a killed compiler's signal on as 128 + signal; the gcc driver reports its own children's.
  const int sig = r.signal != 0 ? r.signal : (r.exit_code > 128 ? r.exit_code - 128 : 0);
  if (sig == SIGXCPU || sig == SIGKILL || sig == SIGXFSZ || sig == SIGSEGV ||
      log.find("out of memory") != std::string::npos || log.find("memory exhausted") != std::string::npos ||
      log.find("CPU time limit") != std::string::npos || log.find("Killed signal") != std::string::npos ||
      log.find("File size limit") != std::string::npos) {
    log += "\n(kwb: builds are limited to 300 s of CPU, 4 GiB of address space and 1 GiB per file, per process)";
  }
  if (log.find("No such file") != std::string::npos || log.find("file not found") != std::string::npos ||
      log.find("can't open") != std::string::npos || log.find("cannot open") != std::string::npos) {
    log += '\n';
    log += sandbox_note(folder, include_dir);
    log += '\n';
  }
}

// Every file the compile read outside the toolchain roots (its depfiles), hashed into the identity's dependencies.
// False (the log says why) when one leads outside the candidate's folder.
bool record_dependencies(PendingBuild& pending) {
  Artifact& art = pending.art;
  const fs::path& folder = pending.folder;
  const fs::path& include_dir = pending.include_dir;
  const fs::path work = pending.work->path();
  const fs::path depfile = work / "deps.d";
  std::vector<std::string> read;
  for (const fs::path& d : {depfile, work / "as.d"}) {
    std::error_code ec;
    if (!fs::is_regular_file(d, ec)) {
      if (d == depfile) throw InternalError(fmt::format("{}: the compiler wrote no depfile", art.source.string()));
      continue;
    }
    for (std::string& dep : parse_depfile(read_file(d))) read.push_back(std::move(dep));
  }
  std::vector<std::pair<std::string, std::string>>& deps = art.identity.dependencies;
  for (const std::string& dep : read) {
    fs::path p = fs::path(dep).is_absolute() ? fs::path(dep) : folder / dep;
    p = p.lexically_normal();
    if (path_is_within(p, work)) continue;  // kwb's own padding and the compiler's temporaries
    std::string name;
    if (path_is_within(p, folder)) {
      name = p.lexically_relative(folder).string();
    } else if (path_is_within(p, include_dir)) {
      name = std::string(k_include_tag) + "/" + p.lexically_relative(include_dir).string();
    } else {
      continue;  // the toolchain and system headers: compiler_version stands for them
    }
    std::error_code ec;
    if (!fs::exists(p, ec)) continue;                 // a name the assembler records for .file, not a file it read
    if (fs::equivalent(p, art.source, ec)) continue;  // source_sha256
    const std::optional<std::string> sha = hash_dependency(p, folder, include_dir);
    if (!sha) {
      art.log += fmt::format("\n{}: {} leads outside the candidate's folder\n{}\n", art.source.string(), p.string(),
                             sandbox_note(folder, include_dir));
      return false;
    }
    if (std::none_of(deps.begin(), deps.end(), [&](const auto& e) { return e.first == name; })) {
      deps.emplace_back(name, *sha);
    }
  }
  std::sort(deps.begin(), deps.end());
  return true;
}

// The object into the cache under its full key, its identity beside it, and the manifest's entry for the pre-key
// first (read, prepend, write: two kwb processes finishing at once may lose one entry, which costs a rebuild later).
void place_in_cache(PendingBuild& pending) {
  Artifact& art = pending.art;
  BuildIdentity& id = art.identity;
  const fs::path out_so = pending.work->path() / "impl.so";
  const fs::path dir = pending.artifacts / id.key;
  const fs::path so = dir / "impl.so";
  fs::create_directories(dir);
  art.path = so;
  // Never replace an entry another kwb process put there first (its build may differ in bytes, and that process
  // may be copying it into a bundle under its hash right now): keep theirs and use it.
  const bool placed = ::renameat2(AT_FDCWD, out_so.c_str(), AT_FDCWD, so.c_str(), RENAME_NOREPLACE) == 0;
  if (!placed && errno != EEXIST) {
    throw InternalError(fmt::format("rename {} to {}: {}", out_so.string(), so.string(), std::strerror(errno)));
  }
  id.artifact_sha256 = sha256_file(so);
  if (placed) write_file_atomic(dir / "identity.json", json_text(to_json(id), 2) + "\n");
  nlohmann::json deps = nlohmann::json::array();
  for (const auto& [path, sha] : id.dependencies) deps.push_back({{"path", path}, {"sha256", sha}});
  nlohmann::json entries = nlohmann::json::array({nlohmann::json{{"key", id.key}, {"dependencies", deps}}});
  for (const auto& e : read_manifest(pending.manifest)) {
    if (entries.size() >= k_manifest_entries) break;
    if (e.is_object() && e.value("key", "") != id.key) entries.push_back(e);
  }
  write_file_atomic(pending.manifest, json_text(nlohmann::json{{"entries", entries}}, 2) + "\n");
}

// The rest of a build once its compile has run: the compiler's verdict, the files it read (hashed into the
// identity and the cache key), the object moved into the cache and the manifest updated.
Artifact finish_build(PendingBuild& pending, const CommandResult& r) {
  Artifact& art = pending.art;
  art.log = r.output;
  if (r.timed_out || r.exit_code != 0) {
    explain_failed_compile(r, pending.folder, pending.include_dir, art.log);
    return std::move(art);
  }
  if (!record_dependencies(pending)) return std::move(art);
  art.identity.key = full_key(pending.pre_key, art.identity.dependencies);
  place_in_cache(pending);
  art.ok = true;
  return std::move(require_abi_exports(art));
}

Artifact build(const BuildRequest& request, BuildPurpose purpose, const std::string& companion_source) {
  auto prepared = prepare_build(request, purpose, companion_source);
  if (Artifact* cached = std::get_if<Artifact>(&prepared)) return std::move(*cached);
  PendingBuild& pending = std::get<PendingBuild>(prepared);
  return finish_build(pending, run_in_build_sandbox(pending.command.argv, pending.command.spec));
}

}  // namespace

Artifact build_implementation(const BuildRequest& request) { return build(request, BuildPurpose::implementation, ""); }

std::vector<Artifact> build_implementations(const std::vector<BuildRequest>& requests) {
  std::vector<std::optional<std::variant<Artifact, PendingBuild>>> prepared(requests.size());
  std::vector<SandboxedCommand> commands;
  std::vector<size_t> command_of;
  // One compile per cache key at a time: two would race to rename into one cache entry. Two requests share a
  // pre-key when they are the same request, or the same bytes in two folders (a copy of the baseline as candidate);
  // the later ones are built after this round, from the cache (or by a compile of their own, where it failed).
  std::set<std::string> compiling;
  std::vector<size_t> later;
  for (size_t i = 0; i < requests.size(); ++i) {
    prepared[i] = prepare_build(requests[i], BuildPurpose::implementation, "");
    if (auto* p = std::get_if<PendingBuild>(&*prepared[i])) {
      if (!compiling.insert(p->pre_key).second) {
        prepared[i].reset();  // and its private folder with it
        later.push_back(i);
        continue;
      }
      commands.push_back(p->command);
      command_of.push_back(i);
    }
  }
  const std::vector<CommandResult> results = run_all_in_build_sandbox(commands, build_jobs());
  std::vector<Artifact> out(requests.size());
  for (size_t k = 0; k < results.size(); ++k) {
    out[command_of[k]] = finish_build(std::get<PendingBuild>(*prepared[command_of[k]]), results[k]);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!prepared[i]) continue;
    if (auto* cached = std::get_if<Artifact>(&*prepared[i])) out[i] = std::move(*cached);
  }
  for (size_t i : later) out[i] = build(requests[i], BuildPurpose::implementation, "");
  return out;
}

Artifact build_oracle(const fs::path& source, const std::string& adapter_source) {
  return build({source, 0, BackendKind::cpu}, BuildPurpose::oracle, adapter_source);
}

}  // namespace kwb
