#include "record/samples.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <sstream>
#include <type_traits>

namespace kwb {

namespace {

struct HeaderWriter {
  std::vector<std::string> names;
  template <typename T>
  void operator()(const char* name, const T&) {
    names.emplace_back(name);
  }
};

struct RowWriter {
  explicit RowWriter(std::string& to) : out(to) {}
  std::string& out;
  bool first = true;
  template <typename T>
  void operator()(const char*, const T& v) {
    if (!first) out += ',';
    first = false;
    if constexpr (std::is_same_v<T, std::vector<uint32_t>>) {
      out += fmt::format("{}", fmt::join(v, "/"));
    } else if constexpr (std::is_same_v<T, bool>) {
      out += v ? '1' : '0';
    } else {
      out += fmt::format("{}", v);
    }
  }
};

template <typename T>
bool parse_number(std::string_view s, T& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// Reads the row's cells in column order; the first cell that does not parse names its column.
struct RowReader {
  explicit RowReader(const std::vector<std::string>& row) : cells(row) {}
  const std::vector<std::string>& cells;
  size_t next = 0;
  std::string error;
  template <typename T>
  void operator()(const char* name, T& v) {
    if (!error.empty()) return;
    const std::string& c = cells[next++];
    bool ok = true;
    if constexpr (std::is_same_v<T, std::string>) {
      v = c;
      ok = !c.empty();
    } else if constexpr (std::is_same_v<T, bool>) {
      ok = c == "0" || c == "1";
      v = c == "1";
    } else if constexpr (std::is_same_v<T, std::vector<uint32_t>>) {
      v.clear();
      std::stringstream ss(c);
      for (std::string o; ok && std::getline(ss, o, '/');) ok = parse_number(o, v.emplace_back());
    } else {
      ok = parse_number(c, v);
    }
    if (!ok) error = fmt::format("column {} is '{}'", name, c.substr(0, 40));
  }
};

// What the columns cannot say alone: the ranges of the figures.
std::string out_of_range(const Sample& s) {
  if (s.ns < 0 || s.window_ns < 0) return "a negative time";
  if (s.pre_cpu_ns < -1 || s.post_cpu_ns < -1 || s.gap_cpu_ns < -1 || s.device_ns < -1)
    return "a CPU or device time below -1";
  if (s.outside_cpu_ns < -1 || s.outside_wall_ns < -1 || (s.outside_cpu_ns < 0) != (s.outside_wall_ns < 0)) {
    return "outside_cpu_ns and outside_wall_ns disagree on whether the call was watched";
  }
  return "";
}

size_t column_count() {
  HeaderWriter h;
  Sample s;
  describe_columns(h, s);
  return h.names.size();
}

}  // namespace

std::string samples_csv_header(bool with_comparison) {
  HeaderWriter h;
  if (with_comparison) h.names.emplace_back("comparison");
  const Sample s;
  describe_columns(h, s);
  return fmt::format("{}\n", fmt::join(h.names, ","));
}

std::string samples_csv(const std::vector<Sample>& samples) {
  std::string out = samples_csv_header(false);
  for (const Sample& s : samples) {
    RowWriter w(out);
    describe_columns(w, s);
    out += '\n';
  }
  return out;
}

std::string samples_csv(const std::vector<SampleRow>& rows) {
  std::string out = samples_csv_header(true);
  for (const SampleRow& r : rows) {
    out += r.comparison + ",";
    RowWriter w(out);
    describe_columns(w, static_cast<const Sample&>(r));
    out += '\n';
  }
  return out;
}

namespace {

// Both files: a bundle's (a leading "comparison" column) and compare --output-dir's (none; comparison stays "").
std::vector<SampleRow> parse_rows(std::string_view text, bool with_comparison, std::vector<std::string>& problems) {
  std::vector<SampleRow> rows;
  std::istringstream in{std::string(text)};
  std::string line;
  int n = 0;
  const size_t columns = column_count() + (with_comparison ? 1 : 0);
  while (std::getline(in, line)) {
    ++n;
    if (n == 1) {
      const std::string header = samples_csv_header(with_comparison);
      if (line + "\n" != header) {
        problems.push_back(
            fmt::format("samples.csv:1: the header is not this kwb's ({}): written by another kwb "
                        "version, or edited",
                        header.substr(0, header.size() - 1)));
        return rows;
      }
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();  // getline drops an empty last cell
    auto malformed = [&](const std::string& why) {
      problems.push_back(fmt::format("samples.csv:{}: malformed row ({}): '{}'", n, why, line.substr(0, 200)));
    };
    if (cells.size() != columns) {
      malformed(fmt::format("{} cells, the header has {}", cells.size(), columns));
      continue;
    }
    SampleRow r;
    r.line = n;
    if (with_comparison) r.comparison = cells[0];
    const std::vector<std::string> rest(cells.begin() + (with_comparison ? 1 : 0), cells.end());
    RowReader reader(rest);
    describe_columns(reader, static_cast<Sample&>(r));
    if (!reader.error.empty()) {
      malformed(reader.error);
      continue;
    }
    if (std::string why = out_of_range(r); !why.empty()) {
      malformed(why);
      continue;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace

std::vector<SampleRow> parse_samples_csv(std::string_view text, std::vector<std::string>& problems) {
  return parse_rows(text, true, problems);
}

std::vector<SampleRow> parse_compare_samples_csv(std::string_view text, std::vector<std::string>& problems) {
  return parse_rows(text, false, problems);
}

}  // namespace kwb
