// How firmly a control's check rejected it, derived from the check report's JSON (kwb.check: its "failures" and
// "cases"), so that check, validate's controls.json and verify's re-derivation compute it from the same record.
#pragma once

#include "util/failure_reason.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace kwb {

// In the cases that caught the control (a control written for one case is not thin for passing the others): the
// calls run and the calls that failed with the expected reason, and the output elements those failures counted. A
// control caught on fewer than half of those calls, or by fewer than k_thin_control_elements elements, is thin: a
// thread caught it (one rounding in 262,144 elements, on 2 of 4 calls), and a change elsewhere may let it pass.
struct ControlMargin {
  size_t calls = 0;
  size_t calls_rejected = 0;
  size_t elements = 0;           // summed over the rejecting failures; 0 when the reason is about a call as a whole
  bool counts_elements = false;  // the expected reason's failures count elements (values, NaN/Inf, poison)
  std::string thin;              // why the margin is thin; "" when it is not, or when the reason was never seen
};

inline constexpr size_t k_thin_control_elements = 5;

ControlMargin control_margin(const nlohmann::json& check_report, FailureReason expect);

// "on 4 of 4 calls, by 1024 elements" (the elements only where the reason counts them).
std::string describe(const ControlMargin& m);

// {calls, calls_rejected, elements (null where not counted), thin (null when not thin)}: kwb.check's control_margin.
nlohmann::json to_json(const ControlMargin& m);

}  // namespace kwb
