#include "record/control_margin.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

namespace kwb {

ControlMargin control_margin(const nlohmann::json& check_report, FailureReason expect) {
  ControlMargin m;
  std::set<std::string> caught_cases;
  std::set<std::pair<std::string, int>> rejecting_calls;
  const std::string want(to_string(expect));
  for (const nlohmann::json& f : check_report.value("failures", nlohmann::json::array())) {
    if (f.value("reason", "") != want) continue;
    const std::string case_name = f.value("case", "");
    const int call = f.value("call", -1);
    const size_t elements = f.value("elements", size_t{0});
    caught_cases.insert(case_name);
    if (call >= 0) rejecting_calls.insert({case_name, call});
    m.elements += elements;
    m.counts_elements = m.counts_elements || elements > 0;
  }
  if (caught_cases.empty()) return m;
  for (const nlohmann::json& c : check_report.value("cases", nlohmann::json::array())) {
    if (caught_cases.contains(c.value("name", ""))) m.calls += static_cast<size_t>(std::max(c.value("calls", 0), 0));
  }
  m.calls_rejected = rejecting_calls.size();
  // A failure tied to no call (a load, a worker's death) rejects the case's every call.
  if (m.calls_rejected == 0) m.calls_rejected = m.calls;
  std::vector<std::string> why;
  if (m.calls_rejected * 2 < m.calls) {
    why.push_back(
        fmt::format("rejected on only {} of the {} calls of the case(s) that caught it", m.calls_rejected, m.calls));
  }
  if (m.counts_elements && m.elements < k_thin_control_elements) {
    why.push_back(fmt::format("caught by only {} output element{}", m.elements, m.elements == 1 ? "" : "s"));
  }
  if (!why.empty()) {
    m.thin = fmt::format(
        "{}: a thin margin, which a change elsewhere may close; add a case that catches it on every "
        "call, by many elements",
        fmt::join(why, " and "));
  }
  return m;
}

std::string describe(const ControlMargin& m) {
  std::string s = fmt::format("on {} of {} call{}", m.calls_rejected, m.calls, m.calls == 1 ? "" : "s");
  if (m.counts_elements) s += fmt::format(", by {} element{}", m.elements, m.elements == 1 ? "" : "s");
  return s;
}

nlohmann::json to_json(const ControlMargin& m) {
  return {{"calls", m.calls},
          {"calls_rejected", m.calls_rejected},
          {"elements", m.counts_elements ? nlohmann::json(m.elements) : nlohmann::json(nullptr)},
          {"thin", m.thin.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.thin)}};
}

}  // namespace kwb
