// A control's margin (record/control_margin.h), from a check report's JSON: the calls and elements that rejected it
// in the cases that caught it, and a thin margin named when a thread caught it.
#include "record/control_margin.h"

#include <gtest/gtest.h>

namespace kwb {
namespace {

using nlohmann::json;

json failure(const std::string& case_name, int call, const std::string& reason, size_t elements) {
  json f = {
      {"case", case_name}, {"call", call}, {"assertion", "within_tolerance:y"}, {"reason", reason}, {"detail", "..."}};
  if (elements > 0) f["elements"] = elements;
  return f;
}

json report(json cases, json failures) { return {{"cases", std::move(cases)}, {"failures", std::move(failures)}}; }

TEST(control_margin_test, a_control_caught_by_one_element_on_half_its_calls_is_thin_for_the_element) {
  // The q8_0 control "127/amax": 1 element in 262,144, on 2 of 4 calls.
  const json r = report({{{"name", "blocks"}, {"calls", 4}}},
                        {failure("blocks", 1, "numeric_mismatch", 1), failure("blocks", 3, "numeric_mismatch", 1)});
  const ControlMargin m = control_margin(r, FailureReason::numeric_mismatch);
  EXPECT_EQ(m.calls, 4u);
  EXPECT_EQ(m.calls_rejected, 2u);
  EXPECT_EQ(m.elements, 2u);
  EXPECT_NE(m.thin.find("caught by only 2 output elements"), std::string::npos) << m.thin;
  EXPECT_EQ(m.thin.find("calls of the case"), std::string::npos) << "2 of 4 is half, not fewer: " << m.thin;
  EXPECT_EQ(describe(m), "on 2 of 4 calls, by 2 elements");
  EXPECT_EQ(to_json(m).at("elements"), 2);
}

TEST(control_margin_test, a_control_caught_on_one_call_in_four_is_thin_for_the_calls) {
  const json r = report({{{"name", "a"}, {"calls", 4}}}, {failure("a", 2, "numeric_mismatch", 500)});
  const ControlMargin m = control_margin(r, FailureReason::numeric_mismatch);
  EXPECT_NE(m.thin.find("rejected on only 1 of the 4 calls"), std::string::npos) << m.thin;
  EXPECT_EQ(m.thin.find("output element"), std::string::npos) << m.thin;
}

TEST(control_margin_test, only_the_cases_that_caught_it_count_and_only_its_expected_reason) {
  // A control written for the masked case passes the plain one; a NaN disagreement on the side is another reason.
  const json r = report({{{"name", "plain"}, {"calls", 6}}, {{"name", "masked"}, {"calls", 4}}},
                        {failure("masked", 0, "numeric_mismatch", 64), failure("masked", 1, "numeric_mismatch", 64),
                         failure("masked", 2, "numeric_mismatch", 64), failure("masked", 3, "numeric_mismatch", 64),
                         failure("plain", 0, "nan_mismatch", 1)});
  const ControlMargin m = control_margin(r, FailureReason::numeric_mismatch);
  EXPECT_EQ(m.calls, 4u);
  EXPECT_EQ(m.calls_rejected, 4u);
  EXPECT_EQ(m.elements, 256u);
  EXPECT_EQ(m.thin, "");
  EXPECT_TRUE(to_json(m).at("thin").is_null());
}

TEST(control_margin_test, a_reason_about_the_whole_call_counts_calls_not_elements) {
  json f = failure("a", -1, "input_modified", 0);
  const json r = report({{{"name", "a"}, {"calls", 1}}}, {f});
  const ControlMargin m = control_margin(r, FailureReason::input_modified);
  EXPECT_FALSE(m.counts_elements);
  EXPECT_EQ(m.calls_rejected, m.calls);
  EXPECT_EQ(m.thin, "");
  EXPECT_TRUE(to_json(m).at("elements").is_null());
  EXPECT_EQ(describe(m), "on 1 of 1 call");
}

TEST(control_margin_test, a_reason_never_seen_has_no_margin) {
  const json r = report({{{"name", "a"}, {"calls", 4}}}, {failure("a", 0, "crashed", 0)});
  const ControlMargin m = control_margin(r, FailureReason::numeric_mismatch);
  EXPECT_EQ(m.calls, 0u);
  EXPECT_EQ(m.thin, "");
}

}  // namespace
}  // namespace kwb
