// `tessera solve`: choose the prefill/decode placement for a fleet, a workload and an SLO.
#include <CLI/CLI.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/mapped_file.h"
#include "commands.h"
#include "http/http.h"
#include "solver/live_metrics.h"
#include "solver/plan_yaml.h"
#include "solver/search.h"
#include "solver/spec_yaml.h"
#include "solver/watch.h"

namespace tessera::cli {
namespace {

struct SolveArgs {
  std::string fleet, workload, slo, out;
  std::string method = "auto";
  uint64_t seed = 1;
  int max_evaluations = 400;
  double max_sim_steps = 5e6;
  bool homogeneous = false;
  bool verbose = false;
  std::string watch;  // router (or node) base URL
  double interval_s = 10;
  int windows = 0;  // 0: until interrupted
};

// The serving counters of the cluster behind `url`: a router's nodes (named by its node gauges), or the
// node at `url` itself when it is not a router.
Result<solver::ServingCounters> scrape(const std::string& url) {
  auto fetch_samples = [](const std::string& base) -> Result<solver::PromSamples> {
    auto r = http::fetch({.url = base + "/metrics", .timeout_ms = 5000});
    if (!r.ok()) return r.status().with_context(base + "/metrics");
    if (r->status != 200) return unavailable(fmt::format("{}/metrics answered {}", base, r->status));
    return solver::parse_prometheus(r->body);
  };
  TS_ASSIGN_OR_RETURN(solver::PromSamples front, fetch_samples(url));
  std::vector<std::string> nodes = solver::label_values(front, "tessera_router_node_healthy", "node");
  std::vector<solver::PromSamples> all;
  if (nodes.empty()) all.push_back(std::move(front));
  for (const std::string& n : nodes) {
    TS_ASSIGN_OR_RETURN(solver::PromSamples s, fetch_samples(n));
    all.push_back(std::move(s));
  }
  return solver::serving_counters(all);
}

// Reads the cluster's metrics every interval and prints one decision line per window (watch.h).
int run_watch(const SolveArgs& a, const solver::Problem& problem, const solver::SearchResult& plan,
              const solver::SearchOptions& options) {
  if (!(a.interval_s > 0)) return fail("--interval must be positive");
  solver::WatchState state = solver::watch_start(problem, plan.best);
  solver::ReplanPolicy policy;
  std::printf(
      "watch: %s every %.3g s; planned rate %.2f/s, lengths %.0f/%.0f, predicted TTFT p%g %.0f ms, TPOT p50 %.1f ms\n",
      a.watch.c_str(), a.interval_s, state.predicted.rate, state.predicted.mean_input, state.predicted.mean_output,
      problem.slo.percentile, state.predicted.ttft_s * 1e3, state.predicted.tpot_s * 1e3);
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto before = scrape(a.watch);
  double t_before = elapsed();
  if (!before.ok()) std::printf("[t=%.1fs] no metrics yet: %s\n", t_before, before.status().message().c_str());
  for (int w = 1; a.windows <= 0 || w <= a.windows; ++w) {
    std::this_thread::sleep_for(std::chrono::duration<double>(a.interval_s));
    auto after = scrape(a.watch);
    double t = elapsed();
    std::string line;
    if (!after.ok()) {
      line = fmt::format("keep: no metrics ({})", after.status().message());
    } else if (!before.ok()) {
      line = "keep: first scrape, no window yet";
    } else if (after->requests < before->requests) {
      line = "keep: counters went back (a node restarted); window skipped";
    } else {
      auto live = solver::window_metrics(*before, *after, t - t_before, problem.slo);
      if (!live.ok()) {
        line = fmt::format("keep: {}", live.status().message());
      } else {
        auto d = solver::watch_window(state, *live, t, policy, options);
        line = d.ok() ? d->line : fmt::format("keep: re-solve failed: {}", d.status().message());
      }
    }
    std::printf("[t=%.1fs] %s\n", t, line.c_str());
    std::fflush(stdout);
    if (after.ok()) before = std::move(after), t_before = t;
  }
  return 0;
}

int run_solve(const SolveArgs& a) {
  auto fleet = solver::load_fleet(a.fleet);
  if (!fleet.ok()) return fail(fleet.status().message());
  auto workload = solver::load_workload(a.workload);
  if (!workload.ok()) return fail(workload.status().message());
  auto slo = solver::load_slo(a.slo);
  if (!slo.ok()) return fail(slo.status().message());
  if (a.method != "auto" && a.method != "exhaustive" && a.method != "scalable")
    return fail(fmt::format("unknown method '{}'; known: auto, exhaustive, scalable", a.method));
  auto t0 = std::chrono::steady_clock::now();
  auto problem = solver::Problem::make(*fleet, *workload, *slo);
  if (!problem.ok()) return fail(problem.status().message());
  problem->homogeneous = a.homogeneous;
  std::string method = a.method;
  // Exhaustive when the plan space is small enough to simulate whole (a few thousand plans).
  if (method == "auto") method = solver::plan_space_size(*problem) <= 5000 ? "exhaustive" : "scalable";
  solver::SearchOptions options;
  options.seed = a.seed;
  options.max_evaluations = a.max_evaluations;
  options.max_sim_steps = a.max_sim_steps;
  // Enumerating plans is cheap; only valid ones are simulated, so the enumeration limit can be generous.
  auto result =
      method == "exhaustive" ? solver::exhaustive_search(*problem, 5e6) : solver::scalable_search(*problem, options);
  if (!result.ok()) return fail(result.status().message());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!a.verbose) result->capacities.clear();
  std::fputs(solver::plan_summary(*problem, *result, seconds).c_str(), stdout);
  if (!a.out.empty()) {
    std::string yaml = solver::plan_to_yaml(*problem, *result, solver::ReplanPolicy{}, seconds);
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(yaml.data()), yaml.size());
    if (Status s = write_file_atomic(a.out, bytes); !s.ok()) return fail(s.message());
    std::fprintf(stderr, "wrote %s\n", a.out.c_str());
  }
  if (!a.watch.empty()) return run_watch(a, *problem, *result, options);
  return 0;
}

}  // namespace

