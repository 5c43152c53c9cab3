#include "cli/terminal.h"

#include <algorithm>

namespace kwb::cli {

std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < width.size(); ++i) {
      std::string c = i < cells.size() ? cells[i] : "";
      s += c;
      if (i + 1 < width.size()) s += std::string(width[i] - c.size() + 2, ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(header);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  out += std::string(total - 2, '-') + "\n";
  for (const auto& r : rows) out += line(r);
  return out;
}

}  // namespace kwb::cli
