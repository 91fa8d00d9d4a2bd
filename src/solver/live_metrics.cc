#include "solver/live_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include <fmt/core.h>

namespace tessera::solver {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The metric name of a series key ("name{...}" or "name").
std::string_view name_of(std::string_view key) { return key.substr(0, key.find('{')); }

// The value of `label` in a series key, or "" (label values here never hold escaped quotes we care about).
std::string label_of(std::string_view key, const std::string& label) {
  std::string needle = label + "=\"";
  size_t at = key.find(needle);
  while (at != std::string_view::npos && at > 0 && key[at - 1] != '{' && key[at - 1] != ',')
    at = key.find(needle, at + 1);
  if (at == std::string_view::npos) return "";
  at += needle.size();
  size_t end = key.find('"', at);
  return end == std::string_view::npos ? "" : std::string(key.substr(at, end - at));
}

// A node's /metrics is another process's output: a counter that is not a finite, non-negative number of a
// sane size (NaN, -5, 1e300) is ignored rather than let it turn every rate and percentile into NaN or inf.
constexpr double kMaxCounter = 1e15;
bool sane_counter(double v) { return std::isfinite(v) && v >= 0 && v <= kMaxCounter; }

void add_histogram(Histogram& h, const PromSamples& s, const std::string& name) {
  // Cumulative bucket counts by bound, summed over series of this name (one per node and model).
  std::map<double, double> by_bound;
  for (const auto& [key, v] : s) {
    if (!sane_counter(v)) continue;
    std::string_view n = name_of(key);
    if (n == name + "_bucket") {
      std::string le = label_of(key, "le");
      char* end = nullptr;
      double b = le == "+Inf" ? std::numeric_limits<double>::infinity() : std::strtod(le.c_str(), &end);
      if (le != "+Inf" && (le.empty() || end != le.c_str() + le.size() || !std::isfinite(b) || b < 0)) continue;
      by_bound[b] += v;
    } else if (n == name + "_sum") {
      h.sum += v;
    } else if (n == name + "_count") {
      h.count += v;
    }
  }
  if (by_bound.empty()) return;
  if (h.counts.empty()) {
    for (const auto& [b, c] : by_bound) {
      if (std::isfinite(b)) h.bounds.push_back(b);
      h.counts.push_back(c);
    }
    return;
  }
  size_t i = 0;  // later nodes: the same bounds (the same binary); others are ignored
  for (const auto& [b, c] : by_bound)
    if (i < h.counts.size()) h.counts[i++] += c;
}

// Per-bucket (non-cumulative) counts of the observations between two cumulative histograms.
std::vector<double> window_buckets(const Histogram& before, const Histogram& after) {
  std::vector<double> out(after.counts.size(), 0);
  double prev = 0;
  for (size_t i = 0; i < after.counts.size(); ++i) {
    double cum = after.counts[i] - (i < before.counts.size() ? before.counts[i] : 0);
    out[i] = std::max(0.0, cum - prev);
    prev = std::max(prev, cum);
  }
  return out;
}

}  // namespace

Result<PromSamples> parse_prometheus(const std::string& text) {
  PromSamples out;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    size_t key_end;
    size_t brace = line.find('{');
    size_t space = line.find_first_of(" \t");
    if (brace != std::string_view::npos && (space == std::string_view::npos || brace < space)) {
      bool quoted = false;
      key_end = std::string_view::npos;
      for (size_t i = brace; i < line.size(); ++i) {
        if (line[i] == '\\' && quoted) {
          ++i;
        } else if (line[i] == '"') {
          quoted = !quoted;
        } else if (line[i] == '}' && !quoted) {
          key_end = i + 1;
          break;
        }
      }
    } else {
      key_end = space;
    }
    if (key_end == std::string_view::npos || key_end >= line.size())
      return invalid_argument(fmt::format("metrics line {}: expected 'name{{labels}} value', got '{}'", line_no, line));
    std::string value(trim(line.substr(key_end)));
    value = value.substr(0, value.find_first_of(" \t"));  // drop an optional timestamp
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size())
      return invalid_argument(fmt::format("metrics line {}: '{}' is not a number", line_no, value));
    out[std::string(line.substr(0, key_end))] = v;
  }
  return out;
}

std::vector<std::string> label_values(const PromSamples& s, const std::string& name, const std::string& label) {
  std::vector<std::string> out;
  for (const auto& [key, v] : s) {
    if (name_of(key) != name) continue;
    std::string l = label_of(key, label);
    if (!l.empty() && std::find(out.begin(), out.end(), l) == out.end()) out.push_back(l);
  }
  return out;
}

ServingCounters serving_counters(const std::vector<PromSamples>& nodes) {
  ServingCounters c;
  for (const PromSamples& s : nodes) {
    for (const auto& [key, v] : s) {
      if (!sane_counter(v)) continue;
      std::string_view n = name_of(key);
      if (n == "tessera_requests_total" && label_of(key, "status") == "200" &&
          label_of(key, "endpoint").find("completions") != std::string::npos)
        c.requests += v;
      else if (n == "tessera_prompt_tokens_total")
        c.prompt_tokens += v;
      else if (n == "tessera_generation_tokens_total")
        c.generation_tokens += v;
    }
    add_histogram(c.ttft, s, "tessera_time_to_first_token_seconds");
    add_histogram(c.itl, s, "tessera_inter_token_latency_seconds");
  }
  return c;
}

double histogram_percentile(const Histogram& before, const Histogram& after, double percentile) {
  std::vector<double> b = window_buckets(before, after);
  double total = 0;
  for (double x : b) total += x;
  if (total <= 0) return 0;
  double target = percentile / 100.0 * total, cum = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (cum + b[i] >= target && b[i] > 0) {
      if (i >= after.bounds.size()) return after.bounds.empty() ? 0 : after.bounds.back();
      double lo = i == 0 ? 0 : after.bounds[i - 1], hi = after.bounds[i];
      return lo + (hi - lo) * (target - cum) / b[i];
    }
    cum += b[i];
  }
  return after.bounds.empty() ? 0 : after.bounds.back();
}

double histogram_fraction_below(const Histogram& before, const Histogram& after, double x) {
  std::vector<double> b = window_buckets(before, after);
  double total = 0, below = 0;
  for (double v : b) total += v;
  if (total <= 0) return 1;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i >= after.bounds.size()) break;  // +Inf bucket: above every finite bound
    double lo = i == 0 ? 0 : after.bounds[i - 1], hi = after.bounds[i];
    if (x >= hi) {
      below += b[i];
    } else {
      if (x > lo) below += b[i] * (x - lo) / (hi - lo);
      break;
    }
  }
  return below / total;
}

Result<LiveMetrics> window_metrics(const ServingCounters& before, const ServingCounters& after, double seconds,
                                   const Slo& slo) {
  double n = after.requests - before.requests;
  if (!(seconds > 0)) return invalid_argument("the window must be longer than 0 s");
  if (n <= 0) return failed_precondition("no request finished in the window");
  LiveMetrics m;
  m.rate = n / seconds;
  m.mean_input = (after.prompt_tokens - before.prompt_tokens) / n;
  m.mean_output = (after.generation_tokens - before.generation_tokens) / n;
  m.ttft_s = histogram_percentile(before.ttft, after.ttft, slo.percentile);
  double gaps = after.itl.count - before.itl.count;
  m.tpot_s = gaps > 0 ? (after.itl.sum - before.itl.sum) / gaps : 0;
  m.attainment = histogram_fraction_below(before.ttft, after.ttft, slo.ttft_s);
  return m;
}

}  // namespace tessera::solver
