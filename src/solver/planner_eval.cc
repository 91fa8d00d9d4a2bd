// The planner's simulator evaluator (planner_eval.h).
#include "solver/planner_eval.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

#include "solver/placement.h"

namespace tessera::solver {

Result<Workload> observed_workload(const Workload& base, const LiveMetrics& live, const PlannerEvalOptions& options) {
  if (!(live.rate > 0) || !(live.mean_input >= 1) || !(live.mean_output >= 1) || !std::isfinite(live.rate) ||
      !std::isfinite(live.mean_input) || !std::isfinite(live.mean_output)) {
    return invalid_argument(fmt::format("the observed rate ({}) and mean lengths ({}, {}) must be positive", live.rate,
                                        live.mean_input, live.mean_output));
  }
  Workload w = base;
  w.trace.clear();
  w.rate = live.rate;
  const int max_len = std::max(2, base.model.config.max_seq_len);
  const int in = std::clamp(static_cast<int>(std::lround(live.mean_input)), 1, max_len - 1);
  const int out = std::clamp(static_cast<int>(std::lround(live.mean_output)), 1, max_len - in);
  w.input = LengthDist{};
  w.input.kind = LengthDist::Kind::kFixed;
  w.input.mean = in;
  w.input.min = w.input.max = in;
  w.output = LengthDist{};
  w.output.kind = LengthDist::Kind::kFixed;
  w.output.mean = out;
  w.output.min = w.output.max = out;
  w.requests = std::max(1, options.requests);
  w.seed = options.seed;
  TS_RETURN_IF_ERROR(w.validate());
  return w;
}

Result<Prediction> simulate_placement(const Fleet& fleet, const Workload& workload, const Slo& slo,
                                      const Placement& placement) {
  if (placement.size() != fleet.pools.size()) return invalid_argument("the placement does not match the fleet's pools");
  Fleet sub = fleet;
  sub.pools.clear();
  Plan plan;
  for (size_t i = 0; i < fleet.pools.size(); ++i) {
    const Pool& pool = fleet.pools[i];
    const std::pair<const char*, int> roles[] = {
        {"prefill", placement[i].prefill}, {"decode", placement[i].decode}, {"both", placement[i].both}};
    for (const auto& [role, count] : roles) {
      if (count <= 0) continue;
      Pool q = pool;
      q.name = fmt::format("{}/{}", pool.name, role);
      q.count = count;
      q.roles = {role};
      q.instance_sizes = {1};
      sub.pools.push_back(q);
      PoolPlacement pp;
      TS_ASSIGN_OR_RETURN(pp.role, role_from_name(role));
      pp.instances = count;
      pp.tp = 1;
      pp.max_batch = pool.batch_limits.empty() ? 64 : pool.batch_limits.front();
      plan.pools.push_back(pp);
    }
  }
  if (sub.pools.empty()) return invalid_argument("the placement has no node");
  TS_ASSIGN_OR_RETURN(Problem p, Problem::make(std::move(sub), workload, slo));
  PlanEval e = evaluate_plan(p, plan);
  if (!e.valid) return invalid_argument(fmt::format("not a valid plan: {}", e.why));
  Prediction out;
  out.goodput = e.report.goodput;
  out.attainment = e.report.attainment;
  out.cost_per_hour = e.cost_per_hour;
  out.meets_slo = e.report.meets_slo;
  out.ttft_s = e.report.ttft.at_slo_percentile;
  out.tpot_s = e.report.tpot.at_slo_percentile;
  return out;
}

Evaluator simulator_evaluator(Fleet fleet, Workload workload, Slo slo) {
  return [fleet = std::move(fleet), workload = std::move(workload), slo = std::move(slo)](
             const Placement& p) -> Result<Prediction> { return simulate_placement(fleet, workload, slo, p); };
}

}  // namespace tessera::solver
