// The machine's memory bandwidth, measured once per environment with a STREAM-style probe (McCalpin, "Memory
// Bandwidth and Machine Balance", 1995), and the arithmetic that places a workload against it (the memory roof of
// a roofline: Williams, Waterman & Patterson, CACM 2009). Descriptive only: nothing here is ever a verdict.
#pragma once

#include "task/task.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

namespace kwb {

inline constexpr const char* k_bandwidth_schema = "kwb.bandwidth";
inline constexpr int k_bandwidth_schema_version = 1;

// What the probe result is valid for. Another CPU model or kernel is another environment, with its own probe.
struct EnvironmentKey {
  std::string cpu_model;  // /proc/cpuinfo "model name"
  std::string kernel;     // uname -r
  std::string machine;    // uname -m
  uint64_t memory_bytes = 0;
  std::string digest() const;  // SHA-256 of the fields: the cache file's name
};
EnvironmentKey current_environment();

struct BandwidthProbe {
  EnvironmentKey environment;
  uint64_t array_bytes = 0;  // per array; three arrays of doubles
  int trials = 0;
  int threads = 1;            // one core: tasks run candidates single-threaded unless they say otherwise
  double copy_gb_per_s = 0;   // c[i] = a[i]: 16 bytes per element (STREAM's count: no write-allocate traffic)
  double triad_gb_per_s = 0;  // a[i] = b[i] + s * c[i]: 24 bytes per element
  double peak_gb_per_s = 0;   // the larger of the two: the roof workloads are placed against
  std::string measured_at;    // UTC, ISO 8601
  bool from_cache = false;
};

// Runs the probe: arrays of 4x the last-level cache (at least 64 MiB, at most 512 MiB each), best of `trials`.
BandwidthProbe measure_bandwidth(int trials = 5);

// The probe for this environment: read from cache_dir()/bandwidth/<digest>.json, or measured and written there.
BandwidthProbe environment_bandwidth(const std::filesystem::path& cache_root);

nlohmann::json to_json(const BandwidthProbe& p);
// Throws DataError when the JSON is not a kwb.bandwidth record of this schema version.
BandwidthProbe bandwidth_probe_from_json(const nlohmann::json& j);

// The bytes a workload must read and write at least: every input and every output tensor once (a lower bound that
// ignores write-allocate traffic, exactly like the probe's count).
uint64_t min_bytes_moved(const Task& task, const Case& workload);

// bytes / seconds, in GB/s (10^9 bytes per second).
double achieved_gb_per_s(uint64_t bytes, double median_ns);
// achieved / roof. Above 1 means the workload's data came from caches, not from memory.
double roofline_fraction(double achieved_gb_per_s, double peak_gb_per_s);

}  // namespace kwb
