// amp/svg_plot.h — line and marker plots as plain SVG, so mixtape draws its figures with no
// plotting dependency: amp::TensorStatsLogger's statistics over training, the main job's
// out/fashion_mnist/curves.svg and amp_underflow's gradient histograms and loss-scale timeline.
// Header-only and independent of the rest of mixtape.
//
// Owns: choosing ticks (1, 2, 5 x 10^k on linear axes; powers of two or ten on log axes, drawn
// as 2^-24 with a superscript exponent), laying out labels and the legend, shaded bands (FP16's
// underflow, subnormal and overflow ranges), and writing the SVG text.
// Invariants:
//   - tick labels on one axis never overlap: ticks are thinned (a coarser round step) until the
//     estimated extents of neighbouring labels are apart;
//   - annotations (bands, reference lines) are named only in the legend, whose entries are
//     stacked, never by text inside the plot, so no label can collide with another or with the
//     legend;
//   - the output is well-formed XML: every text is escaped; bad input (x and y of different
//     lengths, an unknown marker) throws std::invalid_argument naming the series.
// Labels take a small markup: "^{...}" is a superscript ("2^{-24}"), "\n" starts a new line
// (legend entries only). Non-finite points, and non-positive ones on a log axis, are left out
// (the line breaks there).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace svg {

enum class Scale { Linear, Log2, Log10 };
// Steps: a value holds until the next point's x (a loss scale changes between steps, not along a
// slope), drawn as horizontal runs joined by vertical ones.
enum class Style { Line, Markers, LineMarkers, Steps };

struct Axis {
  std::string label;
  Scale scale = Scale::Linear;
  std::optional<double> lo, hi;  // fixed limits in data units; otherwise from the data
  bool include_zero = false;     // linear axes: the range reaches 0
};

struct Series {
  std::string label;  // "" = not in the legend
  std::vector<double> x, y;
  Style style = Style::Line;
  std::string color;  // "" = the next palette colour
  char marker = 'o';  // 'o' circle, 'x' cross, 's' square
  double width = 1.6;
  double opacity = 1.0;
};

// A shaded interval of x (on_x) or y; the ends may be +-infinity (to the plot's edge). Bands
// never widen the axis range: one outside it is not drawn and not listed.
struct Band {
  double lo, hi;
  std::string label, color;
  bool on_x = true;
};

// A dashed reference line at x = at (on_x) or y = at; it widens the axis range to show itself.
struct RefLine {
  double at;
  std::string label, color = "#444444";
  bool on_x = true;
};

struct Plot {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  std::vector<Band> bands;
  std::vector<RefLine> lines;
  double height = 300;  // of the plot area's panel, legend below it excluded
};

// Panels stacked top to bottom in one SVG.
struct Figure {
  std::string title;
  std::vector<Plot> plots;
  double width = 760;
};

struct Tick {
  double value;       // data units
  std::string label;  // markup, e.g. "2^{-24}"
};

// An axis's range (in the axis's own units: v, log2 v or log10 v) and its ticks.
struct AxisLayout {
  double lo = 0, hi = 1;
  std::vector<Tick> ticks;
};

namespace detail {

inline const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                 "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"};
constexpr double kFont = 12, kTitleFont = 14, kCharW = 0.6, kLineH = 15;

inline double to_axis(Scale s, double v) {
  return s == Scale::Log2 ? std::log2(v) : s == Scale::Log10 ? std::log10(v) : v;
}
inline bool usable(Scale s, double v) { return std::isfinite(v) && (s == Scale::Linear || v > 0); }

inline std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// One line of label markup as SVG text content: "^{...}" becomes a raised, smaller tspan.
inline std::string rich(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t sup = s.find("^{", i);
    if (sup == std::string::npos) {
      out += escape(s.substr(i));
      break;
    }
    size_t end = s.find('}', sup);
    if (end == std::string::npos) end = s.size();
    out += escape(s.substr(i, sup - i));
    out += "<tspan baseline-shift='super' font-size='75%'>" + escape(s.substr(sup + 2, end - sup - 2)) + "</tspan>";
    i = end + 1;
  }
  return out;
}

