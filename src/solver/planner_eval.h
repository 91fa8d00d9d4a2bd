// The planner's evaluator (planner.h): a placement's predicted goodput on the observed workload, from the
// solver's simulator.
//
// The observed workload is the workload spec's model served at the live rate with the live mean prompt and
// answer lengths (fixed lengths: the metrics give means, not distributions), `requests` requests from a
// fixed seed, so that two windows with the same metrics predict the same. A placement becomes a plan over a
// fleet of sub-pools, one per pool and role that has nodes ("cpu/prefill" with count 1, roles [prefill]),
// each instance one device with the pool's first batch limit; evaluate_plan() checks and simulates it.
//
// Pure. Thread-safety: the returned Evaluator holds values only.
#pragma once

#include "solver/planner.h"

namespace tessera::solver {

struct PlannerEvalOptions {
  int requests = 200;
  uint64_t seed = 1;
};

// The workload the metrics describe, on `base`'s model. InvalidArgument unless rate and lengths are positive.
Result<Workload> observed_workload(const Workload& base, const LiveMetrics& live, const PlannerEvalOptions& options);

// Simulates one placement. InvalidArgument when it is not a valid plan (no node serves clients, memory...).
Result<Prediction> simulate_placement(const Fleet& fleet, const Workload& workload, const Slo& slo,
                                      const Placement& placement);

Evaluator simulator_evaluator(Fleet fleet, Workload workload, Slo slo);

}  // namespace tessera::solver
