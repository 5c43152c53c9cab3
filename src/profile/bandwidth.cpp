#include "profile/bandwidth.h"
#include "util/json_text.h"

#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <memory>

namespace kwb {

namespace fs = std::filesystem;

std::string EnvironmentKey::digest() const {
  return sha256_hex(fmt::format("{}\n{}\n{}\n{}", cpu_model, kernel, machine, memory_bytes));
}

EnvironmentKey current_environment() {
  EnvironmentKey k;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.starts_with("model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) k.cpu_model = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  }
  if (k.cpu_model.empty()) k.cpu_model = "unknown";
  utsname u{};
  if (::uname(&u) == 0) {
    k.kernel = u.release;
    k.machine = u.machine;
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) k.memory_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  return k;
}

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

uint64_t last_level_cache_bytes() {
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long v = ::sysconf(name);
    if (v > 0) return static_cast<uint64_t>(v);
  }
  return 32ull << 20;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

BandwidthProbe measure_bandwidth(int trials) {
  BandwidthProbe p;
  p.environment = current_environment();
  p.trials = std::max(trials, 1);
  // STREAM's rule: each array at least 4x the last-level cache, so no trial is served from cache. The upper bound
  // keeps the probe at ~1.5 GiB on machines that report a huge (all-sockets) last-level cache.
  p.array_bytes = std::clamp<uint64_t>(4 * last_level_cache_bytes(), 64ull << 20, 512ull << 20);
  const size_t n = p.array_bytes / sizeof(double);
  auto a = std::make_unique_for_overwrite<double[]>(n);
  auto b = std::make_unique_for_overwrite<double[]>(n);
  auto c = std::make_unique_for_overwrite<double[]>(n);
  for (size_t i = 0; i < n; ++i) {  // first touch: page faults stay out of the timed loops
    a[i] = 1.0;
    b[i] = 2.0;
    c[i] = 0.0;
  }
  const double s = 3.0;
  double best_copy = 1e300, best_triad = 1e300;
  for (int t = 0; t < p.trials; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; ++i) c[i] = a[i];
    best_copy = std::min(best_copy, seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    best_triad = std::min(best_triad, seconds_since(t0));
  }
  // The arrays' contents are observable, so the compiler keeps every loop.
  volatile double sink = a[n / 2] + c[n / 3];
  (void)sink;
  p.copy_gb_per_s = 2.0 * static_cast<double>(p.array_bytes) / best_copy / 1e9;
  p.triad_gb_per_s = 3.0 * static_cast<double>(p.array_bytes) / best_triad / 1e9;
  p.peak_gb_per_s = std::max(p.copy_gb_per_s, p.triad_gb_per_s);
  p.measured_at = utc_now();
  return p;
}

nlohmann::json to_json(const BandwidthProbe& p) {
  return {{"schema", k_bandwidth_schema},
          {"schema_version", k_bandwidth_schema_version},
          {"environment",
           {{"cpu_model", p.environment.cpu_model},
            {"kernel", p.environment.kernel},
            {"machine", p.environment.machine},
            {"memory_bytes", p.environment.memory_bytes},
            {"digest", p.environment.digest()}}},
          {"method",
           "STREAM-style copy and triad over three arrays of doubles, one thread, best of trials; bytes "
           "counted as STREAM counts them (no write-allocate traffic)"},
          {"array_bytes", p.array_bytes},
          {"trials", p.trials},
          {"threads", p.threads},
          {"copy_gb_per_s", p.copy_gb_per_s},
          {"triad_gb_per_s", p.triad_gb_per_s},
          {"peak_gb_per_s", p.peak_gb_per_s},
          {"measured_at", p.measured_at},
          {"from_cache", p.from_cache}};
}

BandwidthProbe bandwidth_probe_from_json(const nlohmann::json& j) {
  if (!j.is_object() || j.value("schema", "") != k_bandwidth_schema ||
      j.value("schema_version", 0) != k_bandwidth_schema_version) {
    throw DataError("not a kwb.bandwidth record of schema version " + std::to_string(k_bandwidth_schema_version));
  }
  try {
    BandwidthProbe p;
    const auto& e = j.at("environment");
    p.environment.cpu_model = e.at("cpu_model");
    p.environment.kernel = e.at("kernel");
    p.environment.machine = e.at("machine");
    p.environment.memory_bytes = e.at("memory_bytes");
    p.array_bytes = j.at("array_bytes");
    p.trials = j.at("trials");
    p.threads = j.at("threads");
    p.copy_gb_per_s = j.at("copy_gb_per_s");
    p.triad_gb_per_s = j.at("triad_gb_per_s");
    p.peak_gb_per_s = j.at("peak_gb_per_s");
    p.measured_at = j.at("measured_at");
    return p;
  } catch (const nlohmann::json::exception& ex) {
    throw DataError(std::string("kwb.bandwidth record: ") + ex.what());
  }
}

BandwidthProbe environment_bandwidth(const fs::path& cache_root) {
  const EnvironmentKey env = current_environment();
  const fs::path file = cache_root / "bandwidth" / (env.digest() + ".json");
  if (fs::exists(file)) {
    try {
      BandwidthProbe p = bandwidth_probe_from_json(nlohmann::json::parse(read_file(file)));
      // The digest names the file; the fields inside must agree, or the file is not this environment's.
      if (p.environment.digest() == env.digest() && p.peak_gb_per_s > 0) {
        p.from_cache = true;
        return p;
      }
    } catch (const std::exception&) {
      // A damaged or foreign record is measured again and replaced.
    }
  }
  BandwidthProbe p = measure_bandwidth();
  fs::create_directories(file.parent_path());
  write_file_atomic(file, json_text(to_json(p), 2) + "\n");
  return p;
}

uint64_t min_bytes_moved(const Task& task, const Case& workload) {
  uint64_t bytes = 0;
  for (const auto* list : {&task.signature.inputs, &task.signature.outputs}) {
    for (const TensorSpec& t : *list) bytes += resolve_shape(t, workload).elements() * dtype_size(t.dtype);
  }
  return bytes;
}

double achieved_gb_per_s(uint64_t bytes, double median_ns) {
  if (!(median_ns > 0)) return 0.0;
  return static_cast<double>(bytes) / median_ns;  // bytes per ns == GB/s
}

double roofline_fraction(double achieved, double peak) {
  if (!(peak > 0)) return 0.0;
  return achieved / peak;
}

}  // namespace kwb
