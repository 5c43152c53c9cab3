// The environment fingerprint: what machine and software a measurement was taken on. Recorded at freeze and
// compared at final validation, so a verdict never silently spans two machines (or two governors).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace kwb {

inline constexpr const char* k_environment_schema = "kwb.environment";
inline constexpr int k_environment_schema_version = 1;

// Reads the machine: CPU model and flags digest, logical cores, governor (when readable), kernel, hostname,
// compiler, library versions, memory size, and warnings about the machine (e.g. a non-performance governor).
nlohmann::json capture_environment(const std::string& compiler_version);

struct EnvironmentDifference {
  std::string item;
  std::string planned;
  std::string now;
};

// The items that must not change between freeze and final validation (volatile ones, like load average and
// timestamps, are excluded).
std::vector<EnvironmentDifference> compare_environments(const nlohmann::json& planned, const nlohmann::json& now);

}  // namespace kwb
