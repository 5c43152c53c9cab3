// The strict reader of one table of task.toml (task/manifest.cpp): typed fields, each error naming the file, the line
// and the field, and every key it was not asked for reported as unknown (with the field it was probably meant to be).
#pragma once

#include "util/error.h"
#include "util/text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kwb {

// Reads one TOML table, remembering which keys were consumed so the rest can be reported as unknown.
class TableReader {
public:
  TableReader(const toml::table& table, std::string path, const std::string& file)
      : m_table(table), m_path(std::move(path)), m_file(file) {}

  int line() const { return line_of(m_table); }

  [[noreturn]] void fail(const toml::node* node, const std::string& key, const std::string& message) const {
    int l = node != nullptr ? line_of(*node) : line();
    throw DataError(fmt::format("{}:{}: field '{}': {}", m_file, l, field(key), message));
  }

  std::string field(const std::string& key) const { return m_path.empty() ? key : m_path + "." + key; }
  const std::string& file() const { return m_file; }

  const toml::node* get(const std::string& key) {
    m_seen.insert(key);
    return m_table.get(key);
  }

  const toml::node& require(const std::string& key, const char* what) {
    const toml::node* n = get(key);
    if (n == nullptr) {
      reject_misspelling_of(key);
      throw DataError(fmt::format("{}:{}: missing field '{}' (expected {})", m_file, line(), field(key), what));
    }
    return *n;
  }

  std::string string(const std::string& key) {
    const toml::node& n = require(key, "a string");
    if (!n.is_string()) fail(&n, key, fmt::format("expected a string, got {}", type_name(n)));
    return std::string(*n.value<std::string>());
  }

  std::optional<std::string> optional_string(const std::string& key) {
    if (m_table.get(key) == nullptr) {
      m_seen.insert(key);
      return std::nullopt;
    }
    return string(key);
  }

  double number(const std::string& key) {
    const toml::node& n = require(key, "a number");
    if (!n.is_number()) fail(&n, key, fmt::format("expected a number, got {}", type_name(n)));
    return *n.value<double>();
  }

  std::optional<double> optional_number(const std::string& key) {
    if (m_table.get(key) == nullptr) {
      m_seen.insert(key);
      return std::nullopt;
    }
    return number(key);
  }

  // A number that must be finite (not inf or nan, which TOML spells inf and nan) and within [min, max].
  double finite_number(const std::string& key, double min, double max) {
    const double v = number(key);
    if (!std::isfinite(v) || v < min || v > max) {
      fail(get(key), key, fmt::format("must be a finite number from {} to {} (got {})", min, max, v));
    }
    return v;
  }

  std::optional<double> optional_finite(const std::string& key, double min, double max) {
    if (m_table.get(key) == nullptr) {
      m_seen.insert(key);
      return std::nullopt;
    }
    return finite_number(key, min, max);
  }

  int64_t integer(const std::string& key) {
    const toml::node& n = require(key, "an integer");
    if (!n.is_integer()) fail(&n, key, fmt::format("expected an integer, got {}", type_name(n)));
    return *n.value<int64_t>();
  }

  const toml::table& table(const std::string& key) {
    const toml::node& n = require(key, "a table");
    if (!n.is_table()) fail(&n, key, fmt::format("expected a table, got {}", type_name(n)));
    return *n.as_table();
  }

  const toml::array& array(const std::string& key) {
    const toml::node& n = require(key, "an array");
    if (!n.is_array()) fail(&n, key, fmt::format("expected an array, got {}", type_name(n)));
    return *n.as_array();
  }

  // Called when every known key has been read: anything left is a typo or a field kwb does not have.
  void reject_unknown_keys() const {
    for (const auto& [k, v] : m_table) {
      std::string key(k.str());
      if (!m_seen.contains(key)) {
        std::vector<std::string> known(m_seen.begin(), m_seen.end());
        const std::optional<std::string> guess = closest_match(key, known);
        throw DataError(fmt::format("{}:{}: unknown field '{}' ({}known fields here: {})", m_file, line_of(v),
                                    field(key), guess ? fmt::format("did you mean '{}'? ", *guess) : "",
                                    fmt::join(known, ", ")));
      }
    }
  }

  // `key` is missing: a key of this table that is no field of task.toml and a typo away from `key` is what the
  // author meant ([tolerence] for [tolerance]), so it is reported at its own line rather than `key` at the table's.
  void reject_misspelling_of(const std::string& key) const {
    for (const auto& [k, v] : m_table) {
      const std::string other(k.str());
      if (m_seen.contains(other) || k_field_names.contains(other)) continue;
      if (closest_match(other, {key})) {
        throw DataError(fmt::format("{}:{}: unknown field '{}' (did you mean '{}'? '{}' is required here)", m_file,
                                    line_of(v), field(other), key, field(key)));
      }
    }
  }

  static int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

  static const char* type_name(const toml::node& n) {
    switch (n.type()) {
      case toml::node_type::string:
        return "a string";
      case toml::node_type::integer:
        return "an integer";
      case toml::node_type::floating_point:
        return "a float";
      case toml::node_type::boolean:
        return "a boolean";
      case toml::node_type::array:
        return "an array";
      case toml::node_type::table:
        return "a table";
      default:
        return "a date/time";
    }
  }

private:
  // Every fixed key of the format (docs/task-format.md): a key that is one of them is never taken for a misspelling.
  // clang-format off
  inline static const std::set<std::string> k_field_names = {
      "name", "description", "oracle", "threads", "signature", "tolerance", "cases", "backends", "inputs", "outputs",
      "scalars", "dtype", "shape", "distribution", "scale", "mean", "low", "high", "value", "default", "rtol",
      "atol", "role", "dims", "seed", "baseline", "reference", "controls", "source", "expect", "special_fraction",
      "special_value", "base", "replace", "with", "multiple_of", "min", "equal_to", "mode", "ulp", "reads", "shared",
      "same_margin_pct"
  };
  // clang-format on

  const toml::table& m_table;
  std::string m_path;
  const std::string& m_file;
  std::set<std::string> m_seen;
};

}  // namespace kwb
