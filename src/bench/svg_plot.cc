#include "bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/core.h>

namespace tessera::bench {
namespace {

// Colour-blind-friendly palette (Okabe-Ito, black last).
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#F0E442", "#000000"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

std::string number(double v) {
  if (v == 0) return "0";
  char buf[32];
  // Whole numbers up to a billion in full (10000, not 1e+04); others with four significant digits.
  if (std::abs(v) < 1e9 && v == std::round(v)) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

// Coordinates written with one decimal: enough for a screen, small files.
std::string coord(double v) { return fmt::format("{:.1f}", v); }

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool empty() const { return !(lo <= hi); }
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> ticks;
  const int first = static_cast<int>(std::floor(std::log10(lo)));
  const int last = static_cast<int>(std::ceil(std::log10(hi)));
  const bool dense = last - first <= 3;
  for (int e = first; e <= last; ++e) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (!dense && m != 1.0) continue;
      const double t = m * std::pow(10.0, e);
      if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9)) ticks.push_back(t);
    }
  }
  return ticks;
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
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
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab and newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || target < 1) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) return {lo};
  const double raw = (hi - lo) / target;
  const int exp10 = static_cast<int>(std::floor(std::log10(raw)));
  const double mag = std::pow(10.0, exp10);
  double m = 1;
  for (double c : {1.0, 2.0, 5.0, 10.0}) {
    m = c;
    if (c * mag >= raw) break;
  }
  const double step = m * mag;
  // Tick k is k * m * 10^exp10, computed as a division for negative exponents so 0.3 prints as 0.3.
  auto tick = [&](long long k) {
    const double units = static_cast<double>(k) * m;
    return exp10 < 0 ? units / std::pow(10.0, -exp10) : units * mag;
  };
  std::vector<double> ticks;
  for (auto k = static_cast<long long>(std::ceil(lo / step - 1e-9)); tick(k) <= hi + step * 1e-9; ++k) {
    ticks.push_back(tick(k));
  }
  return ticks;
}

