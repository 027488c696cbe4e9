// examples/svg_plot_test.cpp — the ctest example_svg_plot_ticks: svg_plot.h's tick and layout
// rules, checked on the ranges the examples meet (accuracies, losses, gradient magnitudes from
// 2^-40 up, loss scales 2^15..2^17) and on the labels the old plots got wrong (1e3.5, 15.99).
// Header-only and standard C++ only, so it needs no mixtape library; exits 1 on any failure,
// printing each one.
#include "svg_plot.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::cerr << "FAILED: " << what << "\n";
  }
}

std::string labels(const svg::AxisLayout& a) {
  std::string s;
  for (const auto& t : a.ticks) s += (s.empty() ? "" : " ") + t.label;
  return s;
}

void expect_labels(const svg::AxisLayout& a, const std::string& want, const std::string& what) {
  check(labels(a) == want, what + ": ticks '" + labels(a) + "', expected '" + want + "'");
}

// A label is the shortest text of its value at the step's decimals: parsing it gives the tick.
void expect_clean(const svg::AxisLayout& a, const std::string& what) {
  for (const auto& t : a.ticks) {
    check(t.label.find("000001") == std::string::npos && t.label.find("99999") == std::string::npos,
          what + ": label '" + t.label + "' has spurious digits");
    if (t.label.find('^') == std::string::npos)
      check(std::abs(std::stod(t.label) - t.value) <= 1e-9 * std::max(1.0, std::abs(t.value)),
            what + ": label '" + t.label + "' is not its value " + std::to_string(t.value));
  }
}

void linear_cases() {
  auto a = svg::linear_ticks(0.0123, 0.97, 10);
  expect_labels(a, "0.0 0.2 0.4 0.6 0.8 1.0", "[0.0123, 0.97]");
  check(a.lo == 0 && std::abs(a.hi - 1) < 1e-12, "[0.0123, 0.97] widens to [0, 1]");
  expect_clean(a, "[0.0123, 0.97]");

  // The range the old histogram labelled -28.8 ... 15.99.
  expect_labels(svg::linear_ticks(-28.8, 15.99, 10), "-30 -20 -10 0 10 20", "[-28.8, 15.99]");
  expect_labels(svg::linear_ticks(0.25, 0.9, 10), "0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9", "losses [0.25, 0.9]");
  expect_labels(svg::linear_ticks(84.3, 91.6, 10), "84 85 86 87 88 89 90 91 92", "accuracy % [84.3, 91.6]");
  expect_labels(svg::linear_ticks(0, 1404, 10), "0 200 400 600 800 1000 1200 1400 1600", "steps [0, 1404]");
  expect_labels(svg::linear_ticks(1, 3, 10), "1.0 1.5 2.0 2.5 3.0", "epochs [1, 3] (step 0.2 would give 11)");
  expect_labels(svg::linear_ticks(0.5, 0.5, 10), "0.44 0.46 0.48 0.50 0.52 0.54 0.56", "a single value 0.5");
  expect_labels(svg::linear_ticks(-3e-5, 7e-5, 6), "-5×10^{-5} 0 5×10^{-5} 1×10^{-4}", "tiny values as m×10^{e}");
  expect_labels(svg::linear_ticks(0, 2.5e6, 5), "0 1×10^{6} 2×10^{6} 3×10^{6}", "large values as m×10^{e}");
  for (double lo : {-7.3, 0.0, 0.013, 3.3, 1e3})
    for (double span : {0.07, 1.0, 13.0, 999.0})
      for (int n : {3, 5, 10}) {
        auto t = svg::linear_ticks(lo, lo + span, n);
        std::ostringstream what;
        what << "[" << lo << ", " << lo + span << "] at most " << n;
        check(static_cast<int>(t.ticks.size()) <= n && t.ticks.size() >= 2, what.str() + ": tick count");
        const double eps = 1e-9 * std::max(1.0, std::abs(lo) + span);  // a rounding error, far below a pixel
        check(t.lo <= lo + eps && t.hi >= lo + span - eps, what.str() + ": range covers the data");
        expect_clean(t, what.str());
      }
  check(svg::format_tick(0.1 + 0.2, 0.1) == "0.3", "0.1 + 0.2 at step 0.1 prints 0.3");
  check(svg::format_tick(-0.0, 0.5) == "0.0", "-0 prints 0.0");
  check(svg::format_tick(15.99, 1) == "16", "15.99 at step 1 prints 16");
}

