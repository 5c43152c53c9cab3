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
          {"key", id.key},                         {"artifact_sha256", id.artifact_sha256}};
}

namespace {

struct Toolchain {
  std::string compiler;
  std::vector<std::string> flags;
};

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

Toolchain toolchain_for(const fs::path& source) {
  const std::string ext = source.extension().string();
  // -march=native: the artifact is judged on this machine; the CPU model is part of the recorded environment.
  // -fvisibility=hidden: only the KWB_EXPORT'ed ABI symbols leave the object.
  std::vector<std::string> common = {"-O3", "-march=native", "-fPIC", "-fvisibility=hidden", "-shared"};
  if (ext == ".cpp" || ext == ".cc" || ext == ".cxx") {
    Toolchain t{env_or("KWB_CXX", "c++"), {"-std=c++20"}};
    t.flags.insert(t.flags.end(), common.begin(), common.end());
    return t;
  }
  if (ext == ".c") {
    Toolchain t{env_or("KWB_CC", "cc"), {"-std=c11"}};
    t.flags.insert(t.flags.end(), common.begin(), common.end());
    return t;
  }
  throw DataError(fmt::format("{}: unsupported source type '{}' (expected .c, .cpp, .cc or .cxx)", source.string(), ext));
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
  const Toolchain tc = toolchain_for(art.source);
  const fs::path include_dir = abi_include_dir();

  BuildIdentity& id = art.identity;
  id.source_sha256 = sha256_file(art.source);
  id.compiler = tc.compiler;
  id.compiler_version = first_line_of({tc.compiler, "--version"});
  if (id.compiler_version.empty()) {
    throw Error(ExitCode::unavailable, fmt::format("compiler '{}' cannot be run (set KWB_CXX / KWB_CC)", tc.compiler));
  }
  id.abi_header_sha256 = sha256_file(include_dir / "kwb" / "kernel.h");
  id.layout_variant = request.layout_variant;
  std::string cmd = tc.compiler;
  for (const std::string& f : tc.flags) cmd += " " + f;
  cmd += " -I<kwb-include>";
  if (request.layout_variant > 0) cmd += " <layout-pad>";
  cmd += " <source> -o <artifact>";
  id.command = cmd;
  Sha256 key;
  for (const std::string& part : {id.source_sha256, id.command, id.compiler_version, id.abi_header_sha256,
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
  if (request.layout_variant > 0) {
    const fs::path pad = dir / "layout_pad.c";
    write_file_atomic(pad, layout_pad_source(request.layout_variant));
    // C++ drivers would compile a .c file as C++; the padding is valid in both.
    argv.push_back(pad.string());
  }
  argv.push_back(art.source.string());
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
