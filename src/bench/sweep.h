// Load sweeps behind `tessera bench sweep` and `tessera bench plot`: run the serving benchmark
// (serve_bench.h) once per load point (a request rate or a concurrency limit), `repeats` times each, keep
// every run's JSON report, and draw the reports as SVG plots (svg_plot.h):
//
//   PREFIXlatency-throughput.svg  TTFT p50 and p99 against request throughput, one pair of lines per sweep
//   PREFIXtpot-throughput.svg     TPOT p50 and p99 against request throughput
//   PREFIXLABEL-ttft-cdf.svg      per sweep: the distribution (CDF) of per-request TTFT at each load point
//   PREFIXLABEL-tpot-cdf.svg      per sweep: the CDF of per-request TPOT (mean inter-token gap)
//   PREFIXsummary.md              per sweep and point: median (min-max over repeats) of the main metrics
//
// A sweep's index (OUT_DIR/LABEL-sweep.json) lists its points and the report files of each, relative to
// the index, so a folder of results can be moved and replotted. Plots read only the reports, never the
// server: rerunning `tessera bench plot` on saved JSON redraws the same figures.
//
// Runs one benchmark at a time on the calling thread (each benchmark has its own worker threads).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/serve_bench.h"

namespace tessera::bench {

struct SweepOptions {
  ServeBenchOptions base;       // the workload and client settings shared by every point
  std::string mode = "rate";    // "rate": points are request rates; "concurrency": max-concurrency limits
  std::vector<double> points;   // in the order run (and plotted)
  int repeats = 1;              // runs per point; run r of point k uses workload seed base + k * repeats + r
  std::string out_dir;          // created if missing
  std::string label = "sweep";  // names the files and the plot series
};

// Runs the sweep; returns the path of its index. `log` (may be empty) gets one line per finished run.
// A run whose requests partly fail is kept (its report says so); a run that cannot start fails the sweep.
Result<std::string> run_sweep(const SweepOptions& options, const std::function<void(const std::string&)>& log);

// Draws the plots and the summary of the given sweep indexes into out_dir; returns the files written.
Result<std::vector<std::string>> plot_sweeps(const std::vector<std::string>& index_paths, const std::string& out_dir,
                                             const std::string& prefix);

}  // namespace tessera::bench
