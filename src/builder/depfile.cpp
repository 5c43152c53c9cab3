#include "builder/depfile.h"

#include <algorithm>

namespace kwb {

namespace {

// One logical line's words, unescaped. A word ending in ':' (or a lone ':') marks the end of the targets.
struct Word {
  std::string text;
  bool colon = false;  // the rule separator, or a word that carried it
};

std::vector<Word> split_words(std::string_view line) {
  std::vector<Word> words;
  std::string cur;
  bool have = false;
  auto flush = [&](bool colon) {
    if (have || colon) words.push_back({cur, colon});
    cur.clear();
    have = false;
  };
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '\\' && i + 1 < line.size() && (line[i + 1] == ' ' || line[i + 1] == '#' || line[i + 1] == '\t')) {
      cur += line[++i];
      have = true;
    } else if (c == '\\' && i + 1 < line.size() && line[i + 1] == '\\') {
      // "\\" before a space is an escaped backslash followed by a separator in GNU make's reading; keep one.
      cur += '\\';
      ++i;
      have = true;
    } else if (c == '$' && i + 1 < line.size() && line[i + 1] == '$') {
      cur += '$';
      ++i;
      have = true;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      flush(false);
    } else if (c == ':' && (i + 1 == line.size() || line[i + 1] == ' ' || line[i + 1] == '\t' || line[i + 1] == '\r')) {
      // The rule separator: "a.o: b" or "a.o : b". A ':' inside a word (C:\ paths) never reaches here on Linux
      // unless followed by a blank, which is exactly make's rule.
      if (have) {
        words.push_back({cur, false});
        cur.clear();
        have = false;
      }
      words.push_back({"", true});
    } else {
      cur += c;
      have = true;
    }
  }
  flush(false);
  return words;
}

}  // namespace

std::vector<std::string> parse_depfile(std::string_view text) {
  // Join continuations: a backslash immediately before the newline (optionally "\r\n").
  std::vector<std::string> lines;
  std::string logical;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      logical += ' ';
      ++i;
    } else if (c == '\\' && i + 2 < text.size() && text[i + 1] == '\r' && text[i + 2] == '\n') {
      logical += ' ';
      i += 2;
    } else if (c == '\n') {
      lines.push_back(std::move(logical));
      logical.clear();
    } else {
      logical += c;
    }
  }
  if (!logical.empty()) lines.push_back(std::move(logical));

  std::vector<std::string> deps;
  for (const std::string& line : lines) {
    const std::vector<Word> words = split_words(line);
    auto sep = std::find_if(words.begin(), words.end(), [](const Word& w) { return w.colon; });
    if (sep == words.end()) continue;  // blank line, comment-free garbage: no rule
    for (auto it = sep + 1; it != words.end(); ++it) {
      if (it->colon || it->text.empty()) continue;
      if (std::find(deps.begin(), deps.end(), it->text) == deps.end()) deps.push_back(it->text);
    }
  }
  return deps;
}

}  // namespace kwb