// Estimated width in pixels of one line of markup at `font` px (superscripts are 75% wide).
// Sans-serif digits and lower-case letters average about 0.55 em; 0.6 keeps estimates high.
inline double text_width(const std::string& s, double font = kFont) {
  double w = 0;
  bool in_sup = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!in_sup && s.compare(i, 2, "^{") == 0) {
      in_sup = true;
      ++i;
      continue;
    }
    if (in_sup && s[i] == '}') {
      in_sup = false;
      continue;
    }
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    w += (in_sup ? 0.75 : 1.0) * kCharW * font;
  }
  return w;
}

inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string line; std::getline(ss, line, '\n');) out.push_back(line);
  if (out.empty()) out.emplace_back();
  return out;
}

inline std::string num(double v) {  // coordinates: 0.1 px is plenty
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return std::string(b) == "-0.0" ? "0.0" : b;
}

}  // namespace detail

// "k x step" for a tick at a round step, with exactly the decimals the step has: 0.2, 0.4 (never
// 0.40000001), 15 (never 15.99); very large or small numbers as m×10^{e}.
inline std::string format_tick(double value, double step) {
  const double mag = std::max(std::abs(value), step);
  char b[64];
  if (mag >= 1e6 || step < 1e-4) {
    if (std::abs(value) < 0.5 * step) return "0";
    // Each label its own exponent; the mantissa has the digits the step needs, trailing zeros cut.
    const int e = static_cast<int>(std::floor(std::log10(std::abs(value)) + 1e-9));
    const int decimals = std::max(0, e - static_cast<int>(std::floor(std::log10(step) + 1e-9)));
    std::snprintf(b, sizeof b, "%.*f", decimals, value / std::pow(10.0, e));
    std::string m = b;
    if (m.find('.') != std::string::npos) {
      m.erase(m.find_last_not_of('0') + 1);
      if (m.back() == '.') m.pop_back();
    }
    return m + "×10^{" + std::to_string(e) + "}";
  }
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  std::snprintf(b, sizeof b, "%.*f", decimals, value);
  std::string s = b;
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);  // "-0.0"
  return s;
}

// Ticks at multiples of the smallest round step (1, 2 or 5 x 10^k) that gives at most max_ticks
// over [lo, hi]; the range is widened to the outer ticks, so the axis starts and ends on one.
inline AxisLayout linear_ticks(double lo, double hi, int max_ticks) {
  if (!(std::isfinite(lo) && std::isfinite(hi))) throw std::invalid_argument("svg: non-finite axis range");
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(lo))) {  // one value: a small range around it
    const double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= d, hi += d;
  }
  max_ticks = std::max(max_ticks, 2);
  double step = std::pow(10.0, std::floor(std::log10((hi - lo) / max_ticks)));
  for (int i = 0;; ++i) {
    const double s = step * (i % 3 == 0 ? 1 : i % 3 == 1 ? 2 : 5) * std::pow(10.0, i / 3);
    const double k0 = std::floor(lo / s + 1e-9), k1 = std::ceil(hi / s - 1e-9);
    if (k1 - k0 + 1 <= max_ticks) {
      AxisLayout a{k0 * s, k1 * s, {}};
      for (double k = k0; k <= k1; ++k) a.ticks.push_back({k * s, format_tick(k * s, s)});
      return a;
    }
  }
}

