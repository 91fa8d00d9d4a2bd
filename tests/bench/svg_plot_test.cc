// The SVG writer: every plot is well-formed XML with both axes, their labels, one group and one polyline per
// series at the right places, and text escaped.
#include "bench/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/xml_check.h"

namespace tessera::bench {
namespace {

using testing::check_xml;
using testing::XmlCheck;
using testing::XmlElement;

std::vector<const XmlElement*> with_class(const XmlCheck& x, const std::string& cls) {
  std::vector<const XmlElement*> out;
  for (const XmlElement& e : x.elements) {
    auto it = e.attrs.find("class");
    if (it != e.attrs.end() && it->second == cls) out.push_back(&e);
  }
  return out;
}

std::vector<std::pair<double, double>> polyline_points(const XmlElement& e) {
  std::vector<std::pair<double, double>> out;
  std::string pts = e.attrs.at("points");
  size_t pos = 0;
  while (pos < pts.size()) {
    size_t comma = pts.find(',', pos), space = pts.find(' ', pos);
    out.emplace_back(std::stod(pts.substr(pos, comma - pos)), std::stod(pts.substr(comma + 1, space - comma - 1)));
    pos = space == std::string::npos ? pts.size() : space + 1;
  }
  return out;
}

TEST(SvgPlot, IsWellFormedWithAxesLabelsAndOneLinePerSeries) {
  std::vector<PlotSeries> series = {
      {"TTFT p50", {{1, 10}, {2, 20}, {4, 80}}},
      {"TTFT p99 <&> \"quoted\"", {{1, 30, 25, 35}, {2, 60}, {4, 200}}, true, true},
  };
  std::string svg = render_line_plot({.title = "latency & throughput", .x_label = "req/s", .y_label = "ms"}, series);
  XmlCheck x = check_xml(svg);
  ASSERT_TRUE(x.ok) << x.error << "\n" << svg;
  EXPECT_EQ(x.elements.front().name, "svg");
  EXPECT_EQ(x.elements.front().attrs.at("xmlns"), "http://www.w3.org/2000/svg");
  EXPECT_EQ(with_class(x, "x-axis").size(), 1u);
  EXPECT_EQ(with_class(x, "y-axis").size(), 1u);
  ASSERT_EQ(with_class(x, "x-label").size(), 1u);
  EXPECT_EQ(with_class(x, "x-label")[0]->text, "req/s");
  EXPECT_EQ(with_class(x, "y-label")[0]->text, "ms");
  EXPECT_EQ(with_class(x, "title")[0]->text, "latency &amp; throughput");
  EXPECT_GE(with_class(x, "x-tick").size(), 3u);
  EXPECT_GE(with_class(x, "y-tick").size(), 3u);
  auto groups = with_class(x, "series");
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1]->attrs.at("data-name"), "TTFT p99 &lt;&amp;&gt; &quot;quoted&quot;");
  EXPECT_EQ(with_class(x, "error-bar").size(), 1u);

  // Each series is one polyline with its three points, left to right, higher values drawn higher up.
  std::vector<const XmlElement*> lines;
  for (const XmlElement& e : x.elements)
    if (e.name == "polyline") lines.push_back(&e);
  ASSERT_EQ(lines.size(), 2u);
  auto p50 = polyline_points(*lines[0]);
  auto p99 = polyline_points(*lines[1]);
  ASSERT_EQ(p50.size(), 3u);
  ASSERT_EQ(p99.size(), 3u);
  EXPECT_LT(p50[0].first, p50[1].first);
  EXPECT_GT(p50[0].second, p50[2].second);  // SVG y grows downwards
  EXPECT_EQ(p50[0].first, p99[0].first);    // same x, same pixel column
  EXPECT_GT(p50[2].second, p99[2].second);  // 200 ms is above 80 ms
  EXPECT_NE(lines[1]->attrs.count("stroke-dasharray"), 0u);
}

TEST(SvgPlot, LogAxisSkipsNonPositiveAndNonFinitePoints) {
  std::vector<PlotSeries> series = {{"cdf", {{0, 0.1}, {1, 0.2}, {10, 0.5}, {NAN, 0.6}, {1000, 1.0}}, false}};
  std::string svg = render_line_plot({.title = "t", .x_label = "ms", .y_label = "fraction", .log_x = true}, series);
  XmlCheck x = check_xml(svg);
  ASSERT_TRUE(x.ok) << x.error;
  std::vector<std::string> ticks;
  for (const XmlElement* e : with_class(x, "x-tick")) ticks.push_back(e->text);
  // Three decades: 1-2-5 ticks; wider ranges get powers of ten only.
  EXPECT_EQ(ticks, (std::vector<std::string>{"1", "2", "5", "10", "20", "50", "100", "200", "500", "1000"}));
  for (const XmlElement& e : x.elements) {
    if (e.name == "polyline") {
      EXPECT_EQ(polyline_points(e).size(), 3u);
    }
    EXPECT_NE(e.name, "circle");  // markers off
  }
}

TEST(SvgPlot, WideLogAxisTicksOnlyPowersOfTen) {
  std::string svg = render_line_plot({.log_x = true}, {{"s", {{0.5, 1}, {20000, 2}}}});
  XmlCheck x = check_xml(svg);
  ASSERT_TRUE(x.ok) << x.error;
  std::vector<std::string> ticks;
  for (const XmlElement* e : with_class(x, "x-tick")) ticks.push_back(e->text);
  EXPECT_EQ(ticks, (std::vector<std::string>{"1", "10", "100", "1000", "10000"}));
}

TEST(SvgPlot, NoDataStillDrawsAxes) {
  XmlCheck x = check_xml(render_line_plot({.title = "empty"}, {{"nothing", {}}}));
  ASSERT_TRUE(x.ok) << x.error;
  EXPECT_EQ(with_class(x, "no-data").size(), 1u);
  EXPECT_EQ(with_class(x, "x-axis").size(), 1u);
}

TEST(SvgPlot, NiceTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(0.13, 0.61, 5), (std::vector<double>{0.2, 0.3, 0.4, 0.5, 0.6}));
  EXPECT_EQ(nice_ticks(3, 3, 5), (std::vector<double>{3}));
  EXPECT_TRUE(nice_ticks(NAN, 1, 5).empty());
  EXPECT_EQ(xml_escape("a<b&c>\"d'\x01"), "a&lt;b&amp;c&gt;&quot;d&apos; ");
}

}  // namespace
}  // namespace tessera::bench
