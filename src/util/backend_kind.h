// The backends kwb knows. Inside kwb a backend is a BackendKind; its name ("cpu", "opencl", "cuda") exists only at
// the edges that read or write text: the command line, task.toml, the worker protocol, JSON, the ledger. Every
// edge parses with parse_backend and refuses what it does not know (docs/backends.md).
#pragma once

#include "util/error.h"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace kwb {

enum class BackendKind { cpu, opencl, cuda };

inline constexpr std::array<BackendKind, 3> k_backends = {BackendKind::cpu, BackendKind::opencl, BackendKind::cuda};

constexpr std::string_view to_string(BackendKind b) {
  switch (b) {
    case BackendKind::cpu:
      return "cpu";
    case BackendKind::opencl:
      return "opencl";
    case BackendKind::cuda:
      return "cuda";
  }
  return "?";
}

constexpr std::optional<BackendKind> parse_backend(std::string_view name) {
  for (BackendKind b : k_backends) {
    if (to_string(b) == name) return b;
  }
  return std::nullopt;
}

// A name in a file kwb reads back (a bundle, a cache entry, the ledger): one it does not know is a damaged or foreign
// file, named by `where`.
inline BackendKind parse_backend_field(std::string_view name, std::string_view where) {
  if (std::optional<BackendKind> b = parse_backend(name)) return *b;
  throw DataError(fmt::format("{}: unknown backend '{}' (kwb knows cpu, opencl and cuda)", where, name));
}

// nlohmann/json finds these by ADL: a BackendKind is written and read by name, never as its integer (the library's
// default for an enum), and reading a name kwb does not know throws.
template <typename BasicJson>
void to_json(BasicJson& j, const BackendKind& b) {
  j = std::string(to_string(b));
}
template <typename BasicJson>
void from_json(const BasicJson& j, BackendKind& b) {
  b = parse_backend_field(j.template get<std::string>(), "JSON backend");
}

// A device backend: the driver places device code, kernels are queued and traced, profile has no host counters.
constexpr bool is_device(BackendKind b) { return b != BackendKind::cpu; }

inline std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  names.reserve(k_backends.size());
  for (BackendKind b : k_backends) names.emplace_back(to_string(b));
  return names;
}

}  // namespace kwb

template <>
struct fmt::formatter<kwb::BackendKind> : fmt::formatter<std::string_view> {
  auto format(kwb::BackendKind b, format_context& ctx) const -> decltype(ctx.out()) {
    return fmt::formatter<std::string_view>::format(kwb::to_string(b), ctx);
  }
};
