#include "util/text.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace kwb {

namespace {

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

}  // namespace

std::string escape_markdown(std::string_view text, bool line_start) {
  static constexpr std::string_view k_inline = "\\`*_[]<>|~&";
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  // At a line start, "#", "+", "-", "=" and "1." / "1)" open blocks (">" is always escaped). Parentheses, braces and
  // "!" open nothing once "[" is escaped.
  size_t first = 0;  // leading blanks do not stop a block marker
  while (line_start && first < text.size() && text[first] == ' ') ++first;
  size_t digits = first;
  while (line_start && digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    const auto c = static_cast<unsigned char>(ch);
    const bool block_opener = line_start && ((i == first && (ch == '#' || ch == '+' || ch == '-' || ch == '=')) ||
                                             (digits > first && i == digits && (ch == '.' || ch == ')')));
    if (line_start && i < first) {
      out += "&#32;";  // a blank that cannot indent: four of them would open a code block
    } else if (is_control(c)) {
      out += fmt::format("\\x{:02x}", c);  // a backslash before 'x' is literal in CommonMark
    } else {
      // An underscore inside a word never opens emphasis (CommonMark's flanking rules): KEEP_CANDIDATE stays whole.
      const bool in_word = ch == '_' && i > 0 && i + 1 < text.size() &&
                           std::isalnum(static_cast<unsigned char>(text[i - 1])) &&
                           std::isalnum(static_cast<unsigned char>(text[i + 1]));
      if (block_opener || (!in_word && k_inline.find(ch) != std::string_view::npos)) out += '\\';
      out += ch;
    }
  }
  return out;
}

void TerminalEscaper::put(char ch, std::string& out) {
  const auto c = static_cast<unsigned char>(ch);
  if (!m_pending.empty()) {
    if (c >= 0x80 && c <= 0xbf) {
      m_pending += ch;
      if (m_pending.size() < m_expected) return;
      // U+0080..U+009F are the C1 controls (U+009B is CSI); some terminals obey them in UTF-8 too.
      const auto lead = static_cast<unsigned char>(m_pending[0]);
      const bool c1 = lead == 0xc2 && static_cast<unsigned char>(m_pending[1]) <= 0x9f;
      if (c1) {
        for (char p : m_pending) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(p));
      } else {
        out += m_pending;
      }
      m_pending.clear();
      return;
    }
    finish(out);  // a sequence cut short: its bytes are shown, not passed on
  }
  if (c >= 0xc2 && c <= 0xf4) {
    m_pending.assign(1, ch);
    m_expected = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
  } else if (c >= 0x80 || (is_control(c) && ch != '\n' && ch != '\t')) {
    out += fmt::format("\\x{:02x}", c);
  } else {
    out += ch;
  }
}

void TerminalEscaper::finish(std::string& out) {
  for (char p : m_pending) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(p));
  m_pending.clear();
}

std::string escape_terminal(std::string_view text) {
  TerminalEscaper e;
  std::string out;
  out.reserve(text.size());
  for (char ch : text) e.put(ch, out);
  e.finish(out);
  return out;
}

namespace {

// Optimal string alignment distance (Damerau-Levenshtein without editing a substring twice).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const std::string& c : candidates) {
    // Keys and names are short; anything long is not a typo worth a quadratic table.
    if (c.size() > 64 || word.size() > 64) continue;
    const size_t dist = edit_distance(word, c);
    if (dist == 0 || dist > 2 || 2 * dist >= std::max(word.size(), c.size())) continue;
    if (!best || dist < best_distance) {
      best = c;
      best_distance = dist;
    }
  }
  return best;
}

std::string demangle(std::string_view name) {
  if (!name.starts_with("_Z")) return std::string(name);
  int status = 0;
  const std::string mangled(name);
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : mangled;
}

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters (other than newline and tab) are shown, not passed to the page.
        if ((static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
          out += fmt::format("&#92;x{:02x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace kwb
