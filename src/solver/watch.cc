#include "solver/watch.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>
#include <fmt/format.h>

namespace tessera::solver {
namespace {

double mean_of(const std::vector<Request>& rs, bool input) {
  double s = 0;
  for (const Request& r : rs) s += input ? r.input_tokens : r.output_tokens;
  return rs.empty() ? 0 : s / rs.size();
}

std::string observed(const LiveMetrics& l) {
  return fmt::format(
      "rate {:.2f}/s, lengths {:.0f}/{:.0f}, TTFT p-SLO {:.0f} ms, TPOT mean {:.1f} ms, TTFT-attainment {:.2f}", l.rate,
      l.mean_input, l.mean_output, l.ttft_s * 1e3, l.tpot_s * 1e3, l.attainment);
}

}  // namespace

Result<SearchResult> solve_auto(const Problem& p, const SearchOptions& options) {
  if (plan_space_size(p) <= 5000) return exhaustive_search(p, 5e6);
  return scalable_search(p, options);
}

PlanPrediction prediction_of(const Problem& p, const PlanEval& e) {
  PlanPrediction d;
  d.rate = p.rate;
  d.mean_input = mean_of(p.requests, true);
  d.mean_output = mean_of(p.requests, false);
  d.ttft_s = e.report.ttft.at_slo_percentile;
  d.tpot_s = e.report.tpot.p50;  // compared with the live mean inter-token latency
  return d;
}

WatchState watch_start(const Problem& p, const PlanEval& plan) {
  WatchState s;
  s.planned = p;
  s.current = plan;
  s.predicted = prediction_of(p, plan);
  return s;
}

Result<Problem> observed_problem(const Problem& planned, const LiveMetrics& live) {
  if (!(live.rate > 0) || !(live.mean_input > 0) || !(live.mean_output > 0))
    return invalid_argument("the observed rate and mean lengths must be positive");
  const double in0 = mean_of(planned.requests, true), out0 = mean_of(planned.requests, false);
  const double stretch = planned.rate / live.rate;
  const int max_len = std::max(2, planned.workload.model.config.max_seq_len);
  Workload w = planned.workload;
  w.trace.clear();
  for (const Request& r : planned.requests) {
    Request q;
    q.arrival_s = r.arrival_s * stretch;
    q.input_tokens = std::clamp(static_cast<int>(std::lround(r.input_tokens * live.mean_input / in0)), 1, max_len - 1);
    q.output_tokens = std::clamp(static_cast<int>(std::lround(r.output_tokens * live.mean_output / out0)), 1, max_len);
    w.trace.push_back(q);
  }
  TS_ASSIGN_OR_RETURN(Problem p, Problem::make(planned.fleet, std::move(w), planned.slo));
  p.homogeneous = planned.homogeneous;
  p.rate = live.rate;
  return p;
}

Result<WatchDecision> watch_window(WatchState& s, const LiveMetrics& live, double now_s, const ReplanPolicy& policy,
                                   const SearchOptions& options) {
  ++s.windows;
  ReplanInput in;
  in.now_s = now_s;
  in.live = live;
  in.predicted = s.predicted;
  ReplanDecision d = decide_replan(s.planned.slo, policy, s.replan, in);
  WatchDecision out;
  std::string head = observed(live);
  if (d.action == ReplanAction::kKeep && d.state.violated_windows == 0) {
    s.replan = d.state;
    out.line = fmt::format("keep: {}{}{}", head, d.reasons.empty() ? "" : "; ", fmt::join(d.reasons, "; "));
    return out;
  }
  // Re-solve for what was observed and judge the current plan on the same requests.
  TS_ASSIGN_OR_RETURN(Problem obs, observed_problem(s.planned, live));
  TS_ASSIGN_OR_RETURN(SearchResult best, solve_auto(obs, options));
  PlanEval cur = evaluate_plan(obs, s.current.plan);
  in.current_goodput_per_cost = cur.valid ? cur.goodput_per_cost : 0;
  in.best_goodput_per_cost = best.best.goodput_per_cost > 0 ? best.best.goodput_per_cost : 1e-12;
  in.best_is_current = best.best.plan == s.current.plan || (cur.valid && !better(best.best, cur));
  d = decide_replan(s.planned.slo, policy, s.replan, in);
  s.replan = d.state;
  std::string reasons = fmt::format("{}", fmt::join(d.reasons, "; "));
  if (d.action == ReplanAction::kSwitch) {
    out.replaced = true;
    out.line =
        fmt::format("re-place: {} -> {} ({}; predicted goodput {:.2f}/s per cost/h {:.3f}, was {:.3f}{})", head,
                    describe_plan(obs, best.best.plan), reasons, best.best.report.goodput, best.best.goodput_per_cost,
                    in.current_goodput_per_cost, best.fallback ? "; FALLBACK: no plan meets the SLO" : "");
    s.planned = std::move(obs);
    s.current = best.best;
    s.predicted = prediction_of(s.planned, s.current);
    return out;
  }
  if (in.best_is_current && cur.valid) {
    // Checked: the current plan is still the best for the observed workload; predict from it from now on.
    s.planned = std::move(obs);
    s.current = cur;
    s.predicted = prediction_of(s.planned, cur);
    out.line = fmt::format("keep: {} (re-solved: the current plan is still best{}{})", head,
                           reasons.empty() ? "" : "; ", reasons);
  } else {
    out.line = fmt::format("keep: {} (best for this workload: {}, {:.3f} vs {:.3f} per cost/h; {})", head,
                           describe_plan(obs, best.best.plan), best.best.goodput_per_cost, in.current_goodput_per_cost,
                           reasons);
  }
  return out;
}

}  // namespace tessera::solver
