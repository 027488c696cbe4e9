// examples/svg_plot.h — a few line plots as plain SVG, so the AMP examples can draw their
// histograms and loss-scale timelines with no plotting dependency.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace svg {

struct Series {
  std::string label;
  std::vector<double> x, y;
};

struct Plot {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  bool log_y = false;                                // base-10 axis (non-positive values skipped)
  std::vector<std::pair<double, std::string>> vlines;  // labelled vertical markers
};

inline std::string render(const Plot& p) {
  const double W = 760, H = 420, L = 70, R = 170, T = 40, B = 50;
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"};
  auto ty = [&](double y) { return p.log_y ? std::log10(y) : y; };
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& s : p.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (p.log_y && s.y[i] <= 0) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, ty(s.y[i])), y1 = std::max(y1, ty(s.y[i]));
    }
  for (const auto& [x, label] : p.vlines) x0 = std::min(x0, x), x1 = std::max(x1, x);
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  if (!p.log_y) y0 = std::min(y0, 0.0);
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (ty(y) - y0) / (y1 - y0) * (H - T - B); };
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
     << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  os << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='15'>" << p.title << "</text>\n";
  os << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='black'/>\n";
  os << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='black'/>\n";
  char buf[64];
  for (int i = 0; i <= 5; ++i) {
    double xv = x0 + (x1 - x0) * i / 5, yv = y0 + (y1 - y0) * i / 5;
    std::snprintf(buf, sizeof buf, "%g", std::round(xv * 100) / 100);
    os << "<text x='" << px(xv) << "' y='" << H - B + 16 << "' text-anchor='middle'>" << buf << "</text>\n";
    std::snprintf(buf, sizeof buf, p.log_y ? "1e%.1f" : "%.3g", yv);
    os << "<text x='" << L - 6 << "' y='" << H - B - (yv - y0) / (y1 - y0) * (H - T - B) + 4
       << "' text-anchor='end'>" << buf << "</text>\n";
  }
  os << "<text x='" << (L + W - R) / 2 << "' y='" << H - 12 << "' text-anchor='middle'>" << p.xlabel << "</text>\n";
  os << "<text x='16' y='" << (T + H - B) / 2 << "' transform='rotate(-90 16 " << (T + H - B) / 2
     << ")' text-anchor='middle'>" << p.ylabel << "</text>\n";
  for (const auto& [x, label] : p.vlines) {
    os << "<line x1='" << px(x) << "' y1='" << T << "' x2='" << px(x) << "' y2='" << H - B
       << "' stroke='gray' stroke-dasharray='4 3'/>\n";
    os << "<text x='" << px(x) + 3 << "' y='" << T + 12 << "' fill='gray' font-size='10'>" << label << "</text>\n";
  }
  for (size_t k = 0; k < p.series.size(); ++k) {
    const auto& s = p.series[k];
    const char* c = colors[k % 8];
    os << "<polyline fill='none' stroke='" << c << "' stroke-width='1.6' points='";
    for (size_t i = 0; i < s.x.size(); ++i)
      if (!p.log_y || s.y[i] > 0) os << px(s.x[i]) << ',' << py(s.y[i]) << ' ';
    os << "'/>\n<text x='" << W - R + 10 << "' y='" << T + 16 * (k + 1) << "' fill='" << c << "'>" << s.label
       << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

inline void write(const std::string& path, const Plot& p) { std::ofstream(path) << render(p); }

}  // namespace svg
