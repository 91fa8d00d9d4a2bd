// Placement search: the plan that best meets the objective of placement.h.
//
// exhaustive_search() simulates every valid plan (every role, instance size, count and batch limit per
// pool): the reference, usable on small fleets. scalable_search() works on fleets of any size:
//   1. probe: for each pool and each (role, instance size, batch limit) it finds by bisection the highest
//      rate one instance sustains within the SLO (its own phase's target: TTFT for prefill, TPOT for
//      decode, both for colocated), simulating it alone beside an ideal partner;
//   2. seed: for every combination of per-pool configurations it covers the rate at least cost with those
//      per-instance capacities (colocated capacity adds up; a prefill side and a decode side serve the
//      smaller of their sums), greedily by cost per request/s, then rounds counts up;
//   3. verify: it simulates the cheapest seeds on the real workload, raising the headroom if none meets
//      the SLO, and refines the best by simulated hill climbing (counts up and down by one and by a tenth,
//      batch limits), in a seeded order, within an evaluation budget.
// Both are deterministic for a given problem and seed. When no plan meets the SLO, the result is the plan
// with the highest attainment and `fallback` is set.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "solver/placement.h"

namespace tessera::solver {

struct SearchOptions {
  uint64_t seed = 1;
  int probe_requests = 200;    // requests per capacity probe
  int seeds_to_simulate = 4;   // analytic seeds verified by full simulation per headroom level
  int max_evaluations = 400;   // full simulations in all (verification + refinement)
  double max_sim_steps = 5e6;  // simulator steps in all: bounds the effort on large fleets
};

// One capacity probe: the highest rate one instance of `config` on pool `pool` sustains within its SLO share.
struct CapacityProbe {
  size_t pool = 0;
  Role role = Role::kIdle;
  int tp = 1;
  int max_batch = 0;
  double capacity = 0;       // requests/s
  double cost_per_hour = 0;  // of the instance
};

struct SearchResult {
  PlanEval best;
  bool fallback = false;                  // no plan met the SLO; `best` has the highest attainment
  std::string note;                       // one line on how the plan was found
  long evaluations = 0;                   // full simulations of the workload
  long probes = 0;                        // single-instance capacity simulations
  double sim_steps = 0;                   // simulator steps of the full simulations
  std::vector<CapacityProbe> capacities;  // scalable search: the probe table it seeded from
};

// Per-instance configurations the search may give a pool (role, size, batch limit); empty if the model
// fits no instance size.
struct PoolConfig {
  Role role = Role::kIdle;
  int tp = 1;
  int max_batch = 64;
};
std::vector<PoolConfig> pool_configs(const Problem& p, size_t pool);
// Number of valid-or-not plans exhaustive_search would consider.
double plan_space_size(const Problem& p);

Result<SearchResult> exhaustive_search(const Problem& p, double max_plans = 200000);
Result<SearchResult> scalable_search(const Problem& p, const SearchOptions& options);

}  // namespace tessera::solver
