// A small SVG line-plot writer for benchmark reports: x/y axes with round-number ticks (linear, or
// logarithmic on x), labelled axes, a title, one polyline per series with optional point markers and
// vertical error bars, and a legend. No plotting library: the output is a self-contained SVG 1.1 document
// that browsers and GitHub render, and that a test can check for well-formedness.
//
// Pure functions, no state: safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::bench {

struct PlotPoint {
  double x = 0;
  double y = 0;
  // Error bar from y_lo to y_hi (drawn only when y_lo < y_hi).
  double y_lo = 0;
  double y_hi = 0;
};

struct PlotSeries {
  std::string name;
  std::vector<PlotPoint> points;  // drawn in the given order; non-finite points are skipped
  bool markers = true;            // a circle at every point
  bool dashed = false;
  int color = -1;  // index into the palette; -1: the series' position
};

struct PlotOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;  // positive x only; others are skipped
  bool y_from_zero = true;
  int width = 760;
  int height = 460;
};

// The whole SVG document.
std::string render_line_plot(const PlotOptions& options, const std::vector<PlotSeries>& series);

// Text safe inside XML character data and attribute values.
std::string xml_escape(std::string_view text);

// About `target` round-number tick positions (1, 2 or 5 times a power of ten apart) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target);

}  // namespace tessera::bench
