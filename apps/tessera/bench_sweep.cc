// `tessera bench sweep`: the serving benchmark at several request rates or concurrency limits, one JSON
// report per run, then the plots (see src/bench/sweep.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/sweep.h"
#include "bench_serve_flags.h"
#include "commands.h"

namespace tessera::cli {
namespace {

struct BenchSweepArgs : BenchServeFlags {
  std::vector<double> rates;
  std::vector<int> concurrencies;
  int repeats = 1;
  std::string out_dir;
  std::string label = "sweep";
  bool no_plots = false;
};

int run_bench_sweep(BenchSweepArgs a) {
  if (Status s = finish_bench_serve_flags(a); !s.ok()) return fail(s.message());
  if (a.rates.empty() == a.concurrencies.empty()) {
    return fail("give exactly one of --request-rates R1,R2,... or --concurrencies C1,C2,...");
  }
  bench::SweepOptions o;
  o.base = a.o;
  o.base.progress = true;
  o.mode = a.rates.empty() ? "concurrency" : "rate";
  if (a.rates.empty()) {
    o.points.assign(a.concurrencies.begin(), a.concurrencies.end());
  } else {
    o.points = a.rates;
  }
  o.repeats = a.repeats;
  o.out_dir = a.out_dir;
  o.label = a.label;
  auto index = bench::run_sweep(o, [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  });
  if (!index.ok()) return fail(index.status().message());
  std::printf("sweep index: %s\n", index->c_str());
  if (a.no_plots) return 0;
  auto files = bench::plot_sweeps({*index}, a.out_dir, a.label + "-");
  if (!files.ok()) return fail(files.status().message());
  for (const std::string& f : *files) std::printf("wrote %s\n", f.c_str());
  return 0;
}

int run_bench_plot(const std::vector<std::string>& indexes, const std::string& out_dir, const std::string& prefix) {
  auto files = bench::plot_sweeps(indexes, out_dir, prefix);
  if (!files.ok()) return fail(files.status().message());
  for (const std::string& f : *files) std::printf("wrote %s\n", f.c_str());
  return 0;
}

}  // namespace

Action add_bench_sweep_subcommand(CLI::App& bench) {
  auto a = std::make_shared<BenchSweepArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "sweep", "Run `bench serve` at several request rates or concurrencies and plot latency against throughput");
  add_bench_serve_flags(*cmd, *a, /*with_rate=*/false);
  cmd->add_option("--request-rates", a->rates, "Request rates to sweep (requests/s), e.g. 1,2,4")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--concurrencies", a->concurrencies, "Concurrency limits to sweep (all requests sent at once)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--repeats", a->repeats,
                  "Runs per point (every run of the sweep gets its own seed: --seed, --seed+1, ...)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--out-dir", a->out_dir, "Folder for the per-run JSON reports, the sweep index and the plots")
      ->required();
  cmd->add_option("--label", a->label, "Names the files and the plot series")->capture_default_str();
  cmd->add_flag("--no-plots", a->no_plots, "Only run and save the reports");
  return [a] { return run_bench_sweep(*a); };
}

Action add_bench_plot_subcommand(CLI::App& bench) {
  auto indexes = std::make_shared<std::vector<std::string>>();
  auto out_dir = std::make_shared<std::string>();
  auto prefix = std::make_shared<std::string>();
  CLI::App* cmd = bench.add_subcommand("plot", "Draw SVG plots from saved sweeps (several sweeps share the curves)");
  cmd->add_option("sweeps", *indexes, "Sweep index files (LABEL-sweep.json written by `bench sweep`)")->required();
  cmd->add_option("--out-dir", *out_dir, "Folder for the plots")->required();
  cmd->add_option("--prefix", *prefix, "File-name prefix of the plots");
  return [indexes, out_dir, prefix] { return run_bench_plot(*indexes, *out_dir, *prefix); };
}

}  // namespace tessera::cli
