// Re-placement decisions: given what the router observed over the last window and what the current plan
// predicted, decide whether to keep the plan, re-solve for the observed workload, or switch plans.
//
// Triggers (docs/solver.md, "Re-placement"):
// - the SLO is violated (observed attainment below target, or the percentile TTFT / TPOT above target);
// - the current plan is more than `improvement_threshold` worse (goodput per cost on the observed
//   workload) than the best plan the solver finds for it;
// - the workload drifted (rate or mean lengths) or the latency model is off (observed / predicted
//   latency): these ask for a re-solve (and, for the model, a re-profile) rather than a switch.
// Hysteresis: a trigger must hold for `windows_to_trigger` consecutive windows; the "worse" counter only
// resets once the gap falls under half the threshold; no switch within `cooldown_s` of the last one.
//
// Pure: the caller owns the state and passes it back each window. Thread-safety: values.
#pragma once

#include <string>
#include <vector>

#include "solver/spec.h"

namespace tessera::solver {

struct LiveMetrics {
  double rate = 0;  // requests/s observed over the window
  double mean_input = 0;
  double mean_output = 0;
  double ttft_s = 0;  // observed at the SLO percentile
  double tpot_s = 0;
  double attainment = 1;
};

struct PlanPrediction {
  double rate = 0;  // the workload the plan was made for
  double mean_input = 0;
  double mean_output = 0;
  double ttft_s = 0;  // predicted at the SLO percentile
  double tpot_s = 0;
};

struct ReplanPolicy {
  double rate_drift = 0.2;     // relative change of the rate that asks for a re-solve
  double length_drift = 0.25;  // relative change of a mean length
  double model_error = 0.3;    // |observed / predicted latency - 1| that asks for a re-profile
  double improvement_threshold = 0.15;
  int windows_to_trigger = 3;
  double cooldown_s = 600;
};

struct ReplanState {
  int violated_windows = 0;
  int worse_windows = 0;
  double last_switch_s = -1e300;
};

struct ReplanInput {
  double now_s = 0;
  LiveMetrics live;
  PlanPrediction predicted;
  // From solving for the observed workload (when the caller did): goodput per cost of the current plan
  // and of the best plan on it, and whether the best plan is the current one. best <= 0: not solved.
  double current_goodput_per_cost = 0;
  double best_goodput_per_cost = 0;
  bool best_is_current = true;
};

enum class ReplanAction { kKeep, kResolve, kSwitch };
const char* replan_action_name(ReplanAction a);

struct ReplanDecision {
  ReplanAction action = ReplanAction::kKeep;
  std::vector<std::string> reasons;  // every trigger seen this window, held or not
  ReplanState state;                 // pass back next window
};

ReplanDecision decide_replan(const Slo& slo, const ReplanPolicy& policy, const ReplanState& state,
                             const ReplanInput& in);

}  // namespace tessera::solver
