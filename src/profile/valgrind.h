// Finding valgrind, the command line kwb runs the profile worker under, and the valgrind-compatible build of an
// artifact for machines whose -march=native code valgrind cannot execute (docs/profile.md, "AVX-512").
#pragma once

#include "builder/builder.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kwb {

struct ValgrindInstall {
  bool found = false;
  std::filesystem::path path;
  std::string version;  // "valgrind-3.19.0"
  std::string reason;   // why not found
};

// $KWB_VALGRIND (a path; set it to a missing file to profile as if valgrind were absent), else `valgrind` on PATH.
ValgrindInstall find_valgrind();

// `valgrind --tool=callgrind ...` with collection off until the worker's client request switches it on around
// kwb_run, cache simulation, uncompressed names, and every file (per-call dumps, valgrind's own log) in out_dir.
std::vector<std::string> callgrind_wrapper(const ValgrindInstall& valgrind, const std::filesystem::path& out_dir);

// The name of valgrind's log inside out_dir, and the line where it says it met an instruction it cannot decode
// ("vex amd64->IR: unhandled instruction bytes: 0x62 ..."; 0x62 starts an AVX-512 instruction), or "" if none.
std::filesystem::path valgrind_log(const std::filesystem::path& out_dir);
std::string valgrind_unhandled_instruction(const std::filesystem::path& out_dir);

// The same source and recorded build command with `extra_flags` before the source (e.g. -mno-avx512f): another
// artifact with its own identity (command, key, SHA-256), cached under cache_root/artifacts/<key> like any other.
// ok == false with the compiler's output in log when it does not build. Only layout variant 0 is supported.
Artifact derived_build(const Artifact& artifact, const std::vector<std::string>& extra_flags,
                       const std::filesystem::path& cache_root);

}  // namespace kwb