void log_cases() {
  auto g = svg::log_ticks(std::ldexp(1.0, -30), std::ldexp(1.0, 17), 2, 10);
  check(g.ticks.size() <= 10 && g.ticks.size() >= 5,
        "[2^-30, 2^17]: 5..10 ticks, got " + std::to_string(g.ticks.size()));
  expect_labels(g, "2^{-24} 2^{-16} 2^{-8} 2^{0} 2^{8} 2^{16}", "[2^-30, 2^17]");
  for (const auto& t : g.ticks)
    check(std::log2(t.value) == std::round(std::log2(t.value)), "a power of two: " + t.label);
  check(g.lo < -30 && g.lo > -32 && g.hi > 17 && g.hi < 19, "[2^-30, 2^17] spans a little more than -30..17");

  expect_labels(svg::log_ticks(32768, 131072, 2, 10), "2^{15} 2^{16} 2^{17}", "loss scales 2^15..2^17");
  expect_labels(svg::log_ticks(65536, 65536, 2, 10), "2^{15} 2^{16} 2^{17}", "a constant scale 2^16");
  expect_labels(svg::log_ticks(std::ldexp(1.0, -40), std::ldexp(1.0, 20), 2, 10),
                "2^{-40} 2^{-32} 2^{-24} 2^{-16} 2^{-8} 2^{0} 2^{8} 2^{16}", "the histogram's range 2^-40..2^20");
  expect_labels(svg::log_ticks(3, 5000, 10, 10), "10 100 1000", "counts [3, 5000]");
  expect_labels(svg::log_ticks(0.7, 2e5, 10, 10), "1 10 100 1000 10^{4} 10^{5}", "counts [0.7, 2e5]");
  expect_labels(svg::log_ticks(0.0009, 2, 10, 10), "0.001 0.01 0.1 1", "[0.0009, 2]");
  bool threw = false;
  try {
    svg::log_ticks(0, 1, 2, 10);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  check(threw, "a log axis from 0 is refused");
}

// Ticks laid out on a short axis: neighbouring labels are at least their half-widths apart.
void layout_cases() {
  for (double px : {120.0, 250.0, 600.0}) {
    svg::Axis ax{"", svg::Scale::Log2};
    auto a = svg::detail::layout_axis(ax, std::ldexp(1.0, -40), std::ldexp(1.0, 20), px, true);
    for (size_t i = 1; i < a.ticks.size(); ++i) {
      const double d = (std::log2(a.ticks[i].value) - std::log2(a.ticks[i - 1].value)) / (a.hi - a.lo) * px;
      const double need =
          (svg::detail::text_width(a.ticks[i].label) + svg::detail::text_width(a.ticks[i - 1].label)) / 2;
      check(d >= need, "log2 axis " + std::to_string(px) + " px: '" + a.ticks[i - 1].label + "' and '" +
                           a.ticks[i].label + "' overlap");
    }
    check(a.ticks.size() >= 2, "log2 axis " + std::to_string(px) + " px keeps two ticks");
    svg::Axis lin{"", svg::Scale::Linear};
    auto b = svg::detail::layout_axis(lin, 0.0123, 0.97, px / 4, false);
    for (size_t i = 1; i < b.ticks.size(); ++i)
      check((b.ticks[i].value - b.ticks[i - 1].value) / (b.hi - b.lo) * px / 4 >= svg::detail::kLineH,
            "vertical axis " + std::to_string(px / 4) + " px: labels " + b.ticks[i - 1].label + ", " +
                b.ticks[i].label + " overlap");
  }
}

void render_cases() {
  svg::Plot p{"a <title> & more", {"x", svg::Scale::Log2}, {"count", svg::Scale::Log10}};
  p.series.push_back({"s", {1.0 / 1024, 0.5, 4, 0}, {3, 30, 0, 7}});  // 0s dropped on log axes
  svg::add_fp16_zones(p);
  p.lines.push_back({std::ldexp(1.0, -40), "2^{-24} / S"});
  const std::string s = svg::render(p);
  check(s.rfind("<svg", 0) == 0 && s.size() > 7 && s.substr(s.size() - 7) == "</svg>\n", "starts <svg, ends </svg>");
  check(s.find("a &lt;title&gt; &amp; more") != std::string::npos, "the title is escaped");
  check(s.find("baseline-shift='super'") != std::string::npos, "exponents are superscripts");
  check(s.find("FP16 underflow") != std::string::npos && s.find("FP16 subnormal") != std::string::npos,
        "the FP16 zones inside the range are in the legend");
  check(s.find("FP16 overflow") == std::string::npos, "the overflow zone outside the range is not listed");
  check(s.find("nan") == std::string::npos && s.find("inf") == std::string::npos, "no non-finite coordinates");
  bool threw = false;
  try {
    svg::render(svg::Plot{"", {}, {}, {{"bad", {1, 2}, {1}}}});
  } catch (const std::invalid_argument& e) {
    threw = std::string(e.what()).find("'bad' has 2 x and 1 y") != std::string::npos;
  }
  check(threw, "mismatched x and y are refused, naming the series");
}

}  // namespace

int main() {
  linear_cases();
  log_cases();
  layout_cases();
  render_cases();
  if (failures) {
    std::cerr << failures << " svg_plot check(s) failed\n";
    return 1;
  }
  std::cout << "svg_plot: all tick, layout and rendering checks passed\n";
  return 0;
}