Action add_solve_command(CLI::App& app) {
  auto args = std::make_shared<SolveArgs>();
  CLI::App* cmd = app.add_subcommand("solve", "Choose the prefill/decode placement that best meets an SLO per cost");
  cmd->add_option("--fleet", args->fleet, "Fleet spec (YAML): device pools")->required();
  cmd->add_option("--workload", args->workload, "Workload spec (YAML): model, rate, lengths or trace")->required();
  cmd->add_option("--slo", args->slo, "SLO spec (YAML): TTFT/TPOT targets, percentile, attainment")->required();
  cmd->add_option("--out", args->out, "Write the plan (YAML) here");
  cmd->add_option("--method", args->method, "auto, exhaustive or scalable")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the search and its probes")->capture_default_str();
  cmd->add_option("--max-evaluations", args->max_evaluations, "Full simulations the scalable search may run")
      ->capture_default_str();
  cmd->add_option("--max-sim-steps", args->max_sim_steps, "Simulator steps the scalable search may spend in all")
      ->capture_default_str();
  cmd->add_flag("--homogeneous", args->homogeneous, "Only plans whose serving pools are all one device family");
  cmd->add_flag("--verbose", args->verbose, "Also print the capacity probe table of the scalable search");
  cmd->add_option("--watch", args->watch,
                  "Router (or node) URL: read its /metrics every --interval and print keep / re-place decisions");
  cmd->add_option("--interval", args->interval_s, "--watch: seconds per metrics window")->capture_default_str();
  cmd->add_option("--windows", args->windows, "--watch: stop after this many windows (0: run until interrupted)")
      ->capture_default_str();
  return [args] { return run_solve(*args); };
}

}  // namespace tessera::cli
