#include "bench/sweep.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "bench/svg_plot.h"

namespace tessera::bench {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

Status write_text(const std::string& path, const std::string& text) {
  return write_file_atomic(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Result<json> read_json(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(fmt::format("{} is not a JSON object", path));
  return j;
}

// The 1-minute load average (Linux), so each saved run says how busy the machine was; NaN elsewhere.
double load_average() {
  auto text = read_file("/proc/loadavg");
  if (!text.ok()) return std::nan("");
  try {
    return std::stod(*text);
  } catch (...) {
    return std::nan("");
  }
}

std::string point_name(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e9) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{:g}", v);
}

double number_or_nan(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
}

struct Spread {
  double median = std::nan(""), lo = std::nan(""), hi = std::nan("");
};

Spread spread(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  s.lo = v.front();
  s.hi = v.back();
  return s;
}

// One loaded sweep: its label and, per point, the reports of its runs.
struct LoadedSweep {
  std::string label;
  std::string mode;
  std::vector<double> values;
  std::vector<std::vector<json>> runs;
  std::vector<std::vector<double>> loads;  // 1-minute load average before each run (may be empty)
};

Result<LoadedSweep> load_sweep(const std::string& index_path) {
  TS_ASSIGN_OR_RETURN(json index, read_json(index_path));
  if (!index.contains("points") || !index["points"].is_array()) {
    return invalid_argument(fmt::format("{} is not a sweep index (no \"points\")", index_path));
  }
  LoadedSweep s;
  s.label = index.value("label", fs::path(index_path).stem().string());
  s.mode = index.value("mode", "rate");
  const fs::path dir = fs::path(index_path).parent_path();
  for (const json& p : index["points"]) {
    if (!p.contains("runs") || !p["runs"].is_array() || !p.contains("value") || !p["value"].is_number()) {
      return invalid_argument(fmt::format("{}: each point needs a numeric \"value\" and a \"runs\" list", index_path));
    }
    std::vector<double> loads;
    if (p.contains("load_1min") && p["load_1min"].is_array()) {
      for (const json& l : p["load_1min"]) loads.push_back(l.is_number() ? l.get<double>() : std::nan(""));
    }
    s.loads.push_back(std::move(loads));
    std::vector<json> runs;
    for (const json& f : p["runs"]) {
      if (!f.is_string()) return invalid_argument(fmt::format("{}: run entries must be file names", index_path));
      TS_ASSIGN_OR_RETURN(json r, read_json((dir / f.get<std::string>()).string()));
      runs.push_back(std::move(r));
    }
    s.values.push_back(p["value"].get<double>());
    s.runs.push_back(std::move(runs));
  }
  return s;
}

// Per-request values of the successful requests of a point's runs, in ms.
std::vector<double> per_request_ttft_ms(const std::vector<json>& runs) {
  std::vector<double> out;
  for (const json& r : runs) {
    if (!r.contains("ttfts") || !r["ttfts"].is_array()) continue;
    for (size_t i = 0; i < r["ttfts"].size(); ++i) {
      const bool failed = r.contains("errors") && i < r["errors"].size() && r["errors"][i].is_string() &&
                          !r["errors"][i].get<std::string>().empty();
      if (!failed && r["ttfts"][i].is_number()) out.push_back(r["ttfts"][i].get<double>() * 1000);
    }
  }
  return out;
}

std::vector<double> per_request_tpot_ms(const std::vector<json>& runs) {
  std::vector<double> out;
  for (const json& r : runs) {
    if (!r.contains("itls") || !r["itls"].is_array()) continue;
    for (const json& gaps : r["itls"]) {
      if (!gaps.is_array() || gaps.empty()) continue;
      double sum = 0;
      for (const json& g : gaps) sum += g.is_number() ? g.get<double>() : 0.0;
      out.push_back(sum / static_cast<double>(gaps.size()) * 1000);
    }
  }
  return out;
}

std::vector<PlotPoint> cdf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::vector<PlotPoint> pts;
  const size_t n = v.size();
  const size_t stride = std::max<size_t>(1, n / 200);  // at most ~200 points per curve
  for (size_t i = 0; i < n; i += stride) pts.push_back({v[i], static_cast<double>(i + 1) / static_cast<double>(n)});
  if (n > 0 && (n - 1) % stride != 0) pts.push_back({v[n - 1], 1.0});
  return pts;
}

// Three significant digits without exponents (latencies in the thousands stay readable).
std::string num3(double v) {
  if (!std::isfinite(v)) return "-";
  if (std::abs(v) >= 100) return fmt::format("{:.0f}", v);
  if (std::abs(v) >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

std::string mode_title(const std::string& mode) { return mode == "concurrency" ? "max concurrency" : "request rate"; }

}  // namespace

Result<std::string> run_sweep(const SweepOptions& o, const std::function<void(const std::string&)>& log) {
  if (o.points.empty()) return invalid_argument("a sweep needs at least one point");
  if (o.mode != "rate" && o.mode != "concurrency") {
    return invalid_argument(fmt::format("unknown sweep mode '{}'; modes: rate, concurrency", o.mode));
  }
  if (o.repeats < 1) return invalid_argument("--repeats must be at least 1");
  if (o.out_dir.empty()) return invalid_argument("a sweep needs an output folder (--out-dir)");
  if (o.label.empty() || o.label.find_first_of("/\\") != std::string::npos) {
    return invalid_argument(fmt::format("--label '{}' must be a non-empty file-name part", o.label));
  }
  for (double p : o.points) {
    if (!(p > 0) || !std::isfinite(p)) return invalid_argument(fmt::format("sweep points must be positive, got {}", p));
    if (o.mode == "concurrency" && p != std::floor(p)) {
      return invalid_argument(fmt::format("concurrency points must be whole numbers, got {}", p));
    }
  }
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return unavailable(fmt::format("cannot create {}: {}", o.out_dir, ec.message()));

  json index = {{"label", o.label}, {"mode", o.mode}, {"repeats", o.repeats}, {"points", json::array()}};
  for (size_t k = 0; k < o.points.size(); ++k) {
    const double p = o.points[k];
    json point = {{"value", p}, {"runs", json::array()}, {"seeds", json::array()}, {"load_1min", json::array()}};
    for (int r = 0; r < o.repeats; ++r) {
      ServeBenchOptions b = o.base;
      // A fresh seed for every run: reusing prompts across points would hand later points prefix-cache hits.
      b.workload.seed = o.base.workload.seed + k * static_cast<uint64_t>(o.repeats) + static_cast<uint64_t>(r);
      point["seeds"].push_back(b.workload.seed);
      if (o.mode == "rate") {
        b.workload.request_rate = p;
      } else {
        b.max_concurrency = static_cast<int>(p);
      }
      const double load = load_average();
      point["load_1min"].push_back(std::isfinite(load) ? json(load) : json(nullptr));
      auto result = run_serve_bench(b);
      if (!result.ok()) return result.status().with_context(fmt::format("{} {} run {}", o.mode, p, r + 1));
      const std::string file =
          fmt::format("{}-{}-{}-r{}.json", o.label, o.mode == "rate" ? "rate" : "conc", point_name(p), r + 1);
      TS_RETURN_IF_ERROR(write_text((fs::path(o.out_dir) / file).string(), result->json + "\n"));
      point["runs"].push_back(file);
      if (log) {
        json j = json::parse(result->json);
        log(fmt::format(
            "{} {} {} run {}: {}/{} ok, {:.2f} req/s, TTFT p50 {:.1f} p99 {:.1f} ms, TPOT p50 {:.2f} ms -> {}", o.label,
            o.mode, point_name(p), r + 1, j.value("completed", 0), j.value("num_prompts", 0),
            j.value("request_throughput", 0.0), j.value("median_ttft_ms", 0.0), j.value("p99_ttft_ms", 0.0),
            j.value("median_tpot_ms", 0.0), file));
      }
    }
    index["points"].push_back(std::move(point));
  }
  const std::string index_path = (fs::path(o.out_dir) / (o.label + "-sweep.json")).string();
  TS_RETURN_IF_ERROR(write_text(index_path, index.dump(2) + "\n"));
  return index_path;
}

Result<std::vector<std::string>> plot_sweeps(const std::vector<std::string>& index_paths, const std::string& out_dir,
                                             const std::string& prefix) {
  if (index_paths.empty()) return invalid_argument("nothing to plot: give at least one sweep index");
  std::vector<LoadedSweep> sweeps;
  for (const std::string& p : index_paths) {
    TS_ASSIGN_OR_RETURN(LoadedSweep s, load_sweep(p));
    sweeps.push_back(std::move(s));
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return unavailable(fmt::format("cannot create {}: {}", out_dir, ec.message()));
  std::vector<std::string> written;
  auto emit = [&](const std::string& name, const std::string& text) -> Status {
    const std::string path = (fs::path(out_dir) / (prefix + name)).string();
    TS_RETURN_IF_ERROR(write_text(path, text));
    written.push_back(path);
    return ok_status();
  };

  // Latency against achieved request throughput: medians over repeats, min-max as error bars.
  auto curves = [&](const char* p50_key, const char* p99_key, const std::string& metric) {
    std::vector<PlotSeries> series;
    for (size_t i = 0; i < sweeps.size(); ++i) {
      PlotSeries p50{sweeps[i].label + " " + metric + " p50", {}, true, false, static_cast<int>(i)};
      PlotSeries p99{sweeps[i].label + " " + metric + " p99", {}, true, true, static_cast<int>(i)};
      for (const std::vector<json>& runs : sweeps[i].runs) {
        std::vector<double> x, a, b;
        for (const json& r : runs) {
          x.push_back(number_or_nan(r, "request_throughput"));
          a.push_back(number_or_nan(r, p50_key));
          b.push_back(number_or_nan(r, p99_key));
        }
        Spread sx = spread(x), sa = spread(a), sb = spread(b);
        p50.points.push_back({sx.median, sa.median, sa.lo, sa.hi});
        p99.points.push_back({sx.median, sb.median, sb.lo, sb.hi});
      }
      series.push_back(std::move(p50));
      series.push_back(std::move(p99));
    }
    return series;
  };
  TS_RETURN_IF_ERROR(
      emit("latency-throughput.svg", render_line_plot({.title = "Time to first token vs request throughput",
                                                       .x_label = "request throughput (requests/s)",
                                                       .y_label = "TTFT (ms)"},
                                                      curves("median_ttft_ms", "p99_ttft_ms", "TTFT"))));
  TS_RETURN_IF_ERROR(
      emit("tpot-throughput.svg", render_line_plot({.title = "Time per output token vs request throughput",
                                                    .x_label = "request throughput (requests/s)",
                                                    .y_label = "TPOT (ms)"},
                                                   curves("median_tpot_ms", "p99_tpot_ms", "TPOT"))));

  for (const LoadedSweep& s : sweeps) {
    std::vector<PlotSeries> ttft, tpot;
    for (size_t k = 0; k < s.values.size(); ++k) {
      const std::string name = fmt::format("{} {}", mode_title(s.mode), point_name(s.values[k]));
      ttft.push_back({name, cdf(per_request_ttft_ms(s.runs[k])), false, false, static_cast<int>(k)});
      tpot.push_back({name, cdf(per_request_tpot_ms(s.runs[k])), false, false, static_cast<int>(k)});
    }
    TS_RETURN_IF_ERROR(
        emit(s.label + "-ttft-cdf.svg", render_line_plot({.title = s.label + ": distribution of time to first token",
                                                          .x_label = "TTFT (ms, log scale)",
                                                          .y_label = "fraction of requests",
                                                          .log_x = true},
                                                         ttft)));
    TS_RETURN_IF_ERROR(
        emit(s.label + "-tpot-cdf.svg", render_line_plot({.title = s.label + ": distribution of time per output token",
                                                          .x_label = "TPOT (ms, log scale)",
                                                          .y_label = "fraction of requests",
                                                          .log_x = true},
                                                         tpot)));
  }

  // The table: median (min-max) over repeats.
  std::string md;
  const char* keys[] = {"request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms",
                        "median_tpot_ms",     "p99_tpot_ms",       "p99_e2el_ms"};
  for (const LoadedSweep& s : sweeps) {
    md += fmt::format(
        "**{}** (median, min-max over {} run(s) per point)\n\n"
        "| {} | req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | E2E p99 ms | failed | "
        "load |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        s.label, s.runs.empty() ? 0 : s.runs[0].size(), mode_title(s.mode));
    for (size_t k = 0; k < s.values.size(); ++k) {
      md += fmt::format("| {} |", point_name(s.values[k]));
      for (const char* key : keys) {
        std::vector<double> v;
        for (const json& r : s.runs[k]) v.push_back(number_or_nan(r, key));
        Spread sp = spread(v);
        md += s.runs[k].size() > 1 ? fmt::format(" {} ({}-{}) |", num3(sp.median), num3(sp.lo), num3(sp.hi))
                                   : fmt::format(" {} |", num3(sp.median));
      }
      int failed = 0;
      for (const json& r : s.runs[k]) failed += r.value("failed", 0);
      Spread load = spread(k < s.loads.size() ? s.loads[k] : std::vector<double>{});
      md += fmt::format(" {} | {} |\n", failed,
                        load.lo == load.hi ? num3(load.lo) : fmt::format("{}-{}", num3(load.lo), num3(load.hi)));
    }
    md += "\n";
  }
  TS_RETURN_IF_ERROR(emit("summary.md", md));
  return written;
}

}  // namespace tessera::bench
