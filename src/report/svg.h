// Minimal SVG plotting for the HTML report: no scripts, no external resources, deterministic output.
#pragma once

#include <functional>
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

// Where each reference line's label goes (its text's baseline, in pixels): 4 px above its line, lines on the same
// pixel row sharing one label ("gate +0% = no change"), and each label at least k_label_line_height below the one
// above it, so that no two overlap. `py` maps a value to its pixel row; labels come top to bottom.
struct LineLabel {
  double baseline = 0.0;
  std::string text;
  std::string color;
};
inline constexpr double k_label_line_height = 13.0;  // 11 px tick text, and a gap
std::vector<LineLabel> place_line_labels(const std::vector<Line>& lines, const std::function<double(double)>& py);

// Points y[i] against their index (block), with an interval band and horizontal reference lines.
std::string index_plot(const std::string& title, const std::string& y_label, const std::vector<double>& y,
                       const Band& band, const std::vector<Line>& lines);

}  // namespace kwb::svg