std::string render_line_plot(const PlotOptions& o, const std::vector<PlotSeries>& series) {
  // Data ranges over the points that can be drawn.
  auto drawable = [&](const PlotPoint& p) { return std::isfinite(p.x) && std::isfinite(p.y) && (!o.log_x || p.x > 0); };
  Range xr, yr;
  for (const PlotSeries& s : series) {
    for (const PlotPoint& p : s.points) {
      if (!drawable(p)) continue;
      xr.add(p.x);
      yr.add(p.y);
      if (p.y_lo < p.y_hi && std::isfinite(p.y_lo) && std::isfinite(p.y_hi)) {
        yr.add(p.y_lo);
        yr.add(p.y_hi);
      }
    }
  }
  const bool has_data = !xr.empty();
  if (!has_data) {
    xr = {o.log_x ? 1.0 : 0.0, o.log_x ? 10.0 : 1.0};
    yr = {0.0, 1.0};
  }
  if (o.y_from_zero && yr.lo > 0) yr.lo = 0;
  if (xr.hi == xr.lo) {
    xr.lo = o.log_x ? xr.lo / 2 : xr.lo - 1;
    xr.hi = o.log_x ? xr.hi * 2 : xr.hi + 1;
  }
  if (yr.hi == yr.lo) yr.hi = yr.lo + 1;
  std::vector<double> xt = o.log_x ? log_ticks(xr.lo, xr.hi) : nice_ticks(xr.lo, xr.hi, 6);
  std::vector<double> yt = nice_ticks(yr.lo, yr.hi, 6);
  // Widen linear ranges out to the next tick on each side, so the grid frames the data and no point sits on
  // an axis line.
  auto frame = [](Range& r, std::vector<double>& t) {
    if (t.size() >= 2) {
      const double step = t[1] - t[0];
      if (t.front() > r.lo) t.insert(t.begin(), t.front() - step);
      if (t.back() < r.hi) t.push_back(t.back() + step);
    }
    if (!t.empty()) r = {std::min(r.lo, t.front()), std::max(r.hi, t.back())};
  };
  if (!o.log_x) frame(xr, xt);
  frame(yr, yt);

  const double left = 78, top = 44, bottom = 58;
  const double right = series.empty() ? 24 : 230;  // room for the legend
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  auto sx = [&](double x) {
    double f = o.log_x ? (std::log10(x) - std::log10(xr.lo)) / (std::log10(xr.hi) - std::log10(xr.lo))
                       : (x - xr.lo) / (xr.hi - xr.lo);
    return left + f * pw;
  };
  auto sy = [&](double y) { return top + ph - (y - yr.lo) / (yr.hi - yr.lo) * ph; };

  std::string s;
  s += fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      o.width, o.height);
  s += fmt::format("<title>{}</title>\n", xml_escape(o.title));
  s += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", o.width, o.height);
  s += fmt::format("<text class=\"title\" x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
                   coord(left + pw / 2), xml_escape(o.title));

  s += "<g class=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n";
  for (double t : xt)
    s +=
        fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", coord(sx(t)), coord(top), coord(top + ph));
  for (double t : yt)
    s += fmt::format("<line x1=\"{1}\" y1=\"{0}\" x2=\"{2}\" y2=\"{0}\"/>\n", coord(sy(t)), coord(left),
                     coord(left + pw));
  s += "</g>\n";

  s += "<g class=\"axes\" stroke=\"#333333\" stroke-width=\"1\">\n";
  s += fmt::format("<line class=\"x-axis\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>\n", coord(left),
                   coord(top + ph), coord(left + pw));
  s += fmt::format("<line class=\"y-axis\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", coord(left), coord(top),
                   coord(top + ph));
  s += "</g>\n<g class=\"ticks\" fill=\"#333333\">\n";
  for (double t : xt)
    s += fmt::format("<text class=\"x-tick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", coord(sx(t)),
                     coord(top + ph + 16), number(t));
  for (double t : yt)
    s += fmt::format("<text class=\"y-tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", coord(left - 6),
                     coord(sy(t) + 4), number(t));
  s += "</g>\n";
  s += fmt::format("<text class=\"x-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", coord(left + pw / 2),
                   coord(o.height - 14.0), xml_escape(o.x_label));
  s += fmt::format(
      "<text class=\"y-label\" x=\"16\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {0})\">{1}</text>\n",
      coord(top + ph / 2), xml_escape(o.y_label));
  if (!has_data) {
    s += fmt::format(
        "<text class=\"no-data\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#999999\">no data</text>\n",
        coord(left + pw / 2), coord(top + ph / 2));
  }

  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& ser = series[i];
    const char* color = kPalette[(ser.color >= 0 ? ser.color : static_cast<int>(i)) % kPaletteSize];
    s += fmt::format("<g class=\"series\" data-name=\"{}\" stroke=\"{}\" fill=\"{}\">\n", xml_escape(ser.name), color,
                     color);
    std::string pts;
    for (const PlotPoint& p : ser.points) {
      if (!drawable(p)) continue;
      if (!pts.empty()) pts += ' ';
      pts += coord(sx(p.x)) + "," + coord(sy(p.y));
    }
    if (!pts.empty()) {
      s += fmt::format("<polyline fill=\"none\" stroke-width=\"2\"{} points=\"{}\"/>\n",
                       ser.dashed ? " stroke-dasharray=\"6 4\"" : "", pts);
    }
    for (const PlotPoint& p : ser.points) {
      if (!drawable(p)) continue;
      if (p.y_lo < p.y_hi && std::isfinite(p.y_lo) && std::isfinite(p.y_hi)) {
        s += fmt::format("<line class=\"error-bar\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke-width=\"1\"/>\n",
                         coord(sx(p.x)), coord(sy(p.y_lo)), coord(sy(p.y_hi)));
      }
      if (ser.markers) s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\"/>\n", coord(sx(p.x)), coord(sy(p.y)));
    }
    s += "</g>\n";
  }

  if (!series.empty()) {
    s += "<g class=\"legend\">\n";
    const double lx = left + pw + 14;
    for (size_t i = 0; i < series.size(); ++i) {
      const PlotSeries& ser = series[i];
      const char* color = kPalette[(ser.color >= 0 ? ser.color : static_cast<int>(i)) % kPaletteSize];
      const double ly = top + 8 + 18.0 * static_cast<double>(i);
      s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>\n",
                       coord(lx), coord(ly), coord(lx + 22), color, ser.dashed ? " stroke-dasharray=\"6 4\"" : "");
      s += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", coord(lx + 28), coord(ly + 4), xml_escape(ser.name));
    }
    s += "</g>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace tessera::bench
