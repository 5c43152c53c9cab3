// Escaping for text a candidate or a bundle controls (file names, failure details, build logs, reasons), for each
// place kwb shows it: Markdown, terminals and HTML.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

// Markdown that renders as exactly these characters. Everything that can open inline markup (emphasis, code, links,
// images, raw HTML, entities, table cells, strikethrough) is backslash-escaped, and control characters, line breaks
// included, become visible \xNN, so the text can never start a new line or block. With `line_start`, a leading
// character that would open a heading, list, quote or rule there is escaped too (for text placed after "- ").
std::string escape_markdown(std::string_view text, bool line_start = false);

// Text safe to write to a terminal: control characters other than newline and tab (ESC, CR, BEL, backspace) and
// bytes that are not part of a UTF-8 sequence (a lone 0x9b is an 8-bit CSI) become visible \xNN, so text cannot
// move the cursor, recolour, retitle or overwrite what kwb wrote. Streams feed it byte by byte (it keeps the
// position within a UTF-8 sequence across calls).
class TerminalEscaper {
public:
  void put(char ch, std::string& out);
  void finish(std::string& out);  // an incomplete sequence still held back is written escaped

private:
  std::string m_pending;  // the UTF-8 sequence being read, passed on only once complete
  size_t m_expected = 0;  // its length, from its lead byte
};
std::string escape_terminal(std::string_view text);

// HTML text or attribute value that shows exactly these characters: & < > " ' become entities, and control
// characters other than newline and tab are shown (&#92;xNN), never passed to the page. Every HTML kwb writes
// (report.html, campaign and experiment reports, inline SVG) escapes what it did not write itself with this.
std::string escape_html(std::string_view text);

// For "did you mean ...?": the candidate closest to `word` in edit distance (insertions, deletions, substitutions and
// swaps of neighbouring characters), if it is close enough to be a typo of it: at most 2 edits, and fewer than half
// the characters of the longer of the two. Ties go to the earlier candidate.
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

// A C++ symbol as its source spells it ("_Z13rmsnorm_kernelPKfPfi" -> "rmsnorm_kernel(float const*, float*, int)"),
// through the C++ ABI's demangler; a name that is not a mangled one (C, OpenCL kernels, already demangled) is returned
// as it is.
std::string demangle(std::string_view name);

}  // namespace kwb
