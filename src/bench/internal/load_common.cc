#include "bench/internal/load_common.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tessera::bench::internal {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

void put_stats(nlohmann::json& j, const std::string& name, const std::vector<double>& seconds) {
  std::vector<double> ms;
  ms.reserve(seconds.size());
  for (double s : seconds) ms.push_back(s * 1000.0);
  double mean = 0, sq = 0;
  if (!ms.empty()) mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  for (double x : ms) sq += (x - mean) * (x - mean);
  j["mean_" + name + "_ms"] = mean;
  j["median_" + name + "_ms"] = percentile(ms, 50);
  j["std_" + name + "_ms"] = ms.empty() ? 0.0 : std::sqrt(sq / static_cast<double>(ms.size()));
  j["p90_" + name + "_ms"] = percentile(ms, 90);
  j["p99_" + name + "_ms"] = percentile(ms, 99);
}

void SseSplitter::feed(std::string_view bytes) {
  pending_.append(bytes);
  size_t start = 0, end;
  while ((end = pending_.find("\n\n", start)) != std::string::npos) {
    std::string_view event(pending_.data() + start, end - start);
    start = end + 2;
    // An event may carry comment lines (": ...") before its data line.
    size_t at = 0;
    while (at < event.size()) {
      size_t eol = event.find('\n', at);
      std::string_view line = event.substr(at, eol == std::string_view::npos ? std::string_view::npos : eol - at);
      if (line.rfind("data: ", 0) == 0) on_data_(line.substr(6));
      if (eol == std::string_view::npos) break;
      at = eol + 1;
    }
  }
  pending_.erase(0, start);
}

}  // namespace tessera::bench::internal
