// The plan file `tessera solve --out` writes: the placement per pool, its predicted goodput, attainment,
// latency percentiles and cost, whether it is a fallback, and the re-placement policy it was made with.
// The schema is in docs/solver.md. Thread-safety: pure.
#pragma once

#include <string>

#include "solver/placement.h"
#include "solver/replan.h"
#include "solver/search.h"

namespace tessera::solver {

std::string plan_to_yaml(const Problem& p, const SearchResult& r, const ReplanPolicy& policy, double solve_seconds);
// A few human-readable lines for the terminal.
std::string plan_summary(const Problem& p, const SearchResult& r, double solve_seconds);

}  // namespace tessera::solver
