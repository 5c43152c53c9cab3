#include "profile/valgrind.h"

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

bool executable(const fs::path& p) { return fs::is_regular_file(p) && ::access(p.c_str(), X_OK) == 0; }

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
  return {valgrind.path.string(),
          "--tool=callgrind",
          // Nothing is collected until the worker's CALLGRIND_TOGGLE_COLLECT just before kwb_run; the code still
          // runs instrumented throughout, so call stacks and the simulated caches stay exact across the window.
          "--collect-atstart=no",
          "--cache-sim=yes",
          "--dump-instr=no",
          "--compress-strings=no",
          "--compress-pos=no",
          "--vgdb=no",
          "--callgrind-out-file=" + (out_dir / "callgrind.out").string(),
          // valgrind's own messages go to a file, not into the worker's output (which the parent reports).
          "--log-file=" + valgrind_log(out_dir).string()};
}

fs::path valgrind_log(const fs::path& out_dir) { return out_dir / "valgrind.log"; }

bool valgrind_hit_unhandled_instruction(const fs::path& out_dir) {
  std::error_code ec;
  if (!fs::exists(valgrind_log(out_dir), ec)) return false;
  try {
    return read_file(valgrind_log(out_dir)).find("unhandled instruction") != std::string::npos;
  } catch (const std::exception&) {
    return false;
  }
}

Artifact derived_build(const Artifact& artifact, const std::vector<std::string>& extra_flags, const fs::path& dir) {
  Artifact out = artifact;
  out.from_cache = false;
  out.ok = false;
  out.identity.artifact_sha256.clear();
  if (artifact.identity.layout_variant != 0) {
    out.log = "derived builds of layout variants are not supported";
    return out;
  }
  fs::create_directories(dir);
  out.path = dir / "impl.so";
  // The recorded command, placeholders filled in as the builder fills them, the extra flags before the source.
  std::vector<std::string> argv;
  std::string command;
  for (const std::string& word : split_words(artifact.identity.command)) {
    if (word == "<source>") {
      for (const std::string& f : extra_flags) {
        argv.push_back(f);
        command += " " + f;
      }
      argv.push_back(artifact.source.string());
    } else if (word == "<artifact>") {
      argv.push_back(out.path.string());
    } else if (word == "-I<kwb-include>") {
      argv.push_back("-I" + abi_include_dir().string());
    } else {
      argv.push_back(word);
    }
    command += (command.empty() ? "" : " ") + word;
  }
  if (argv.empty()) {
    out.log = "the artifact has no recorded build command";
    return out;
  }
  out.identity.command = command;
  CommandResult r = run_command(argv, std::chrono::minutes(5));
  out.log = r.output;
  if (r.timed_out || r.exit_code != 0) return out;
  out.identity.artifact_sha256 = sha256_file(out.path);
  Sha256 key;
  for (const std::string& part : {artifact.identity.key, command}) {
    key.update(part);
    key.update(std::string_view("\0", 1));
  }
  out.identity.key = key.hex_digest();
  out.ok = true;
  return out;
}

}  // namespace kwb