// Ticks at base^e for integer e at multiples of the smallest exponent step giving at most
// max_ticks: on base 2 a power of two (1, 2, 4, 8, ...: 8 puts 2^-24, FP16's smallest subnormal,
// on a tick), on base 10 1, 2, 3, 5, 10, ...; the range is the data's, 4% wider at each end (at
// least 0.15 of a power) so that values at a power of two, such as loss scales, do not lie on the
// frame. Labels: "2^{e}"; on base 10, 0.001 ... 1000 written out and 10^{e} beyond.
inline AxisLayout log_ticks(double lo, double hi, int base, int max_ticks) {
  if (!(lo > 0 && hi > 0 && std::isfinite(lo) && std::isfinite(hi)))
    throw std::invalid_argument("svg: a log axis needs a positive, finite range");
  if (lo > hi) std::swap(lo, hi);
  const double lb = std::log(static_cast<double>(base));
  double l0 = std::log(lo) / lb, l1 = std::log(hi) / lb;
  if (l1 - l0 < 1e-9) l0 -= 1, l1 += 1;  // one value: a power either side
  const double margin = std::max(0.04 * (l1 - l0), 0.15);
  l0 -= margin, l1 += margin;
  const double e0 = std::ceil(l0 - 1e-9), e1 = std::floor(l1 + 1e-9);  // the powers inside
  max_ticks = std::max(max_ticks, 2);
  static constexpr int kSteps2[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  static constexpr int kSteps10[] = {1, 2, 3, 5, 10, 20, 50, 100, 200};
  int step = 1;
  for (int s : base == 2 ? kSteps2 : kSteps10) {
    step = s;
    if (std::floor(e1 / s) - std::ceil(e0 / s) + 1 <= max_ticks) break;
  }
  AxisLayout a{l0, l1, {}};
  for (double e = std::ceil(e0 / step) * step; e <= e1; e += step) {
    const int k = static_cast<int>(e);
    std::string label;
    if (base == 10 && k >= -3 && k <= 3)
      label = format_tick(std::pow(10.0, k), std::pow(10.0, std::min(k, 0)));
    else
      label = std::to_string(base) + "^{" + std::to_string(k) + "}";
    a.ticks.push_back({std::pow(static_cast<double>(base), k), label});
  }
  return a;
}

// FP16's ranges shaded on the axis that carries magnitudes (a log2 axis): below 2^-24 (the
// smallest subnormal: values there round to 0 or 2^-24), 2^-24 to 2^-14 (subnormal: fewer than
// 11 significant bits) and above 65504 (the largest finite FP16: rounds to inf).
inline void add_fp16_zones(Plot& p, bool on_x = true) {
  const double inf = std::numeric_limits<double>::infinity();
  p.bands.push_back({0, std::ldexp(1.0, -24), "FP16 underflow\n(below 2^{-24}, min subnormal)", "#d62728", on_x});
  p.bands.push_back(
      {std::ldexp(1.0, -24), std::ldexp(1.0, -14), "FP16 subnormal\n(2^{-24} to 2^{-14})", "#ff7f0e", on_x});
  p.bands.push_back({65504, inf, "FP16 overflow\n(above 65504)", "#9467bd", on_x});
}

namespace detail {

struct LegendEntry {
  std::string label, color;
  enum Kind { LineK, MarkerK, LineMarkerK, BandK, RefK } kind;
  char marker = 'o';
  double width = 1.6, opacity = 1;
};

inline std::string marker_svg(char m, double x, double y, const std::string& color, double r = 3.2) {
  std::ostringstream os;
  if (m == 'x')
    os << "<path d='M" << num(x - r) << ' ' << num(y - r) << "L" << num(x + r) << ' ' << num(y + r) << "M" << num(x - r)
       << ' ' << num(y + r) << "L" << num(x + r) << ' ' << num(y - r) << "' stroke='" << color
       << "' stroke-width='1.6' fill='none'/>";
  else if (m == 's')
    os << "<rect x='" << num(x - r) << "' y='" << num(y - r) << "' width='" << num(2 * r) << "' height='" << num(2 * r)
       << "' fill='" << color << "'/>";
  else
    os << "<circle cx='" << num(x) << "' cy='" << num(y) << "' r='" << num(r) << "' fill='" << color << "'/>";
  return os.str();
}

// The data range of one axis (in axis units) over the series and reference lines.
inline std::pair<double, double> data_range(const Plot& p, bool x_axis) {
  const Axis& ax = x_axis ? p.x : p.y;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& s : p.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double v = x_axis ? s.x[i] : s.y[i], other = x_axis ? s.y[i] : s.x[i];
      if (!usable(ax.scale, v) || !usable(x_axis ? p.y.scale : p.x.scale, other)) continue;
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
  for (const auto& l : p.lines)
    if (l.on_x == x_axis && usable(ax.scale, l.at)) lo = std::min(lo, l.at), hi = std::max(hi, l.at);
  if (ax.include_zero && ax.scale == Scale::Linear) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  if (ax.lo) lo = *ax.lo;
  if (ax.hi) hi = *ax.hi;
  if (lo > hi) {  // no data at all
    lo = ax.scale == Scale::Linear ? 0 : 1;
    hi = ax.scale == Scale::Linear ? 1 : ax.scale == Scale::Log2 ? 2 : 10;
  }
  return {lo, hi};
}

// Ticks for an axis `pixels` long whose labels never overlap: the coarsest needed is found by
// asking for fewer ticks until neighbouring labels (their estimated widths across a horizontal
// axis, one line height up a vertical one) are at least `gap` px apart.
inline AxisLayout layout_axis(const Axis& ax, double lo, double hi, double pixels, bool horizontal) {
  const double gap = horizontal ? 10 : 6;
  AxisLayout best;
  for (int max_ticks = 10; max_ticks >= 2; --max_ticks) {
    AxisLayout a = ax.scale == Scale::Linear ? linear_ticks(lo, hi, max_ticks)
                                             : log_ticks(lo, hi, ax.scale == Scale::Log2 ? 2 : 10, max_ticks);
    if (ax.lo) a.lo = to_axis(ax.scale, *ax.lo);  // fixed limits are kept as given
    if (ax.hi) a.hi = to_axis(ax.scale, *ax.hi);
    std::vector<Tick> inside;
    for (const Tick& t : a.ticks) {
      const double u = to_axis(ax.scale, t.value);
      if (u >= a.lo - 1e-9 * std::abs(a.hi - a.lo) && u <= a.hi + 1e-9 * std::abs(a.hi - a.lo)) inside.push_back(t);
    }
    a.ticks = inside;
    best = a;
    bool fits = true;
    for (size_t i = 1; i < a.ticks.size() && fits; ++i) {
      const double d =
          (to_axis(ax.scale, a.ticks[i].value) - to_axis(ax.scale, a.ticks[i - 1].value)) / (a.hi - a.lo) * pixels;
      const double need =
          horizontal ? (text_width(a.ticks[i].label) + text_width(a.ticks[i - 1].label)) / 2 + gap : kLineH + gap;
      fits = d >= need;
    }
    if (fits) return a;
  }
  if (best.ticks.size() > 2) best.ticks = {best.ticks.front(), best.ticks.back()};
  return best;
}

// One panel at vertical offset y0, `width` wide; returns its height. `left` and `right` are the
// margins left and right of the plot area: at least what is passed, grown to what the tick labels
// and the legend need (a Figure renders twice, the second time with every panel's largest, so
// that the panels' plot areas line up).
inline double render_panel(std::ostringstream& os, const Plot& p, double y0, double width, int id, double& left,
                           double& right) {
  for (const auto& s : p.series) {
    if (s.x.size() != s.y.size())
      throw std::invalid_argument("svg: series '" + s.label + "' has " + std::to_string(s.x.size()) + " x and " +
                                  std::to_string(s.y.size()) + " y values");
    if (s.marker != 'o' && s.marker != 'x' && s.marker != 's')
      throw std::invalid_argument("svg: series '" + s.label + "' has marker '" + std::string(1, s.marker) +
                                  "' (o, x, s)");
  }
  const double top = p.title.empty() ? 14 : 34, bottom = 46, plot_h = p.height;
  auto [xlo, xhi] = data_range(p, true);
  auto [ylo, yhi] = data_range(p, false);
  const AxisLayout ya = layout_axis(p.y, ylo, yhi, plot_h, false);

  // The legend: every labelled series, then the bands inside the x or y range, then the lines.
  std::vector<LegendEntry> legend;
  size_t palette = 0;
  std::vector<std::string> colors;
  for (const auto& s : p.series) {
    colors.push_back(s.color.empty() ? kPalette[palette++ % 8] : s.color);
    if (s.label.empty()) continue;
    auto kind = s.style == Style::Markers       ? LegendEntry::MarkerK
                : s.style == Style::LineMarkers ? LegendEntry::LineMarkerK
                                                : LegendEntry::LineK;
    legend.push_back({s.label, colors.back(), kind, s.marker, s.width, s.opacity});
  }
  std::vector<const Band*> bands;
  for (const auto& b : p.bands) {
    const Axis& ax = b.on_x ? p.x : p.y;
    const double lo = b.on_x ? xlo : ya.lo, hi = b.on_x ? xhi : ya.hi;
    // x is not laid out yet: compare x bands with the data range (ticks only widen it).
    const double blo = usable(ax.scale, b.lo) ? to_axis(ax.scale, b.lo) : -std::numeric_limits<double>::infinity();
    const double bhi = to_axis(ax.scale, b.hi);
    const double rlo = b.on_x ? to_axis(ax.scale, lo) : lo, rhi = b.on_x ? to_axis(ax.scale, hi) : hi;
    if (bhi <= rlo || blo >= rhi) continue;
    bands.push_back(&b);
    legend.push_back({b.label, b.color, LegendEntry::BandK});
  }
  for (const auto& l : p.lines) legend.push_back({l.label, l.color, LegendEntry::RefK});

  const double swatch = 26, pad = 8;
  double legend_w = 0, legend_h = 0;
  for (const auto& e : legend) {
    auto ls = lines_of(e.label);
    for (const auto& l : ls) legend_w = std::max(legend_w, text_width(l));
    legend_h += kLineH * static_cast<double>(ls.size()) + 5;
  }
  const bool legend_right = !legend.empty() && legend_w + swatch + 2 * pad <= 0.36 * width;
  right = std::max(right, legend_right ? legend_w + swatch + 2 * pad + 8 : 16);

  double ytick_w = 0;
  for (const auto& t : ya.ticks) ytick_w = std::max(ytick_w, text_width(t.label));
  left = std::max(left, 26 + ytick_w + 10);
  const double plot_w = width - left - right;
  const AxisLayout xa = layout_axis(p.x, xlo, xhi, plot_w, true);

  auto px = [&](double v) { return left + (to_axis(p.x.scale, v) - xa.lo) / (xa.hi - xa.lo) * plot_w; };
  auto py = [&](double v) { return y0 + top + plot_h - (to_axis(p.y.scale, v) - ya.lo) / (ya.hi - ya.lo) * plot_h; };
  const double x0 = left, x1 = left + plot_w, yt = y0 + top, yb = y0 + top + plot_h;
  auto clampx = [&](double v) { return std::clamp(v, x0, x1); };
  auto clampy = [&](double v) { return std::clamp(v, yt, yb); };

  if (!p.title.empty())
    os << "<text x='" << num(left + plot_w / 2) << "' y='" << num(y0 + 22) << "' text-anchor='middle' font-size='"
       << kTitleFont << "' font-weight='bold'>" << rich(p.title) << "</text>\n";
  os << "<clipPath id='area" << id << "'><rect x='" << num(x0) << "' y='" << num(yt) << "' width='" << num(plot_w)
     << "' height='" << num(plot_h) << "'/></clipPath>\n";
  // Bands, then the grid, then the data, then the frame.
  for (const Band* b : bands) {
    const Axis& ax = b->on_x ? p.x : p.y;
    const bool lo_edge = !usable(ax.scale, b->lo);
    const bool hi_edge = !std::isfinite(b->hi);
    if (b->on_x) {
      const double a = lo_edge ? x0 : clampx(px(b->lo)), c = hi_edge ? x1 : clampx(px(b->hi));
      os << "<rect x='" << num(a) << "' y='" << num(yt) << "' width='" << num(c - a) << "' height='" << num(plot_h)
         << "' fill='" << b->color << "' fill-opacity='0.13'/>\n";
    } else {
      const double a = hi_edge ? yt : clampy(py(b->hi)), c = lo_edge ? yb : clampy(py(b->lo));
      os << "<rect x='" << num(x0) << "' y='" << num(a) << "' width='" << num(plot_w) << "' height='" << num(c - a)
         << "' fill='" << b->color << "' fill-opacity='0.13'/>\n";
    }
  }
  for (const auto& t : xa.ticks) {
    const double x = px(t.value);
    os << "<line x1='" << num(x) << "' y1='" << num(yt) << "' x2='" << num(x) << "' y2='" << num(yb)
       << "' stroke='#e4e4e4'/>\n<line x1='" << num(x) << "' y1='" << num(yb) << "' x2='" << num(x) << "' y2='"
       << num(yb + 5) << "' stroke='black'/>\n<text x='" << num(x) << "' y='" << num(yb + 19)
       << "' text-anchor='middle'>" << rich(t.label) << "</text>\n";
  }
  for (const auto& t : ya.ticks) {
    const double y = py(t.value);
    os << "<line x1='" << num(x0) << "' y1='" << num(y) << "' x2='" << num(x1) << "' y2='" << num(y)
       << "' stroke='#e4e4e4'/>\n<line x1='" << num(x0 - 5) << "' y1='" << num(y) << "' x2='" << num(x0) << "' y2='"
       << num(y) << "' stroke='black'/>\n<text x='" << num(x0 - 8) << "' y='" << num(y + 4) << "' text-anchor='end'>"
       << rich(t.label) << "</text>\n";
  }
  os << "<g clip-path='url(#area" << id << ")'>\n";
  for (const auto& l : p.lines) {
    const Axis& ax = l.on_x ? p.x : p.y;
    if (!usable(ax.scale, l.at)) continue;
    if (l.on_x)
      os << "<line x1='" << num(px(l.at)) << "' y1='" << num(yt) << "' x2='" << num(px(l.at)) << "' y2='" << num(yb);
    else
      os << "<line x1='" << num(x0) << "' y1='" << num(py(l.at)) << "' x2='" << num(x1) << "' y2='" << num(py(l.at));
    os << "' stroke='" << l.color << "' stroke-width='1.4' stroke-dasharray='6 3'/>\n";
  }
  for (size_t k = 0; k < p.series.size(); ++k) {
    const Series& s = p.series[k];
    const std::string& c = colors[k];
    if (s.style != Style::Markers) {
      std::string pts;
      double last_x = 0, last_y = 0;
      int n = 0;
      auto flush = [&] {  // a run of one point (its neighbours missing) is a dot, or it would not show
        if (n == 1)
          os << "<circle cx='" << num(last_x) << "' cy='" << num(last_y) << "' r='" << num(std::max(s.width, 1.5))
             << "' fill='" << c << "' fill-opacity='" << s.opacity << "'/>\n";
        else if (n > 1)
          os << "<polyline fill='none' stroke='" << c << "' stroke-width='" << s.width << "' stroke-opacity='"
             << s.opacity << "' stroke-linejoin='round' points='" << pts << "'/>\n";
        pts.clear();
        n = 0;
      };
      double prev_y = 0;
      for (size_t i = 0; i < s.x.size(); ++i) {
        if (!usable(p.x.scale, s.x[i]) || !usable(p.y.scale, s.y[i])) {
          flush();
          continue;
        }
        if (s.style == Style::Steps && n > 0) pts += num(px(s.x[i])) + ',' + num(prev_y) + ' ';
        prev_y = py(s.y[i]);
        last_x = px(s.x[i]), last_y = prev_y, ++n;
        pts += num(last_x) + ',' + num(last_y) + ' ';
      }
      flush();
    }
    if (s.style == Style::Markers || s.style == Style::LineMarkers)
      for (size_t i = 0; i < s.x.size(); ++i)
        if (usable(p.x.scale, s.x[i]) && usable(p.y.scale, s.y[i]))
          os << marker_svg(s.marker, px(s.x[i]), py(s.y[i]), c) << "\n";
  }
  os << "</g>\n<rect x='" << num(x0) << "' y='" << num(yt) << "' width='" << num(plot_w) << "' height='" << num(plot_h)
     << "' fill='none' stroke='black'/>\n";
  os << "<text x='" << num(left + plot_w / 2) << "' y='" << num(yb + 38) << "' text-anchor='middle'>" << rich(p.x.label)
     << "</text>\n";
  os << "<text transform='translate(15 " << num(yt + plot_h / 2) << ") rotate(-90)' text-anchor='middle'>"
     << rich(p.y.label) << "</text>\n";

  // Legend entries stacked, right of the plot, or below it (in rows) when too wide.
  double lx = legend_right ? x1 + 14 : left, ly = legend_right ? yt + 4 : yb + bottom + 4;
  double below_h = 0, row_h = 0;
  for (const auto& e : legend) {
    auto ls = lines_of(e.label);
    double ew = swatch + 6 + 10;
    for (const auto& l : ls) ew = std::max(ew, swatch + 6 + text_width(l) + 18);
    const double eh = kLineH * static_cast<double>(ls.size()) + 5;
    if (!legend_right && lx + ew > width - 8 && lx > left) {
      lx = left, ly += row_h, below_h += row_h, row_h = 0;
    }
    const double cy = ly + 6;
    switch (e.kind) {
      case LegendEntry::BandK:
        os << "<rect x='" << num(lx) << "' y='" << num(ly) << "' width='" << swatch << "' height='12' fill='" << e.color
           << "' fill-opacity='0.25' stroke='" << e.color << "' stroke-opacity='0.5'/>\n";
        break;
      case LegendEntry::RefK:
        os << "<line x1='" << num(lx) << "' y1='" << num(cy) << "' x2='" << num(lx + swatch) << "' y2='" << num(cy)
           << "' stroke='" << e.color << "' stroke-width='1.4' stroke-dasharray='6 3'/>\n";
        break;
      default:
        if (e.kind != LegendEntry::MarkerK)
          os << "<line x1='" << num(lx) << "' y1='" << num(cy) << "' x2='" << num(lx + swatch) << "' y2='" << num(cy)
             << "' stroke='" << e.color << "' stroke-width='" << std::max(e.width, 1.6) << "' stroke-opacity='"
             << std::max(e.opacity, 0.6) << "'/>\n";
        if (e.kind != LegendEntry::LineK) os << marker_svg(e.marker, lx + swatch / 2, cy, e.color) << "\n";
    }
    for (size_t i = 0; i < ls.size(); ++i)
      os << "<text x='" << num(lx + swatch + 6) << "' y='" << num(ly + 10 + kLineH * static_cast<double>(i)) << "'>"
         << rich(ls[i]) << "</text>\n";
    if (legend_right)
      ly += eh;
    else
      lx += ew, row_h = std::max(row_h, eh);
  }
  below_h += row_h;
  const double h_right = legend_right ? legend_h + 4 - plot_h : 0;
  return top + plot_h + bottom + (legend_right ? std::max(0.0, h_right) : below_h + (legend.empty() ? 0 : 8));
}

}  // namespace detail

inline std::string render(const Figure& f) {
  double left = 0, right = 0;
  for (const Plot& p : f.plots) {  // the margins every panel needs
    std::ostringstream scratch;
    detail::render_panel(scratch, p, 0, f.width, 0, left, right);
  }
  std::ostringstream body;
  double y = f.title.empty() ? 0 : 30;
  int id = 0;
  for (const Plot& p : f.plots) y += detail::render_panel(body, p, y, f.width, id++, left, right) + 6;
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << f.width << "' height='" << detail::num(y)
     << "' viewBox='0 0 " << f.width << ' ' << detail::num(y)
     << "' font-family='DejaVu Sans, Helvetica, Arial, sans-serif' font-size='" << detail::kFont << "'>\n"
     << "<rect width='100%' height='100%' fill='white'/>\n";
  if (!f.title.empty()) {  // smaller type for a title wider than the figure (bold is ~10% wider)
    const double font = std::min(16.0, 16.0 * (f.width - 24) / (1.1 * detail::text_width(f.title, 16)));
    os << "<text x='" << f.width / 2 << "' y='22' text-anchor='middle' font-size='" << detail::num(font)
       << "' font-weight='bold'>" << detail::rich(f.title) << "</text>\n";
  }
  os << body.str() << "</svg>\n";
  return os.str();
}

inline std::string render(const Plot& p) { return render(Figure{"", {p}}); }

// Writes the SVG; throws std::runtime_error naming the file when it cannot be written.
template <class PlotOrFigure>
void write(const std::string& path, const PlotOrFigure& p) {
  const std::string text = render(p);
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write the plot '" + path + "'");
}

}  // namespace svg
