#include "task/shape_expr.h"

#include <gtest/gtest.h>

TEST(shape_expr_test, evaluates_arithmetic_with_precedence) {
  std::map<std::string, int64_t> dims{{"rows", 3}, {"cols", 7}};
  EXPECT_EQ(kwb::ShapeExpr::parse("rows").evaluate(dims), 3);
  EXPECT_EQ(kwb::ShapeExpr::parse("rows * cols + 1").evaluate(dims), 22);
  EXPECT_EQ(kwb::ShapeExpr::parse("(rows + 1) * cols").evaluate(dims), 28);
  EXPECT_EQ(kwb::ShapeExpr::parse("2*cols-rows").evaluate(dims), 11);
}

TEST(shape_expr_test, collects_dim_names) {
  std::set<std::string> names;
  kwb::ShapeExpr::parse("(a + b) * c + 4").collect_names(names);
  EXPECT_EQ(names, (std::set<std::string>{"a", "b", "c"}));
}

TEST(shape_expr_test, rejects_malformed_expressions) {
  for (const char* bad : {"", "rows*", "(rows", "rows)", "3x", "rows + * cols", "rows$"}) {
    EXPECT_THROW(kwb::ShapeExpr::parse(bad), std::invalid_argument) << bad;
  }
}

TEST(shape_expr_test, missing_dim_is_reported_by_name) {
  try {
    kwb::ShapeExpr::parse("rows").evaluate({});
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("rows"), std::string::npos);
  }
}

TEST(shape_expr_test, overflow_is_an_error_not_a_wrapped_dimension) {
  const std::map<std::string, int64_t> dims{{"rows", 4'000'000'000'000}, {"cols", 4'000'000'000'000}};
  for (const char* e : {"rows*cols", "rows*cols+1", "(rows+rows)*cols", "0-rows*cols"}) {
    try {
      (void)kwb::ShapeExpr::parse(e).evaluate(dims);
      ADD_FAILURE() << e << " evaluated";
    } catch (const std::overflow_error& err) {
      EXPECT_NE(std::string(err.what()).find("overflows"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find(e), std::string::npos) << err.what();
    }
  }
  EXPECT_EQ(kwb::ShapeExpr::parse("rows*2").evaluate(dims), 8'000'000'000'000);
}
