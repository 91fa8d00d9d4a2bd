// The dashboard's web assets, compiled into the binary (no CDN, nothing read from disk at run time):
// web/dashboard/*.{html,js,css} and uPlot's minified build from the npm package installed by
// scripts/install-deps. The bytes come from a .cc generated at build time by cmake/embed_assets.cmake.
// When uPlot was not installed at configure time the build still works: its slot holds a one-line script
// that leaves `uPlot` undefined, and the page says the charts are unavailable and why.
#pragma once

#include <string_view>
#include <vector>

namespace tessera::router {

struct DashboardAsset {
  std::string_view name;          // file name under /dashboard/assets/ ("dashboard.js")
  std::string_view content_type;  // "text/javascript; charset=utf-8", ...
  std::string_view bytes;
  std::string_view etag;  // quoted SHA-256 prefix of the bytes
};

const std::vector<DashboardAsset>& dashboard_assets();
// "uPlot 1.6.32" when the charting library was embedded; empty when it was missing at build time.
std::string_view dashboard_chart_library();

}  // namespace tessera::router
