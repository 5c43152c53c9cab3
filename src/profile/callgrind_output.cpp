#include "profile/callgrind_output.h"
#include "util/text.h"

#include "util/error.h"

#include <fmt/format.h>

#include <charconv>
#include <map>
#include <optional>
#include <utility>

namespace kwb {

uint64_t CallgrindDump::event(const std::vector<uint64_t>& costs, std::string_view name) const {
  for (size_t i = 0; i < events.size() && i < costs.size(); ++i) {
    if (events[i] == name) return costs[i];
  }
  return 0;
}

std::vector<uint64_t> CallgrindDump::inclusive_calls_to(std::string_view function_name) const {
  std::vector<uint64_t> sum(events.size(), 0);
  for (const CallgrindArc& a : arcs) {
    if (functions[a.callee].name != function_name) continue;
    for (size_t i = 0; i < sum.size() && i < a.inclusive.size(); ++i) sum[i] += a.inclusive[i];
  }
  return sum;
}

namespace {

std::vector<std::string_view> split_spaces(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

class Parser {
public:
  explicit Parser(std::string_view text) : m_text(text) {}

  CallgrindDump run() {
    size_t pos = 0;
    while (pos <= m_text.size()) {
      size_t end = m_text.find('\n', pos);
      if (end == std::string_view::npos) end = m_text.size();
      std::string_view line = m_text.substr(pos, end - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      ++m_line;
      handle(line);
      if (end == m_text.size()) break;
      pos = end + 1;
    }
    if (m_dump.events.empty()) fail("no 'events:' line: this is not callgrind output");
    if (m_dump.totals.empty()) m_dump.totals = m_summary;
    if (m_dump.totals.empty()) {
      // Neither totals: nor summary: (both are optional in the format): the sum of all self costs.
      m_dump.totals.assign(m_dump.events.size(), 0);
      for (const CallgrindFunction& f : m_dump.functions) add(m_dump.totals, f.self);
    }
    for (CallgrindFunction& f : m_dump.functions) f.inclusive = f.self;
    for (const CallgrindArc& a : m_dump.arcs) {
      add(m_dump.functions[a.caller].inclusive, a.inclusive);
      m_dump.functions[a.callee].times_called += a.count;
    }
    return std::move(m_dump);
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(fmt::format("callgrind output line {}: {}", m_line, what));
  }

  static void add(std::vector<uint64_t>& into, const std::vector<uint64_t>& v) {
    if (into.size() < v.size()) into.resize(v.size(), 0);
    for (size_t i = 0; i < v.size(); ++i) into[i] += v[i];
  }

  std::vector<uint64_t> numbers(std::string_view s) const {
    std::vector<uint64_t> out;
    for (std::string_view tok : split_spaces(s)) {
      uint64_t v = 0;
      auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
      if (ec != std::errc() || p != tok.data() + tok.size()) fail(fmt::format("'{}' is not a count", tok));
      out.push_back(v);
    }
    return out;
  }

  // "(12) name" defines id 12, "(12)" refers to it, "name" is plain.
  std::string resolve(std::map<std::string, std::string, std::less<>>& table, std::string_view value) const {
    if (value.empty() || value.front() != '(') return std::string(value);
    const size_t close = value.find(')');
    if (close == std::string_view::npos) return std::string(value);
    const std::string id(value.substr(1, close - 1));
    // Only "(digits)" is an id: "(below main)" is a plain name that happens to start with a parenthesis.
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) return std::string(value);
    std::string_view rest = value.substr(close + 1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (rest.empty()) {
      auto it = table.find(id);
      if (it == table.end()) fail(fmt::format("name id ({}) used before it was defined", id));
      return it->second;
    }
    table[id] = std::string(rest);
    return std::string(rest);
  }

  size_t function_index(const std::string& object, const std::string& name) {
    auto key = std::make_pair(object, name);
    auto it = m_index.find(key);
    if (it != m_index.end()) return it->second;
    m_dump.functions.push_back({object, name, std::vector<uint64_t>(m_dump.events.size(), 0), {}, 0});
    m_index.emplace(std::move(key), m_dump.functions.size() - 1);
    return m_dump.functions.size() - 1;
  }

  // A cost line: the position columns first, then one count per event (trailing zeros may be left out).
  std::vector<uint64_t> cost_line(std::string_view line) const {
    std::vector<std::string_view> tok = split_spaces(line);
    if (tok.size() < m_position_columns) fail("cost line with fewer columns than 'positions:' names");
    std::vector<uint64_t> costs(m_dump.events.size(), 0);
    for (size_t i = m_position_columns; i < tok.size(); ++i) {
      const size_t e = i - m_position_columns;
      if (e >= costs.size()) fail("cost line with more counts than 'events:' names");
      auto [p, ec] = std::from_chars(tok[i].data(), tok[i].data() + tok[i].size(), costs[e]);
      if (ec != std::errc() || p != tok[i].data() + tok[i].size()) fail(fmt::format("'{}' is not a count", tok[i]));
    }
    return costs;
  }

  void handle(std::string_view line) {
    if (line.empty() || line.front() == '#') return;
    if (m_skip_next) {  // the source position line after jump=/jcnd= carries no cost of the function
      m_skip_next = false;
      return;
    }
    const char c = line.front();
    if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '*') {
      if (m_dump.events.empty()) fail("cost line before 'events:'");
      std::vector<uint64_t> costs = cost_line(line);
      if (!m_current) m_current = function_index(m_object, "???");
      if (m_pending_call) {
        const size_t callee = function_index(m_call_object.empty() ? m_object : m_call_object, m_call_function);
        m_dump.arcs.push_back({*m_current, callee, m_call_count, std::move(costs)});
        m_pending_call = false;
        m_call_object.clear();
      } else {
        add(m_dump.functions[*m_current].self, costs);
      }
      return;
    }
    const size_t eq = line.find('=');
    const size_t colon = line.find(':');
    if (eq != std::string_view::npos && (colon == std::string_view::npos || eq < colon)) {
      const std::string_view key = line.substr(0, eq);
      const std::string_view value = line.substr(eq + 1);
      if (key == "ob") {
        m_object = resolve(m_objects, value);
      } else if (key == "fn") {
        m_current = function_index(m_object, resolve(m_functions, value));
      } else if (key == "cob") {
        m_call_object = resolve(m_objects, value);
      } else if (key == "cfn" || key == "cfni") {
        m_call_function = resolve(m_functions, value);
      } else if (key == "fl" || key == "fi" || key == "fe" || key == "cfl" || key == "cfi") {
        resolve(m_files, value);  // files only matter for their ids
      } else if (key == "calls") {
        std::vector<std::string_view> tok = split_spaces(value);
        if (tok.empty()) fail("calls= without a count");
        auto [p, ec] = std::from_chars(tok[0].data(), tok[0].data() + tok[0].size(), m_call_count);
        if (ec != std::errc()) fail(fmt::format("calls={}: not a count", tok[0]));
        m_pending_call = true;
      } else if (key == "jump" || key == "jcnd") {
        m_skip_next = true;
      }
      return;  // unknown assignments (jfi, jfn, ...) carry nothing kwb uses
    }
    if (colon == std::string_view::npos) fail(fmt::format("cannot read '{}'", line.substr(0, 80)));
    const std::string_view key = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (key == "events") {
      m_dump.events.clear();
      for (std::string_view e : split_spaces(value)) m_dump.events.emplace_back(e);
    } else if (key == "positions") {
      m_position_columns = split_spaces(value).size();
    } else if (key == "totals") {
      m_dump.totals = numbers(value);
    } else if (key == "summary") {
      m_summary = numbers(value);
    } else if (key == "desc") {
      m_dump.descriptions.emplace_back(value);
      if (value.starts_with("Trigger:")) {
        std::string_view t = value.substr(8);
        while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
        m_dump.trigger = std::string(t);
      }
    }
    // version, creator, pid, cmd, part, thread, event: (long names) are provenance kwb does not need here.
  }

  std::string_view m_text;
  size_t m_line = 0;
  CallgrindDump m_dump;
  std::vector<uint64_t> m_summary;
  size_t m_position_columns = 1;  // the format's default is "positions: line"
  std::map<std::string, std::string, std::less<>> m_objects, m_files, m_functions;
  std::map<std::pair<std::string, std::string>, size_t> m_index;
  std::string m_object;
  std::optional<size_t> m_current;
  std::string m_call_object, m_call_function;
  uint64_t m_call_count = 0;
  bool m_pending_call = false;
  bool m_skip_next = false;
};

}  // namespace

CallgrindDump parse_callgrind(std::string_view text) { return Parser(text).run(); }

std::string short_function_name(std::string_view name) {
  std::string out = demangle(name);
  for (std::string_view noise : {"(anonymous namespace)::", "{anonymous}::"}) {
    for (size_t at; (at = out.find(noise)) != std::string::npos;) out.erase(at, noise.size());
  }
  // Drop the parameter list: the last top-level "(...)", unless it is the whole name ("(below main)").
  if (!out.empty() && out.back() == ')') {
    int depth = 0;
    for (size_t i = out.size(); i-- > 0;) {
      if (out[i] == ')') ++depth;
      if (out[i] == '(' && --depth == 0) {
        if (i > 0) out.resize(i);
        break;
      }
    }
  }
  return out;
}

}  // namespace kwb
