#include "solver/replan.h"

#include <cmath>

#include <fmt/core.h>

namespace tessera::solver {

const char* replan_action_name(ReplanAction a) {
  switch (a) {
    case ReplanAction::kKeep:
      return "keep";
    case ReplanAction::kResolve:
      return "resolve";
    case ReplanAction::kSwitch:
      return "switch";
  }
  return "?";
}

namespace {

double rel_change(double observed, double planned) {
  return planned > 0 ? std::abs(observed - planned) / planned : (observed > 0 ? INFINITY : 0);
}

}  // namespace

ReplanDecision decide_replan(const Slo& slo, const ReplanPolicy& policy, const ReplanState& state,
                             const ReplanInput& in) {
  ReplanDecision d;
  d.state = state;
  const LiveMetrics& l = in.live;
  const PlanPrediction& p = in.predicted;

  bool violated = false;
  if (l.attainment < slo.attainment) {
    violated = true;
    d.reasons.push_back(fmt::format("attainment {:.3f} below target {:.3f}", l.attainment, slo.attainment));
  }
  if (l.ttft_s > slo.ttft_s) {
    violated = true;
    d.reasons.push_back(
        fmt::format("p{:g} TTFT {:.0f} ms above {:.0f} ms", slo.percentile, l.ttft_s * 1e3, slo.ttft_s * 1e3));
  }
  if (l.tpot_s > slo.tpot_s) {
    violated = true;
    d.reasons.push_back(
        fmt::format("p{:g} TPOT {:.1f} ms above {:.1f} ms", slo.percentile, l.tpot_s * 1e3, slo.tpot_s * 1e3));
  }
  d.state.violated_windows = violated ? state.violated_windows + 1 : 0;

  bool solved = in.best_goodput_per_cost > 0;
  if (solved) {
    double gap =
        in.current_goodput_per_cost > 0 ? in.best_goodput_per_cost / in.current_goodput_per_cost - 1 : INFINITY;
    if (gap > policy.improvement_threshold && !in.best_is_current) {
      d.state.worse_windows = state.worse_windows + 1;
      d.reasons.push_back(fmt::format("best plan is {:.0f}% better in goodput per cost", gap * 100));
    } else if (gap < policy.improvement_threshold / 2 || in.best_is_current) {
      d.state.worse_windows = 0;
    }
  }

  bool drift = false;
  if (rel_change(l.rate, p.rate) > policy.rate_drift) {
    drift = true;
    d.reasons.push_back(fmt::format("rate {:.2f}/s vs {:.2f}/s planned", l.rate, p.rate));
  }
  if (rel_change(l.mean_input, p.mean_input) > policy.length_drift ||
      rel_change(l.mean_output, p.mean_output) > policy.length_drift) {
    drift = true;
    d.reasons.push_back(fmt::format("mean lengths {:.0f}/{:.0f} vs {:.0f}/{:.0f} planned", l.mean_input, l.mean_output,
                                    p.mean_input, p.mean_output));
  }
  // The latency model is only judged at the rate it was made for; otherwise the difference is load.
  if (!drift && ((p.ttft_s > 0 && rel_change(l.ttft_s, p.ttft_s) > policy.model_error) ||
                 (p.tpot_s > 0 && rel_change(l.tpot_s, p.tpot_s) > policy.model_error))) {
    drift = true;
    d.reasons.push_back(fmt::format(
        "observed latency differs from predicted (TTFT {:.0f} vs {:.0f} ms, TPOT {:.1f} vs {:.1f} ms): re-profile",
        l.ttft_s * 1e3, p.ttft_s * 1e3, l.tpot_s * 1e3, p.tpot_s * 1e3));
  }

  bool held =
      d.state.violated_windows >= policy.windows_to_trigger || d.state.worse_windows >= policy.windows_to_trigger;
  bool cooled = in.now_s - state.last_switch_s >= policy.cooldown_s;
  if (held && solved && !in.best_is_current && cooled) {
    d.action = ReplanAction::kSwitch;
    d.state.violated_windows = d.state.worse_windows = 0;
    d.state.last_switch_s = in.now_s;
  } else if ((held && !solved) || drift) {
    d.action = ReplanAction::kResolve;  // the caller solves for the observed workload and asks again
  }
  if (held && solved && !in.best_is_current && !cooled)
    d.reasons.push_back(fmt::format("switch held back: {:.0f} s since the last one (cooldown {:.0f} s)",
                                    in.now_s - state.last_switch_s, policy.cooldown_s));
  return d;
}

}  // namespace tessera::solver
