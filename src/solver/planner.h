// The planner's decision logic: each window, from what the cluster looks like (its nodes, from the control
// plane) and what it did (LiveMetrics, from the nodes' /metrics), choose the placement the simulator
// predicts best for the observed workload, and decide (with hysteresis and a cooldown) whether to move to
// it: re-role nodes, or start / stop nodes where the pool allows scaling. The policy is written down in
// docs/solver.md ("The planner").
//
// A placement here is, per pool of the fleet, how many nodes serve as prefill, decode and both. A pool of
// one device family may so hold nodes of different roles, which the search's one-role-per-pool plans cannot
// express; the simulator evaluator (planner_eval.cc) turns a placement into such a plan over a fleet of
// sub-pools (one per pool and role) and simulates it.
//
// Pure: values in, values out, the clock and the evaluator injected (PlannerObservation::now_s, Evaluator),
// so hysteresis and cooldown are tested without sleeping. The I/O shell is src/planner/ (`tessera plan`,
// `tessera up --planner`). Thread-safety: values; one PlannerState per planner, used by one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "solver/replan.h"
#include "solver/spec.h"

namespace tessera::solver {

struct PoolRoles {
  int prefill = 0, decode = 0, both = 0;
  int total() const { return prefill + decode + both; }
  bool operator==(const PoolRoles& o) const = default;
};
using Placement = std::vector<PoolRoles>;  // parallel to Fleet::pools

// "1P+2D" per pool, pools joined by ", " with their names.
std::string describe_placement(const Fleet& fleet, const Placement& p);

struct PlannerPolicy {
  double min_gain = 0.15;      // the best placement must predict this much more (relative objective) ...
  int windows_to_act = 2;      // ... in this many consecutive windows (the same placement each time)
  double cooldown_s = 60;      // no action within this long of the last one
  double min_requests = 8;     // a window with fewer finished requests says too little to act on
  bool scale = false;          // may start / stop nodes (else: re-role only)
  int min_nodes_per_pool = 1;  // scaling never goes below this (nor above the pool's count)
  size_t history = 200;        // decisions kept
};

// What the planner predicts for a placement on the observed workload.
struct Prediction {
  double goodput = 0;  // requests/s within the SLO
  double attainment = 0;
  double cost_per_hour = 0;
  bool meets_slo = false;
  double ttft_s = 0, tpot_s = 0;  // at the SLO percentile
};
// Evaluates one placement on the observed workload; an error excludes it (e.g. not a valid plan).
using Evaluator = std::function<Result<Prediction>(const Placement&)>;

// The objective a gain is measured in: goodput per cost when every pool has a cost, goodput otherwise.
double objective(const Fleet& fleet, const Prediction& p);

// Every placement the policy allows from `current`: per pool the same number of nodes (re-role only) or,
// with scaling, from min_nodes_per_pool to the pool's count; only the pool's `roles`; at least one node
// serving clients (decode or both), and prefill nodes exactly when there are decode nodes. `current` first.
std::vector<Placement> candidate_placements(const Fleet& fleet, const PlannerPolicy& policy, const Placement& current);

struct NodeView {
  std::string id;  // the control-plane id
  std::string url;
  std::string pool;  // the fleet pool it belongs to; empty: not the planner's (ignored)
  std::string role;  // prefill, decode, both
  int load = 0;      // requests it holds (running + waiting), to re-role the least busy first
};

struct PlannerObservation {
  double now_s = 0;     // a monotonic clock (cooldowns)
  int64_t unix_ms = 0;  // wall time of the window (decision timestamps)
  Status ctrl;          // reading the node list; not OK: the planner holds
  std::vector<NodeView> nodes;
  Status metrics;  // a window of metrics; not OK: the planner holds
  LiveMetrics live;
  double window_requests = 0;  // finished requests in the window
};

struct Decision {
  int64_t ts_ms = 0;
  std::string action;    // keep, re-role, scale-out, scale-in
  std::string node;      // the node acted on (scale-out: the pool's new node, named by the launcher)
  std::string from, to;  // roles (keep: the current and the best placement)
  std::string reason;
  double predicted_gain = 0;  // relative objective gain of the target placement over the current one
  bool applied = false;
  std::string pool;  // not in the contract's JSON: the launcher needs it for scale-out
};

struct PlannerState {
  Placement pending;  // the better placement seen in the last windows
  int pending_windows = 0;
  double last_action_s = -1e300;
  std::string last_keep;          // the last recorded keep's kind, so a steady state is recorded once
  std::string state = "holding";  // acting, holding, off
  std::string reason = "starting";
  std::deque<Decision> history;  // oldest first, at most policy.history
  uint64_t windows = 0;
  uint64_t holds = 0;
  uint64_t actions_applied = 0, actions_failed = 0;  // re-roles and scalings, since start
};

// The nodes' placement (nodes without a pool, or of a pool the fleet does not have, are not counted).
Placement current_placement(const Fleet& fleet, const std::vector<NodeView>& nodes);

// One window. Returns the decisions to carry out (re-role / scale-*: applied = false; the caller sets it
// once done) and updates `state` (pending placement, state and reason). The caller then records them with
// record_decisions(), which also starts the cooldown when one was applied.
std::vector<Decision> plan_window(const Fleet& fleet, const PlannerPolicy& policy, PlannerState& state,
                                  const PlannerObservation& obs, const Evaluator& evaluate);
void record_decisions(const PlannerPolicy& policy, PlannerState& state, double now_s,
                      const std::vector<Decision>& decisions);

// The control-plane value at kPlannerDecisionsKey (the dashboard's contract, docs/solver.md):
// {"updated_ms":N,"state":"acting|holding|off","reason":"...","decisions":[{"ts_ms":N,"action":...,
//  "node":"id","from":"prefill","to":"decode","reason":"...","predicted_gain":0.23,"applied":true}]}
inline constexpr const char* kPlannerDecisionsKey = "/tessera/planner/decisions";
std::string history_json(const PlannerState& state, int64_t updated_ms);
// The planner's Prometheus exposition (its /metrics).
std::string planner_metrics_text(const PlannerState& state, const Placement& current, const Fleet& fleet);

}  // namespace tessera::solver
