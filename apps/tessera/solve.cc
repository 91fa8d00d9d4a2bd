// `tessera solve`: choose the prefill/decode placement for a fleet, a workload and an SLO.
#include <CLI/CLI.hpp>

#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "base/mapped_file.h"
#include "commands.h"
#include "solver/plan_yaml.h"
#include "solver/search.h"
#include "solver/spec_yaml.h"

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
};

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
  return [args] { return run_solve(*args); };
}

}  // namespace tessera::cli
