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

}  // namespace

BundleData read_bundle(const fs::path& dir) {
  BundleData b;
  b.dir = dir;
  auto bfs = std::make_shared<BundleFs>(dir);
  b.fs = bfs;
  if (!bfs->ok()) {
    b.problems.push_back(bfs->error());
    b.plan_problem = "the bundle folder cannot be read";
    for (auto* j : {&b.environment, &b.stages, &b.controls, &b.final_}) *j = nlohmann::json::object();
    return b;
  }
  b.entries = bfs->walk(b.entries_truncated);
  // Absent files read as empty objects, so views of a damaged bundle render (and say what is missing).
  auto req = [&](const char* name) {
    return read_json(*bfs, name, b.problems, true).value_or(nlohmann::json::object());
  };
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
  if (std::optional<nlohmann::json> decision = read_json(*bfs, "decision.json", b.problems, true)) {
    try {
      b.decision = decision_record_from_json(*decision);
    } catch (const json_fields::FormatError& e) {
      b.decision_problem = e.what();
    }
  }
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
    b.samples = parse_samples_csv(*text, b.problems);
  }
  return b;
}

}  // namespace kwb
