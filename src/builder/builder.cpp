#include "builder/builder.h"

#include "util/error.h"
#include "util/fs.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "util/subprocess.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

namespace kwb {

namespace fs = std::filesystem;

nlohmann::json to_json(const BuildIdentity& id) {
  return {{"source_sha256", id.source_sha256},     {"command", id.command},
          {"compiler", id.compiler},               {"compiler_version", id.compiler_version},
          {"abi_header_sha256", id.abi_header_sha256}, {"layout_variant", id.layout_variant},
          {"backend", id.backend},
          {"key", id.key},                         {"artifact_sha256", id.artifact_sha256}};
}

namespace {

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
    const fs::path dir = fs::weakly_canonical(bin / rel, ec);
    if (!ec && fs::exists(dir / "libcudart.so", ec)) return dir;
  }
  return {};
}

Toolchain toolchain_for(const fs::path& source, const std::string& backend) {
  const std::string ext = source.extension().string();
  if (backend == "cuda") {
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
  Toolchain t;
  if (ext == ".cpp" || ext == ".cc" || ext == ".cxx") {
    t = {env_or("KWB_CXX", "c++"), {"-std=c++20"}, {}, {}, false};
  } else if (ext == ".c") {
    t = {env_or("KWB_CC", "cc"), {"-std=c11"}, {}, {}, false};
  } else if (ext == ".cu") {
    throw DataError(fmt::format("{}: a .cu implementation needs --backend cuda", source.string()));
  } else {
    throw DataError(
        fmt::format("{}: unsupported source type '{}' (expected .c, .cpp, .cc or .cxx; .cu with --backend cuda)",
                    source.string(), ext));
  }
  t.flags.insert(t.flags.end(), common.begin(), common.end());
  if (backend == "opencl") {
    // Host code against the OpenCL 3.0 headers, linked to the ICD loader (libOpenCL.so.1), which the worker has
    // already opened: the candidate's OpenCL calls bind to the worker's bookkeeping first (backend/opencl_intercept.cpp).
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

// A' builds: a padding function placed before the implementation's code shifts every address in .text by an
// amount that depends on the variant, so code alignment effects (Mytkowicz et al. ASPLOS 2009) differ between
// A and A' and show up in the A/A noise floor instead of hiding in one fixed layout.
std::string layout_pad_source(int variant) {
  return fmt::format(
      "/* kwb layout padding, variant {0} */\n"
      "__attribute__((used, noinline)) void kwb_layout_pad_{0}(void) {{ __asm__ volatile(\".skip {1}, 0x90\"); }}\n",
      variant, 64 * variant + 8 * (variant % 7) + 24);
}

}  // namespace

Artifact build_implementation(const BuildRequest& request) {
  Artifact art;
  if (!fs::is_regular_file(request.source)) {
    throw DataError(fmt::format("{}: implementation source does not exist", request.source.string()));
  }
  art.source = fs::canonical(request.source);
  if (request.backend != "cpu" && request.backend != "opencl" && request.backend != "cuda") {
    throw UsageError(fmt::format("unknown backend '{}' (expected cpu, opencl or cuda)", request.backend));
  }
  const Toolchain tc = toolchain_for(art.source, request.backend);
  const fs::path cuda_lib = tc.nvcc ? cuda_library_dir(tc.compiler) : fs::path();
  const fs::path include_dir = abi_include_dir();

  BuildIdentity& id = art.identity;
  id.source_sha256 = sha256_file(art.source);
  id.compiler = tc.compiler;
  id.compiler_version = compiler_version_of(tc);
  if (id.compiler_version.empty()) {
    throw Error(ExitCode::unavailable, fmt::format("compiler '{}' cannot be run ({})", tc.compiler,
                                                   tc.nvcc ? "install the CUDA toolkit or set KWB_NVCC"
                                                           : "set KWB_CXX / KWB_CC"));
  }
  id.backend = request.backend;
  id.abi_header_sha256 = sha256_file(include_dir / "kwb" / "kernel.h");
  id.layout_variant = request.layout_variant;
  std::string cmd = tc.compiler;
  for (const std::string& f : tc.flags) cmd += " " + f;
  cmd += " -I<kwb-include>";
  if (tc.nvcc && !cuda_lib.empty()) cmd += " -Xlinker=-rpath,<cuda-lib>";
  if (request.layout_variant > 0) cmd += " <layout-pad>";
  cmd += " <source>";
  for (const std::string& f : tc.link_flags) cmd += " " + f;
  cmd += " -o <artifact>";
  id.command = cmd;
  Sha256 key;
  for (const std::string& part : {id.source_sha256, id.command, id.compiler_version, id.abi_header_sha256, id.backend,
                                  std::to_string(id.layout_variant), layout_pad_source(id.layout_variant)}) {
    key.update(part);
    key.update(std::string_view("\0", 1));
  }
  id.key = key.hex_digest();

  const fs::path dir = cache_dir() / "artifacts" / id.key;
  const fs::path so = dir / "impl.so";
  const fs::path meta = dir / "identity.json";
  art.path = so;
  if (fs::exists(so) && fs::exists(meta)) {
    // A cached object is reused only if it still hashes to what was recorded when it was built.
    nlohmann::json recorded = nlohmann::json::parse(read_file(meta), nullptr, false);
    if (!recorded.is_discarded() && recorded.value("artifact_sha256", "") == sha256_file(so)) {
      id.artifact_sha256 = recorded["artifact_sha256"];
      art.ok = true;
      art.from_cache = true;
      return art;
    }
  }

  fs::create_directories(dir);
  const std::string tmp_so = (dir / fmt::format("impl.so.tmp.{}", ::getpid())).string();
  std::vector<std::string> argv = {tc.compiler};
  argv.insert(argv.end(), tc.flags.begin(), tc.flags.end());
  argv.push_back("-I" + include_dir.string());
  if (tc.nvcc && !cuda_lib.empty()) argv.push_back("-Xlinker=-rpath," + cuda_lib.string());
  if (request.layout_variant > 0) {
    const fs::path pad = dir / "layout_pad.c";
    write_file_atomic(pad, layout_pad_source(request.layout_variant));
    // C++ drivers would compile a .c file as C++; the padding is valid in both (nvcc hands a .c to the host
    // compiler).
    argv.push_back(pad.string());
  }
  argv.push_back(art.source.string());
  argv.insert(argv.end(), tc.link_flags.begin(), tc.link_flags.end());
  argv.push_back("-o");
  argv.push_back(tmp_so);
  CommandResult r = run_command(argv, std::chrono::minutes(5));
  art.log = r.output;
  if (r.timed_out || r.exit_code != 0) {
    std::error_code ec;
    fs::remove(tmp_so, ec);
    if (r.timed_out) art.log += "\n(compiler killed after 5 minutes)";
    return art;
  }
  fs::rename(tmp_so, so);
  id.artifact_sha256 = sha256_file(so);
  write_file_atomic(meta, to_json(id).dump(2) + "\n");
  art.ok = true;
  return art;
}

}  // namespace kwb
