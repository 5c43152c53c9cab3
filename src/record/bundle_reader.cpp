#include "record/bundle_reader.h"

#include "util/fs.h"

#include <fmt/format.h>

#include <charconv>
#include <sstream>

namespace kwb {

namespace fs = std::filesystem;

namespace {

std::optional<nlohmann::json> read_json(const fs::path& p, std::vector<std::string>& problems, bool required) {
  if (!fs::exists(p)) {
    if (required) problems.push_back(fmt::format("{}: missing", p.filename().string()));
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(read_file(p), nullptr, false);
  if (j.is_discarded()) {
    problems.push_back(fmt::format("{}: not valid JSON", p.filename().string()));
    return std::nullopt;
  }
  return j;
}

template <typename T>
bool parse_int(const std::string& s, T& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

BundleData read_bundle(const fs::path& dir) {
  BundleData b;
  b.dir = dir;
  // Absent files read as empty objects, so views of a damaged bundle render (and say what is missing).
  auto req = [&](const char* name) {
    return read_json(dir / name, b.problems, true).value_or(nlohmann::json::object());
  };
  b.plan = req("plan.json");
  b.environment = req("environment.json");
  b.stages = req("stages.json");
  b.decision = req("decision.json");
  b.controls = read_json(dir / "controls.json", b.problems, false).value_or(nlohmann::json::object());
  b.final_ = read_json(dir / "final.json", b.problems, false).value_or(nlohmann::json::object());
  b.aa = read_json(dir / "comparisons" / "aa.json", b.problems, false);
  b.ab = read_json(dir / "comparisons" / "ab.json", b.problems, false);
  for (const char* sub : {"checks", "profile"}) {
    if (!fs::is_directory(dir / sub)) continue;
    for (const auto& e : fs::directory_iterator(dir / sub)) {
      if (e.path().extension() != ".json") continue;
      if (auto j = read_json(e.path(), b.problems, true)) {
        (std::string(sub) == "checks" ? b.checks : b.profiles)[e.path().stem().string()] = *j;
      }
    }
  }
  if (fs::exists(dir / "samples.csv")) {
    std::istringstream in(read_file(dir / "samples.csv"));
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (n == 1) continue;  // header
      std::vector<std::string> f;
      std::stringstream ss(line);
      for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
      SampleRow r;
      r.line = n;
      int warm = 0, valid = 0;
      // device_ns (the 12th field) came with the device backends; bundles without it stay readable.
      if ((f.size() != 11 && f.size() != 12) || (f.size() == 12 && !parse_int(f[11], r.device_ns)) ||
          !parse_int(f[2], r.block) || !parse_int(f[4], r.order_position) ||
          !parse_int(f[5], r.pid) || !parse_int(f[6], r.sample_index) || !parse_int(f[7], warm) ||
          !parse_int(f[8], r.input_set) || !parse_int(f[9], r.ns) || !parse_int(f[10], valid)) {
        b.problems.push_back(fmt::format("samples.csv:{}: malformed row '{}'", n, line));
        continue;
      }
      r.comparison = f[0];
      r.workload = f[1];
      r.arm = f[3];
      r.warmup = warm != 0;
      r.output_valid = valid != 0;
      b.samples.push_back(r);
    }
  }
  return b;
}

}  // namespace kwb
