#include "report/svg.h"

#include "util/text.h"

#include "stats/descriptive.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace kwb::svg {

namespace {

constexpr double k_width = 760, k_left = 110, k_right = 20, k_top = 30;

// "Nice" ticks for a linear range.
std::vector<double> ticks(double lo, double hi, int target) {
  const double span = hi - lo;
  if (!(span > 0)) return {lo};
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (span / step <= target) break;
  }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-12 * span; v += step) {
    t.push_back(std::fabs(v) < 1e-9 * step ? 0.0 : v);  // no "-0" label from accumulated rounding
  }
  return t;
}

std::string format_ns(double ns) {
  if (ns >= 1e9) return fmt::format("{:.3g} s", ns / 1e9);
  if (ns >= 1e6) return fmt::format("{:.3g} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.3g} us", ns / 1e3);
  return fmt::format("{:.3g} ns", ns);
}

}  // namespace

std::vector<LineLabel> place_line_labels(const std::vector<Line>& lines, const std::function<double(double)>& py) {
  std::vector<Line> sorted = lines;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Line& a, const Line& b) { return py(a.y) < py(b.y); });
  std::vector<LineLabel> out;
  double previous_py = -INFINITY;
  for (const Line& l : sorted) {
    const double at = py(l.y);
    // Lines drawn on the same pixel row (a gate of +0% and "no change") share one label.
    if (!out.empty() && at - previous_py < 0.5) {
      out.back().text += " = " + l.label;
      continue;
    }
    const double wanted = at - 4;
    out.push_back(
        {out.empty() ? wanted : std::max(wanted, out.back().baseline + k_label_line_height), l.label, l.color});
    previous_py = at;
  }
  return out;
}

std::string strip_plot(const std::string& title, const std::string& unit, const std::vector<Series>& rows) {
  const double row_h = 34;
  const double height = k_top + row_h * static_cast<double>(rows.size()) + 40;
  double lo = INFINITY, hi = -INFINITY;
  for (const Series& s : rows) {
    for (double v : s.values) {
      if (v > 0) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  }
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "role=\"img\"><title>{2}</title>\n<text x=\"{3}\" y=\"18\" class=\"t\">{2}</text>\n",
      k_width, height, escape_html(title), k_left);
  if (!(lo < INFINITY)) return out + "<text x=\"110\" y=\"50\">no samples</text></svg>\n";
  double llo = std::log10(lo), lhi = std::log10(hi);
  if (lhi - llo < 0.02) {
    llo -= 0.01;
    lhi += 0.01;
  }
  const double pad = (lhi - llo) * 0.05;
  llo -= pad;
  lhi += pad;
  auto x = [&](double v) { return k_left + (std::log10(v) - llo) / (lhi - llo) * (k_width - k_left - k_right); };
  const double axis_y = k_top + row_h * static_cast<double>(rows.size()) + 4;
  out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"ax\"/>\n", k_left, axis_y,
                     k_width - k_right, axis_y);
  for (double t : ticks(llo, lhi, 6)) {
    const double v = std::pow(10.0, t);
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" class=\"grid\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" class=\"tick\" text-anchor=\"middle\">{4}</text>\n",
        x(v), k_top, axis_y, axis_y + 16, unit == "ns" ? format_ns(v) : fmt::format("{:.3g}", v));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const Series& s = rows[r];
    const double cy = k_top + row_h * (static_cast<double>(r) + 0.5);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"lab\" text-anchor=\"end\">{}</text>\n", k_left - 8, cy + 4,
                       escape_html(s.label));
    // Deterministic jitter from the index: the same bundle always draws the same picture.
    std::vector<double> pos;
    for (size_t i = 0; i < s.values.size(); ++i) {
      if (s.values[i] <= 0) continue;
      const double jitter = (static_cast<double>((i * 2654435761u) % 1000) / 1000.0 - 0.5) * row_h * 0.6;
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"1.6\" fill=\"{}\" fill-opacity=\"0.35\"/>",
                         x(s.values[i]), cy + jitter, s.color);
      pos.push_back(s.values[i]);
    }
    if (!pos.empty()) {
      const double m = stats::median(pos);
      out += fmt::format(
          "\n<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#111\" "
          "stroke-width=\"2\"/><text x=\"{0:.1f}\" y=\"{3:.1f}\" class=\"tick\" "
          "text-anchor=\"middle\">median {4}</text>\n",
          x(m), cy - row_h * 0.4, cy + row_h * 0.4, cy - row_h * 0.42, format_ns(m));
    }
  }
  return out + "</svg>\n";
}

std::string index_plot(const std::string& title, const std::string& y_label, const std::vector<double>& y,
                       const Band& band, const std::vector<Line>& lines) {
  const double height = 260, plot_h = height - k_top - 40;
  double lo = band.low, hi = band.high;
  for (double v : y) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  for (const Line& l : lines) {
    lo = std::min(lo, l.y);
    hi = std::max(hi, l.y);
  }
  if (!(hi > lo)) {
    lo -= 1;
    hi += 1;
  }
  const double pad = (hi - lo) * 0.08;
  lo -= pad;
  hi += pad;
  const double n = std::max<double>(1.0, static_cast<double>(y.size()) - 1.0);
  auto px = [&](double i) { return k_left + i / n * (k_width - k_left - k_right); };
  auto py = [&](double v) { return k_top + (hi - v) / (hi - lo) * plot_h; };
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "role=\"img\"><title>{2}</title>\n<text x=\"{3}\" y=\"18\" class=\"t\">{2}</text>\n",
      k_width, height, escape_html(title), k_left);
  out += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#4a90d9\" "
      "fill-opacity=\"0.18\"/><text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\">{}</text>\n",
      k_left, py(band.high), k_width - k_left - k_right, std::max(1.0, py(band.low) - py(band.high)), k_left + 4,
      py(band.high) - 3, escape_html(band.label));
  for (double t : ticks(lo, hi, 6)) {
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" class=\"grid\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" class=\"tick\" text-anchor=\"end\">{5:g}</text>\n",
        k_left, py(t), k_width - k_right, k_left - 6, py(t) + 4, t);
  }
  out += fmt::format(
      "<text x=\"14\" y=\"{:.1f}\" class=\"tick\" transform=\"rotate(-90 14 {:.1f})\" "
      "text-anchor=\"middle\">{}</text>\n",
      k_top + plot_h / 2, k_top + plot_h / 2, escape_html(y_label));
  for (const Line& l : lines) {
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"6 4\"/>\n",
        k_left, py(l.y), k_width - k_right, l.color);
  }
  for (const LineLabel& l : place_line_labels(lines, py)) {
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\" fill=\"{}\">{}</text>\n",
                       k_width - k_right, l.baseline, l.color, escape_html(l.text));
  }
  for (size_t i = 0; i < y.size(); ++i) {
    out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.2\" fill=\"#333\"/>", px(static_cast<double>(i)),
                       py(y[i]));
  }
  out += fmt::format("\n<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"middle\">block</text>\n",
                     (k_left + k_width) / 2, height - 6);
  return out + "</svg>\n";
}

}  // namespace kwb::svg
