// Compiles an implementation source into a shared object with a recorded command, and records its identity.
// The build is part of what is judged: the same source with other flags is another implementation.
#pragma once

#include "util/backend_kind.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace kwb {

struct BuildIdentity {
  std::string source_sha256;
  std::string command;                     // the command line with <source>, <artifact>, <kwb-include> placeholders
  std::string compiler;                    // as invoked (c++, cc, or $KWB_CXX / $KWB_CC)
  std::string compiler_version;            // the version line of `compiler --version` (nvcc: its "release" line)
  BackendKind backend = BackendKind::cpu;  // decides the toolchain flags and link libraries
  std::string abi_header_sha256;           // kwb/kernel.h (an oracle: kwb/oracle.h) the source was compiled against
  int layout_variant = 0;  // 0: plain build; n > 0: code shifted by layout_pad_bytes(n) (docs/timing.md)
  // Every file the compile read besides the source and the system/toolchain headers (those are covered by
  // compiler_version): (path, sha256), sorted by path. Paths are relative to the source's folder, or
  // "<kwb-include>/..." for kwb's ABI headers. From the compiler's depfile (and GNU as's, for .incbin).
  std::vector<std::pair<std::string, std::string>> dependencies;
  // SHA-256 over everything above and what reaches the compile besides its command (PATH, the compiler's real path,
  // this CPU for -march=native; build_sandbox.h, build_environment_identity): the cache key.
  std::string key;
  std::string artifact_sha256;  // SHA-256 of the built shared object
};

nlohmann::json to_json(const BuildIdentity& id);
// The inverse of to_json; fields a record written before they existed lacks are left empty.
BuildIdentity build_identity_from_json(const nlohmann::json& j);

struct Artifact {
  std::filesystem::path source;  // absolute
  std::filesystem::path path;    // the shared object, inside the cache
  BuildIdentity identity;
  bool ok = false;
  bool from_cache = false;
  std::string log;  // compiler output (errors name the candidate's file and line)
};

// The code pad of layout variant v: 0 for the plain build (v = 0); for v >= 1, (1031 v) mod 4096 bytes, which
// spreads the variants over a page and, once function alignment (16 bytes) rounds it up, over every 16-byte slot of
// a cache line. 1031 is prime, so no two variants below 4096 share a pad; none is a multiple of 64.
inline size_t layout_pad_bytes(int variant) { return variant <= 0 ? 0 : static_cast<size_t>(variant) * 1031u % 4096u; }

struct BuildRequest {
  std::filesystem::path source;
  int layout_variant = 0;
  BackendKind backend = BackendKind::cpu;  // opencl: host code linked against the ICD loader; cuda: .cu through nvcc
};

// The compiler a candidate of `backend` is built with, as kwb invokes it: $KWB_NVCC or the nvcc found at configure
// time on cuda; $KWB_CXX or c++ otherwise (a .c source takes $KWB_CC or cc). For `kwb doctor`.
std::string implementation_compiler(BackendKind backend);

// The file in a candidate's folder that declares which files beside the source a compile may read: one path per line,
// relative to the folder, '#' starts a comment (docs/candidate-abi.md, "Files beside the source").
inline constexpr const char* k_declared_files = "kwb.files";

// What a compile of `source` may read of its folder: the source itself and every file the folder's kwb.files
// declares (canonical paths; a declared file that does not exist is left out, and the compile says "No such file"),
// and the declarations as normalized text, which is part of the cache key. A declaration that is absolute, leaves
// the folder (.., a symlink out) or names something other than a regular file throws DataError naming its line.
struct CandidateFiles {
  std::vector<std::filesystem::path> files;
  std::string declared;
};
CandidateFiles candidate_files(const std::filesystem::path& source);

// Builds (or reuses from the cache, after re-hashing the cached object) one implementation. The compiler runs in
// the build sandbox (build_sandbox.h): it reads only the toolchain, system headers, kwb's include folder, the
// source and the files beside it that its folder's kwb.files declares (candidate_files); the rest of the folder
// does not exist there. A compile error, or a read outside those, is returned as ok == false with the compiler's
// output and a kwb line saying why; an unreadable source or unsupported extension throws DataError; a machine where
// the sandbox cannot run throws Error(unavailable).
//
// Cache: the key of an identity covers its dependencies, which are known only after a build. As in ccache's direct
// mode, a manifest under the pre-key (everything but the dependencies) records the last build's dependency list; a
// lookup re-hashes every recorded file, and any change or missing file is a miss and a rebuild.
Artifact build_implementation(const BuildRequest& request);

// build_implementation for several requests, the results in the requests' order: every cache lookup first, then the
// compiles that remain, one per CPU kwb may run on at once (build_sandbox.h: build_jobs), each in its own sandbox
// with its own limits. Requests with one cache key (the same request twice, the same bytes in two folders) are
// compiled once, the others then taken from the cache. A layout pool of 8 variants per arm builds in an
// eighth of the time on 16 CPUs, half on 2.
std::vector<Artifact> build_implementations(const std::vector<BuildRequest>& requests);

// Builds (or reuses) a task's oracle (include/kwb/oracle.h) the same way, with the cpu toolchain and flags chosen for
// accuracy instead of speed: -O2, -ffp-contract=off, no fast-math, no -march. `adapter_source`, C that is also valid
// C++, is compiled into the same object before the oracle (kwb's bridge from the worker's kwb_run to kwb_oracle); its
// text is part of the identity, and abi_header_sha256 is kwb/oracle.h's.
Artifact build_oracle(const std::filesystem::path& source, const std::string& adapter_source);

}  // namespace kwb
