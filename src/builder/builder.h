// Compiles an implementation source into a shared object with a recorded command, and records its identity.
// The build is part of what is judged: the same source with other flags is another implementation.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace kwb {

struct BuildIdentity {
  std::string source_sha256;
  std::string command;            // the command line with <source>, <artifact>, <kwb-include> placeholders
  std::string compiler;           // as invoked (c++, cc, or $KWB_CXX / $KWB_CC)
  std::string compiler_version;   // the version line of `compiler --version` (nvcc: its "release" line)
  std::string backend;            // cpu, opencl or cuda: decides the toolchain flags and link libraries
  std::string abi_header_sha256;  // kwb/kernel.h the source was compiled against
  int layout_variant = 0;         // 0: plain build; n > 0: A' copies with n-dependent code padding
  std::string key;                // SHA-256 over everything above: the cache key
  std::string artifact_sha256;    // SHA-256 of the built shared object
};

nlohmann::json to_json(const BuildIdentity& id);

struct Artifact {
  std::filesystem::path source;  // absolute
  std::filesystem::path path;    // the shared object, inside the cache
  BuildIdentity identity;
  bool ok = false;
  bool from_cache = false;
  std::string log;               // compiler output (errors name the candidate's file and line)
};

struct BuildRequest {
  std::filesystem::path source;
  int layout_variant = 0;
  std::string backend = "cpu";  // opencl: host code linked against the ICD loader; cuda: .cu through nvcc
};

// Builds (or reuses from the cache, after re-hashing the cached object) one implementation. A compile error is
// returned as ok == false with the compiler's output; an unreadable source or unsupported extension throws
// DataError.
Artifact build_implementation(const BuildRequest& request);

}  // namespace kwb
