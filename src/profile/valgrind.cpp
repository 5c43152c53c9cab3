#include "profile/valgrind.h"
#include "util/json_text.h"

#include "builder/build_sandbox.h"
#include "builder/builder.h"

#include "util/fs.h"
#include "util/paths.h"
#include "util/sha256.h"
#include "util/subprocess.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace kwb {

namespace fs = std::filesystem;

namespace {

// A folder on PATH this user may not enter (root's, seen by an ordinary user) holds nothing for it: not an error.
bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

ValgrindInstall find_valgrind() {
  ValgrindInstall v;
  if (const char* env = std::getenv("KWB_VALGRIND"); env != nullptr && *env != '\0') {
    v.path = env;
    if (!executable(v.path)) {
      v.reason = fmt::format("valgrind not found: KWB_VALGRIND={} is not an executable file", env);
      return v;
    }
  } else {
    const char* path_env = std::getenv("PATH");
    for (const std::string& dir : split_on(path_env != nullptr ? path_env : "", ':')) {
      if (!dir.empty() && executable(fs::path(dir) / "valgrind")) {
        v.path = fs::path(dir) / "valgrind";
        break;
      }
    }
    if (v.path.empty()) {
      v.reason = "valgrind not found on PATH (Debian: apt-get install valgrind; scripts/setup.sh installs it)";
      return v;
    }
  }
  v.version = first_line_of({v.path.string(), "--version"});
  if (v.version.empty()) {
    v.reason = fmt::format("valgrind not usable: '{} --version' failed", v.path.string());
    return v;
  }
  v.found = true;
  return v;
}

std::vector<std::string> callgrind_wrapper(const ValgrindInstall& valgrind, const fs::path& out_dir) {
  return {valgrind.path.string(), "--tool=callgrind",
          // Nothing is collected until the worker's CALLGRIND_TOGGLE_COLLECT just before kwb_run; the code still
          // runs instrumented throughout, so call stacks and the simulated caches stay exact across the window.
          "--collect-atstart=no", "--cache-sim=yes", "--dump-instr=no", "--compress-strings=no", "--compress-pos=no",
          "--vgdb=no", "--callgrind-out-file=" + (out_dir / "callgrind.out").string(),
          // valgrind's own messages go to a file, not into the worker's output (which the parent reports).
          "--log-file=" + valgrind_log(out_dir).string()};
}

fs::path valgrind_log(const fs::path& out_dir) { return out_dir / "valgrind.log"; }

std::string valgrind_unhandled_instruction(const fs::path& out_dir) {
  std::error_code ec;
  if (!fs::exists(valgrind_log(out_dir), ec)) return "";
  std::string log;
  try {
    log = read_file(valgrind_log(out_dir));
  } catch (const std::exception&) {
    return "";
  }
  const size_t at = log.find("unhandled instruction bytes");
  if (at == std::string::npos) return "";
  const size_t begin = log.rfind('\n', at);
  const size_t end = log.find('\n', at);
  std::string line = log.substr(begin == std::string::npos ? 0 : begin + 1,
                                end == std::string::npos ? std::string::npos : end - (begin + 1));
  if (const size_t pid_end = line.find("== "); line.starts_with("==") && pid_end != std::string::npos) {
    line.erase(0, pid_end + 3);  // "==1234== " prefix
  }
  return line;
}

Artifact derived_build(const Artifact& artifact, const std::vector<std::string>& extra_flags,
                       const fs::path& cache_root) {
  Artifact out = artifact;
  out.from_cache = false;
  out.ok = false;
  out.identity.artifact_sha256.clear();
  if (artifact.identity.layout_variant != 0) {
    out.log = "derived builds of layout variants are not supported";
    return out;
  }
  // The recorded command with the extra flags before the source; placeholders are filled in as the builder does.
  std::vector<std::string> words = split_words(artifact.identity.command);
  if (words.empty()) {
    out.log = "the artifact has no recorded build command";
    return out;
  }
  std::string command;
  for (const std::string& word : words) {
    if (word == "<source>") {
      for (const std::string& f : extra_flags) command += " " + f;
    }
    command += (command.empty() ? "" : " ") + word;
  }
  out.identity.command = command;
  Sha256 key;
  for (const std::string& part : {artifact.identity.key, command}) {
    key.update(part);
    key.update(std::string_view("\0", 1));
  }
  out.identity.key = key.hex_digest();

  // Cached like any artifact, at a fixed path: the path is part of what the worker is told, so a fresh temporary
  // path per run would change the harness's heap state and with it an allocating implementation's counts.
  const fs::path dir = cache_root / "artifacts" / out.identity.key;
  out.path = dir / "impl.so";
  const fs::path meta = dir / "identity.json";
  if (fs::exists(out.path) && fs::exists(meta)) {
    nlohmann::json recorded = nlohmann::json::parse(read_file(meta), nullptr, false);
    if (!recorded.is_discarded() && recorded.value("artifact_sha256", "") == sha256_file(out.path)) {
      out.identity.artifact_sha256 = recorded["artifact_sha256"];
      out.ok = true;
      out.from_cache = true;
      return out;
    }
  }
  fs::create_directories(dir);
  const fs::path tmp = dir / fmt::format("impl.so.tmp.{}", ::getpid());
  std::vector<std::string> argv;
  for (const std::string& word : split_words(command)) {
    if (word == "<source>") {
      argv.push_back(artifact.source.string());
    } else if (word == "<artifact>") {
      argv.push_back(tmp.string());
    } else if (word == "-I<kwb-include>") {
      argv.push_back("-I" + abi_include_dir().string());
    } else {
      argv.push_back(word);
    }
  }
  // Candidate code is compiled only inside the build sandbox (builder/build_sandbox.h), here as everywhere.
  BuildSandboxSpec spec;
  spec.read_only = candidate_files(artifact.source).files;  // the source and its declared files, as in the build
  spec.read_only.push_back(abi_include_dir());
  if (fs::path prefix = compiler_prefix_to_bind(argv.front()); !prefix.empty()) spec.read_only.push_back(prefix);
  spec.writable = dir;
  spec.workdir = artifact.source.parent_path();
  CommandResult r = run_in_build_sandbox(argv, spec);
  out.log = r.output;
  if (r.timed_out || r.exit_code != 0) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return out;
  }
  fs::rename(tmp, out.path);
  out.identity.artifact_sha256 = sha256_file(out.path);
  write_file_atomic(meta, json_text(to_json(out.identity), 2) + "\n");
  out.ok = true;
  return out;
}

}  // namespace kwb
