// Reading a TOML file of kwb's own (a campaign file, an experiment file) so that every bad input is a DataError (exit
// 65) of one shape: file:line: field: what is wrong; the fix. Shared by campaign/campaign_file.cpp and
// experiment/experiment_file.cpp.
#pragma once

#include "util/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kwb::toml_file {

namespace fs = std::filesystem;

inline int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

// The one shape of every error: file:line: field: what is wrong; fix.
[[noreturn]] inline void fail(const fs::path& file, int line, const std::string& field, const std::string& what) {
  throw DataError(fmt::format("{}:{}: {}: {}", file.string(), line, field, what));
}

class Reader {
public:
  explicit Reader(fs::path file) : m_file(std::move(file)) {}
  const fs::path& file() const { return m_file; }

  // Refuses a key of `t` not in `known`: a typo would otherwise silently mean a default.
  void only(const toml::table& t, const std::string& where, const std::vector<std::string>& known) const {
    for (auto&& [k, v] : t) {
      if (std::find(known.begin(), known.end(), std::string(k.str())) == known.end()) {
        fail(m_file, line_of(v), where.empty() ? std::string(k.str()) : where + "." + std::string(k.str()),
             fmt::format("unknown key; the keys here are {}", fmt::join(known, ", ")));
      }
    }
  }

  std::optional<std::string> text(const toml::table& t, const std::string& key, const std::string& field) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_string()) fail(m_file, line_of(*n), field, "must be a string, e.g. " + field + " = \"...\"");
    return n->value<std::string>();
  }

  // A number in [min, max] (an integer is a number too).
  std::optional<double> number(const toml::table& t, const std::string& key, const std::string& field, double min,
                               double max) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_number()) fail(m_file, line_of(*n), field, fmt::format("must be a number from {} to {}", min, max));
    const double v = n->value<double>().value_or(std::nan(""));
    if (!std::isfinite(v) || v < min || v > max) {
      fail(m_file, line_of(*n), field, fmt::format("{} is out of range: give a number from {} to {}", v, min, max));
    }
    return v;
  }

  std::vector<std::string> texts(const toml::table& t, const std::string& key, const std::string& field) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return {};
    const toml::array* a = n->as_array();
    if (a == nullptr) fail(m_file, line_of(*n), field, "must be an array of strings, e.g. " + field + " = [\"a\"]");
    std::vector<std::string> out;
    for (const toml::node& e : *a) {
      if (!e.is_string()) fail(m_file, line_of(e), field, "every element must be a string");
      out.push_back(*e.value<std::string>());
    }
    return out;
  }

private:
  fs::path m_file;
};

}  // namespace kwb::toml_file
