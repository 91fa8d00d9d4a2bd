// The re-placement loop of `tessera solve --watch`, without its I/O: one call per metrics window turns
// what the cluster did (LiveMetrics, live_metrics.h) into a decision line, keeping the state between
// windows.
//
// Each window: decide_replan() (replan.h) is asked first without a re-solve. When it sees a violation or a
// drift (it answers `resolve`, or counts a violated window), the workload is re-made for what was observed
// (the planned requests with arrivals stretched to the live rate and lengths scaled to the live means),
// the search is run on it, the current plan is evaluated on it too, and decide_replan() is asked again
// with both plans' goodput per cost; its hysteresis (windows_to_trigger, cooldown) decides. The line says
// `keep` or `re-place`, with the reasons.
//
// After a re-solve in which the current plan stays best, the plan's prediction is re-based on the
// observed workload, so a drift that has been checked is not re-reported every window; the latency check
// (observed versus predicted) then compares like with like.
//
// Pure and deterministic for given inputs. Thread-safety: values.
#pragma once

#include <string>

#include "base/status.h"
#include "solver/live_metrics.h"
#include "solver/placement.h"
#include "solver/replan.h"
#include "solver/search.h"

namespace tessera::solver {

struct WatchState {
  Problem planned;  // the workload the current plan's prediction is for
  PlanEval current;
  PlanPrediction predicted;
  ReplanState replan;
  int windows = 0;
};

// exhaustive search when the plan space is small (<= 5,000 plans), the scalable one otherwise.
Result<SearchResult> solve_auto(const Problem& p, const SearchOptions& options);

PlanPrediction prediction_of(const Problem& p, const PlanEval& e);
WatchState watch_start(const Problem& p, const PlanEval& plan);

// The planned workload re-made for live rate and mean lengths (see above).
Result<Problem> observed_problem(const Problem& planned, const LiveMetrics& live);

struct WatchDecision {
  bool replaced = false;
  std::string line;  // "keep: ..." or "re-place: ..."
};

Result<WatchDecision> watch_window(WatchState& s, const LiveMetrics& live, double now_s, const ReplanPolicy& policy,
                                   const SearchOptions& options);

}  // namespace tessera::solver
