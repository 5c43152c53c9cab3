// The backends kwb knows, by the names the command line, task.toml, the worker protocol and every JSON use: the one
// list of them (docs/backends.md).
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

inline constexpr std::array<std::string_view, 3> k_backend_names = {"cpu", "opencl", "cuda"};

inline bool is_backend_name(std::string_view name) {
  return std::find(k_backend_names.begin(), k_backend_names.end(), name) != k_backend_names.end();
}

inline std::vector<std::string> backend_names() { return {k_backend_names.begin(), k_backend_names.end()}; }

}  // namespace kwb
