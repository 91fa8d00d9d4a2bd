// Placements and their evaluation. A plan gives every pool of a fleet one role (prefill, decode, both or
// idle), an instance size (tensor-parallel devices per instance), an instance count and a batch limit.
// evaluate_plan() checks the constraints (devices per pool, memory, budget, a prefill side and a decode
// side) and runs the simulator on the problem's requests.
//
// The objective (docs/solver.md): among plans that meet the SLO, the highest goodput per cost (requests/s
// meeting the SLO per currency unit per hour); a plan meeting the SLO beats one that does not; among plans
// that do not, the highest attainment wins (the fallback). Ties go to the cheaper plan, then to the plan
// that comes first in a fixed order, so every search is deterministic. Among plans of equal attainment that
// miss the SLO, the one whose worse percentile (TTFT or TPOT, relative to its target) is nearer wins.
//
// Thread-safety: values and pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "solver/simulator.h"
#include "solver/spec.h"

namespace tessera::solver {

struct PoolPlacement {
  Role role = Role::kIdle;
  int instances = 0;
  int tp = 1;
  int max_batch = 64;
  bool operator==(const PoolPlacement& o) const = default;
};

struct Plan {
  std::vector<PoolPlacement> pools;  // parallel to Fleet::pools
  bool operator==(const Plan& o) const = default;
};

// Everything a search needs, built once: the fleet, the workload's requests, the SLO.
struct Problem {
  Fleet fleet;
  Workload workload;
  Slo slo;
  ModelCost cost;
  RouterPolicy router = RouterPolicy::kLeastLoaded;
  std::vector<Request> requests;
  double rate = 0;           // offered requests/s
  bool homogeneous = false;  // only plans whose serving pools are all of one device family

  static Result<Problem> make(Fleet fleet, Workload workload, Slo slo);
};

struct PlanEval {
  Plan plan;
  bool valid = false;  // satisfies every constraint (else `why` says which)
  std::string why;
  double cost_per_hour = 0;
  SloReport report;
  double goodput_per_cost = 0;  // goodput / cost_per_hour
  long sim_steps = 0;           // simulator steps it took (the search's unit of effort)
  Slo slo;                      // the objective it was judged against
};

// KV positions an instance of `tp` devices of `pool` holds beside the weights (<= 0: the model does not fit).
double kv_capacity_tokens(const Problem& p, const Pool& pool, int tp);
double plan_cost(const Problem& p, const Plan& plan);
// Constraint check only (no simulation): OK or InvalidArgument naming the violated constraint.
Status check_plan(const Problem& p, const Plan& plan);
Result<SimConfig> sim_config(const Problem& p, const Plan& plan);
PlanEval evaluate_plan(const Problem& p, const Plan& plan);
// Evaluates against `requests` at `rate` instead of the problem's own (capacity probing).
PlanEval evaluate_plan_on(const Problem& p, const Plan& plan, const std::vector<Request>& requests, double rate);

// True if `a` is strictly preferred to `b` under the objective above (invalid plans lose to valid ones).
bool better(const PlanEval& a, const PlanEval& b);

std::string describe_plan(const Problem& p, const Plan& plan);

}  // namespace tessera::solver
