// Why an implementation failed: the codes a check reports, a control's `expect` names, and the threat model
// (docs/threat-model.md) defends. Inside kwb a reason is a FailureReason; its name exists only where text comes in or
// goes out (task.toml, the worker protocol, JSON), and an edge refuses a name it does not know.
#pragma once

#include "util/error.h"

#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace kwb {

// One list, so the enum and its names cannot drift apart.
// clang-format off
#define KWB_FAILURE_REASONS(X)                                                                                      \
  X(numeric_mismatch) X(nan_mismatch) X(input_modified) X(out_of_bounds_write) X(stale_output) X(crashed)          \
  X(aborted) X(exited) X(timeout) X(shape_mismatch) X(run_failed) X(setup_failed) X(abi_mismatch)                 \
  X(missing_symbol) X(build_failed) X(load_failed) X(output_not_written) X(not_run) X(protocol)                   \
  /* docs/threat-model.md */                                                                                       \
  X(sandbox_violation) X(forbidden_symbol) X(timing_implausible) X(work_after_return) X(work_outside_timer)       \
  X(resource_limit) X(work_off_queue) X(device_fault) X(out_of_bounds_read)
// clang-format on

#define KWB_FAILURE_REASON_ENUMERATOR(name) name,
enum class FailureReason { KWB_FAILURE_REASONS(KWB_FAILURE_REASON_ENUMERATOR) };
#undef KWB_FAILURE_REASON_ENUMERATOR

#define KWB_FAILURE_REASON_NAME(name) #name,
inline constexpr std::string_view k_failure_reason_names[] = {KWB_FAILURE_REASONS(KWB_FAILURE_REASON_NAME)};
#undef KWB_FAILURE_REASON_NAME

constexpr std::string_view to_string(FailureReason r) { return k_failure_reason_names[static_cast<size_t>(r)]; }

// No reason is spelled "" in JSON and cache keys.
inline std::string to_string(const std::optional<FailureReason>& r) {
  return r ? std::string(to_string(*r)) : std::string();
}

constexpr std::optional<FailureReason> parse_failure_reason(std::string_view name) {
  for (size_t i = 0; i < std::size(k_failure_reason_names); ++i) {
    if (k_failure_reason_names[i] == name) return static_cast<FailureReason>(i);
  }
  return std::nullopt;
}

inline std::vector<std::string> failure_reason_names() {
  return {std::begin(k_failure_reason_names), std::end(k_failure_reason_names)};
}

// A reason in a file kwb reads back (a check report, a bundle): one it does not know is a damaged or foreign file.
inline FailureReason parse_failure_reason_field(std::string_view name, std::string_view where) {
  if (std::optional<FailureReason> r = parse_failure_reason(name)) return *r;
  throw DataError(fmt::format("{}: unknown failure reason '{}'", where, name));
}

// As for BackendKind (util/backend_kind.h): JSON holds the name, never the integer.
template <typename BasicJson>
void to_json(BasicJson& j, const FailureReason& r) {
  j = std::string(to_string(r));
}
template <typename BasicJson>
void from_json(const BasicJson& j, FailureReason& r) {
  r = parse_failure_reason_field(j.template get<std::string>(), "JSON failure reason");
}

}  // namespace kwb

template <>
struct fmt::formatter<kwb::FailureReason> : fmt::formatter<std::string_view> {
  auto format(kwb::FailureReason r, format_context& ctx) const -> decltype(ctx.out()) {
    return fmt::formatter<std::string_view>::format(kwb::to_string(r), ctx);
  }
};
