// Minimal SVG plotting for the HTML report: no scripts, no external resources, deterministic output.
#pragma once

#include <string>
#include <vector>

namespace kwb::svg {

struct Series {
  std::string label;
  std::string color;
  std::vector<double> values;
};

// Horizontal strip plot of each series' values on a log10 x axis (values > 0), with the median marked.
std::string strip_plot(const std::string& title, const std::string& unit, const std::vector<Series>& rows);

struct Band {
  double low = 0.0, high = 0.0;  // shaded interval
  std::string label;
};

struct Line {
  double y = 0.0;
  std::string label;
  std::string color;
};

// Points y[i] against their index (block), with an interval band and horizontal reference lines.
std::string index_plot(const std::string& title, const std::string& y_label, const std::vector<double>& y,
                       const Band& band, const std::vector<Line>& lines);

std::string escape(const std::string& text);

}  // namespace kwb::svg
