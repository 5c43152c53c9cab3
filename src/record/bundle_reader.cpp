#include "record/bundle_reader.h"

#include <fmt/format.h>

#include <charconv>
#include <sstream>

namespace kwb {

namespace fs = std::filesystem;

namespace {

std::optional<nlohmann::json> read_json(const BundleFs& bfs, const std::string& rel, std::vector<std::string>& problems,
                                        bool required) {
  std::string why;
  if (bfs.kind(rel) == BundleFs::Kind::missing) {
    if (required) problems.push_back(fmt::format("{}: missing", rel));
    return std::nullopt;
  }
  std::optional<std::string> text = bfs.read(rel, why);
  if (!text) {
    problems.push_back(fmt::format("{}: refused: {}", rel, why));
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) {
    problems.push_back(fmt::format("{}: not valid JSON", rel));
    return std::nullopt;
  }
  if (!j.is_object()) {
    problems.push_back(fmt::format("{}: not a JSON object", rel));
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
  auto bfs = std::make_shared<BundleFs>(dir);
  b.fs = bfs;
  if (!bfs->ok()) {
    b.problems.push_back(bfs->error());
    b.plan_problem = "the bundle folder cannot be read";
    for (auto* j : {&b.environment, &b.stages, &b.decision, &b.controls, &b.final_}) *j = nlohmann::json::object();
    return b;
  }
  b.entries = bfs->walk(b.entries_truncated);
  // Absent files read as empty objects, so views of a damaged bundle render (and say what is missing).
  auto req = [&](const char* name) { return read_json(*bfs, name, b.problems, true).value_or(nlohmann::json::object()); };
  if (std::optional<nlohmann::json> plan = read_json(*bfs, "plan.json", b.problems, true)) {
    try {
      b.plan = plan_from_json(*plan);
    } catch (const json_fields::FormatError& e) {
      b.plan_problem = e.what();
    }
  } else {
    b.plan_problem = "missing or unreadable";
  }
  b.environment = req("environment.json");
  b.stages = req("stages.json");
  b.decision = req("decision.json");
  b.controls = read_json(*bfs, "controls.json", b.problems, false).value_or(nlohmann::json::object());
  b.final_ = read_json(*bfs, "final.json", b.problems, false).value_or(nlohmann::json::object());
  b.aa = read_json(*bfs, "comparisons/aa.json", b.problems, false);
  b.ab = read_json(*bfs, "comparisons/ab.json", b.problems, false);
  for (const BundleFs::Entry& e : b.entries) {
    for (const std::string sub : {"checks", "profile"}) {
      const std::string prefix = sub + "/";
      if (e.rel.rfind(prefix, 0) != 0 || e.rel.find('/', prefix.size()) != std::string::npos) continue;
      if (e.rel.size() < prefix.size() + 6 || e.rel.substr(e.rel.size() - 5) != ".json") continue;
      const std::string stem = e.rel.substr(prefix.size(), e.rel.size() - prefix.size() - 5);
      if (auto j = read_json(*bfs, e.rel, b.problems, true)) (sub == "checks" ? b.checks : b.profiles)[stem] = *j;
    }
  }
  std::string why;
  if (bfs->kind("samples.csv") != BundleFs::Kind::missing) {
    std::optional<std::string> text = bfs->read("samples.csv", why);
    if (!text) {
      b.problems.push_back(fmt::format("samples.csv: refused: {}", why));
      return b;
    }
    std::istringstream in(*text);
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
      // device_ns (the 12th field) came with the device backends, the layout columns (13-15) with layout
      // randomization, the CPU watch's (16-17) after, the charge's (18-19), then the device transfers' (20-21); bundles
      // without them stay readable.
      if (f.size() == 14) f.emplace_back();  // getline drops an empty last field
      bool layout_ok = true;
      if (f.size() == 21) {
        // A device call's uploads and read-back, as CPU and wall time (recorded, not charged: util/cpu_watch.h).
        r.has_outside = true;
        layout_ok = parse_int(f[19], r.outside_cpu_ns) && parse_int(f[20], r.outside_wall_ns) &&
                    r.outside_cpu_ns >= -1 && r.outside_wall_ns >= -1 && (r.outside_cpu_ns < 0) == (r.outside_wall_ns < 0);
      }
      if (f.size() == 19 || f.size() == 21) {
        // The charge: the go-to-done window and the CPU between calls (util/cpu_watch.h).
        r.has_charge = true;
        layout_ok = layout_ok && parse_int(f[17], r.window_ns) && parse_int(f[18], r.gap_cpu_ns) &&
                    r.window_ns >= 0 && r.gap_cpu_ns >= -1;
      }
      if (f.size() == 17 || f.size() == 19 || f.size() == 21) {
        r.has_cpu_watch = true;
        layout_ok = layout_ok && parse_int(f[15], r.pre_cpu_ns) && parse_int(f[16], r.post_cpu_ns) &&
                    r.pre_cpu_ns >= -1 && r.post_cpu_ns >= -1;
      }
      if (f.size() == 15 || f.size() == 17 || f.size() == 19 || f.size() == 21) {
        r.has_layout = true;
        layout_ok = layout_ok && parse_int(f[12], r.layout) && parse_int(f[13], r.stack_offset);
        std::stringstream offs(f[14]);
        for (std::string o; layout_ok && std::getline(offs, o, '/');) {
          uint32_t v = 0;
          layout_ok = parse_int(o, v);
          r.tensor_offsets.push_back(v);
        }
      }
      if ((f.size() != 11 && f.size() != 12 && f.size() != 15 && f.size() != 17 && f.size() != 19 && f.size() != 21) ||
          !layout_ok ||
          (f.size() >= 12 && !parse_int(f[11], r.device_ns)) ||
          !parse_int(f[2], r.block) || !parse_int(f[4], r.order_position) ||
          !parse_int(f[5], r.pid) || !parse_int(f[6], r.sample_index) || !parse_int(f[7], warm) ||
          !parse_int(f[8], r.input_set) || !parse_int(f[9], r.ns) || !parse_int(f[10], valid) || r.ns < 0 ||
          (warm != 0 && warm != 1) || (valid != 0 && valid != 1)) {
        b.problems.push_back(fmt::format("samples.csv:{}: malformed row '{}'", n, line.substr(0, 200)));
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
