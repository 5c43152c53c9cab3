// Small helpers for human output on the terminal (never used for JSON, which is the canonical format).
#pragma once

#include <string>
#include <vector>

namespace kwb::cli {

// Left-aligned columns, one header row, a rule under it.
std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace kwb::cli
