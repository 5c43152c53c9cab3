#include "record/environment.h"

#include "util/sha256.h"

#include <fmt/format.h>
#include <openssl/opensslv.h>
#include <sys/utsname.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace kwb {

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// "model name" and "flags" of the first processor in /proc/cpuinfo.
std::pair<std::string, std::string> cpu_model_and_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line)) {
    auto value = [&]() {
      auto c = line.find(':');
      return c == std::string::npos ? std::string() : line.substr(line.find_first_not_of(" \t", c + 1));
    };
    if (model.empty() && line.rfind("model name", 0) == 0) model = value();
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = value();
    if (!model.empty() && !flags.empty()) break;
  }
  return {model, flags};
}

std::string mem_total() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) == 0) return line.substr(line.find_first_not_of(' ', 9));
  }
  return "";
}

// Items compared at final validation: changing any of them changes what the numbers mean.
const char* const k_stable_items[] = {"cpu_model", "cpu_flags_sha256", "logical_cores", "governor",
                                      "kernel",    "hostname",         "compiler",      "memory_total"};

}  // namespace

nlohmann::json capture_environment(const std::string& compiler_version) {
  auto [model, flags] = cpu_model_and_flags();
  utsname u{};
  ::uname(&u);
  std::string governor = read_first_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
  nlohmann::json warnings = nlohmann::json::array();
  if (governor.empty()) {
    governor = "unreadable";
    warnings.push_back("CPU frequency governor not readable (a VM?): clock changes cannot be ruled out");
  } else if (governor != "performance") {
    warnings.push_back(fmt::format("governor is '{}', not 'performance': frequency may vary during the run", governor));
  }
  const std::string turbo = read_first_line("/sys/devices/system/cpu/intel_pstate/no_turbo");
  if (turbo == "0") warnings.push_back("turbo boost is on: sustained clocks depend on temperature");
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores <= 2)
    warnings.push_back(fmt::format("only {} logical cores: the harness and the kernel share them", cores));
  std::ifstream loadavg("/proc/loadavg");
  std::string load;
  std::getline(loadavg, load);
  return {{"schema", k_environment_schema},
          {"schema_version", k_environment_schema_version},
          {"cpu_model", model},
          {"cpu_flags_sha256", sha256_hex(std::string_view(flags))},
          {"logical_cores", cores},
          {"governor", governor},
          {"kernel", fmt::format("{} {} {}", u.sysname, u.release, u.machine)},
          {"hostname", u.nodename},
          {"compiler", compiler_version},
          {"memory_total", mem_total()},
          {"libraries",
           {{"openssl", OPENSSL_VERSION_TEXT},
            {"toml++", fmt::format("{}.{}.{}", TOML_LIB_MAJOR, TOML_LIB_MINOR, TOML_LIB_PATCH)},
            {"nlohmann_json", fmt::format("{}.{}.{}", NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR,
                                          NLOHMANN_JSON_VERSION_PATCH)},
            {"fmt", FMT_VERSION}}},
          {"load_average_at_capture", load},
          {"warnings", warnings}};
}

std::vector<EnvironmentDifference> compare_environments(const nlohmann::json& planned, const nlohmann::json& now) {
  std::vector<EnvironmentDifference> out;
  for (const char* item : k_stable_items) {
    const nlohmann::json a = planned.value(item, nlohmann::json());
    const nlohmann::json b = now.value(item, nlohmann::json());
    if (a != b)
      out.push_back(
          {item, a.is_string() ? a.get<std::string>() : a.dump(), b.is_string() ? b.get<std::string>() : b.dump()});
  }
  return out;
}

}  // namespace kwb
