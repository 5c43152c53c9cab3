// samples.csv's columns are declared once (record/samples.h): what the writer puts in a row is what the reader takes
// out, and a row or a header that is not this kwb's is a named problem.
#include "record/samples.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using kwb::SampleRow;

std::vector<SampleRow> rows() {
  std::vector<SampleRow> out(2);
  out[0].comparison = "aa";
  out[0].workload = "decode";
  out[0].arm = "A'";
  out[0].block = -1;
  out[0].ns = 1234;
  out[0].window_ns = 1200;
  out[0].warmup = true;
  out[1].comparison = "ab";
  out[1].workload = "prefill";
  out[1].arm = "B";
  out[1].block = 7;
  out[1].pid = 4242;
  out[1].ns = 999;
  out[1].output_valid = true;
  out[1].layout = 3;
  out[1].stack_offset = 160;
  out[1].tensor_offsets = {64, 0, 4032};
  out[1].pre_cpu_ns = 15;
  out[1].post_cpu_ns = 6;
  out[1].window_ns = 978;
  out[1].gap_cpu_ns = 41000;
  out[1].device_ns = 900;
  out[1].outside_cpu_ns = 930000;
  out[1].outside_wall_ns = 1200000;
  return out;
}

// Every column, compared through the same declaration the writer and reader use.
struct Cells {
  std::vector<std::string> out;
  template <typename T>
  void operator()(const char* name, const T& v) {
    out.push_back(name + std::string("=") + ::testing::PrintToString(v));
  }
};
std::vector<std::string> cells(const SampleRow& r) {
  Cells c;
  kwb::describe_columns(c, static_cast<const kwb::Sample&>(r));
  c.out.push_back("comparison=" + r.comparison);
  return c.out;
}

TEST(samples_test, a_bundles_rows_read_back_as_they_were_written) {
  const std::vector<SampleRow> written = rows();
  std::vector<std::string> problems;
  const std::vector<SampleRow> read = kwb::parse_samples_csv(kwb::samples_csv(written), problems);
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems);
  ASSERT_EQ(read.size(), written.size());
  for (size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(cells(read[i]), cells(written[i]));
    EXPECT_EQ(read[i].line, static_cast<int>(i) + 2);
  }
}

TEST(samples_test, the_header_names_every_declared_column_once) {
  const std::string header = kwb::samples_csv_header(true);
  EXPECT_EQ(header.rfind("comparison,workload,block,arm,", 0), 0u) << header;
  EXPECT_EQ(kwb::samples_csv_header(false), header.substr(std::string("comparison,").size()));
  Cells c;
  kwb::Sample s;
  kwb::describe_columns(c, s);
  EXPECT_EQ(static_cast<size_t>(std::count(header.begin(), header.end(), ',')), c.out.size());
}

TEST(samples_test, a_header_of_another_version_and_a_malformed_row_are_named_problems) {
  std::vector<std::string> problems;
  std::string csv = kwb::samples_csv(rows());
  const std::string old_header =
      "comparison,workload,block,arm,order_position,pid,sample_index,warmup,input_set,ns,output_valid\n";
  EXPECT_TRUE(kwb::parse_samples_csv(old_header + csv.substr(csv.find('\n') + 1), problems).empty());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].rfind("samples.csv:1: the header is not this kwb's", 0), 0u) << problems[0];

  problems.clear();
  const size_t row2 = csv.find('\n') + 1;
  std::string bad = csv;
  bad.replace(bad.find(",decode,-1,"), 11, ",decode,x1,");
  std::vector<SampleRow> read = kwb::parse_samples_csv(bad, problems);
  EXPECT_EQ(read.size(), 1u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("samples.csv:2: malformed row (column block is 'x1')"), std::string::npos) << problems[0];

  problems.clear();
  bad = csv.substr(0, row2) + "aa,decode,0,A\n";
  EXPECT_TRUE(kwb::parse_samples_csv(bad, problems).empty());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("4 cells, the header has 21"), std::string::npos) << problems[0];

  problems.clear();
  std::vector<SampleRow> r = rows();
  r[1].outside_wall_ns = -1;  // one of the pair recorded: not a row kwb writes
  EXPECT_EQ(kwb::parse_samples_csv(kwb::samples_csv(r), problems).size(), 1u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("disagree"), std::string::npos) << problems[0];
}

}  // namespace
