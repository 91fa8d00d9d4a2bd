#include "solver/placement.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

namespace tessera::solver {

Result<Problem> Problem::make(Fleet fleet, Workload workload, Slo slo) {
  TS_RETURN_IF_ERROR(fleet.validate());
  TS_RETURN_IF_ERROR(workload.validate());
  TS_RETURN_IF_ERROR(slo.validate());
  Problem p;
  TS_ASSIGN_OR_RETURN(p.router, router_policy_from_name(fleet.router));
  p.cost = workload.model.cost();
  p.requests = generate_requests(workload);
  p.rate = workload.trace.empty() ? workload.rate : offered_rate(p.requests);
  p.fleet = std::move(fleet);
  p.workload = std::move(workload);
  p.slo = slo;
  return p;
}

double kv_capacity_tokens(const Problem& p, const Pool& pool, int tp) {
  double usable = pool.profile.memory_bytes * tp * p.fleet.memory_utilization;
  return std::floor((usable - p.cost.weight_bytes) / p.cost.held_bytes());
}

double plan_cost(const Problem& p, const Plan& plan) {
  double c = 0;
  for (size_t i = 0; i < plan.pools.size(); ++i) {
    const PoolPlacement& pp = plan.pools[i];
    if (pp.role != Role::kIdle) c += static_cast<double>(pp.instances) * pp.tp * p.fleet.pools[i].cost_per_hour;
  }
  return c;
}

Status check_plan(const Problem& p, const Plan& plan) {
  if (plan.pools.size() != p.fleet.pools.size())
    return invalid_argument(fmt::format("plan has {} pools, fleet has {}", plan.pools.size(), p.fleet.pools.size()));
  bool prefill = false, decode = false, both = false;
  for (size_t i = 0; i < plan.pools.size(); ++i) {
    const PoolPlacement& pp = plan.pools[i];
    const Pool& pool = p.fleet.pools[i];
    if (pp.role == Role::kIdle) continue;
    if (pp.instances < 1 || pp.tp < 1 || pp.max_batch < 1)
      return invalid_argument(fmt::format("pool {}: a non-idle pool needs instances, tp, max_batch >= 1", pool.name));
    if (!pool.roles.empty() && std::find(pool.roles.begin(), pool.roles.end(), role_name(pp.role)) == pool.roles.end())
      return invalid_argument(fmt::format("pool {}: role {} is not among its roles", pool.name, role_name(pp.role)));
    if (static_cast<long>(pp.instances) * pp.tp > pool.count)
      return invalid_argument(fmt::format("pool {}: {} instances x {} devices exceed its {} devices", pool.name,
                                          pp.instances, pp.tp, pool.count));
    if (kv_capacity_tokens(p, pool, pp.tp) < 1)
      return invalid_argument(fmt::format("pool {}: the model ({:.1f} GB) does not fit {} device(s) of {:.1f} GB",
                                          pool.name, p.cost.weight_bytes / 1e9, pp.tp,
                                          pool.profile.memory_bytes / 1e9));
    prefill |= pp.role == Role::kPrefill;
    decode |= pp.role == Role::kDecode;
    both |= pp.role == Role::kBoth;
  }
  if (p.homogeneous) {
    const std::string* family = nullptr;
    for (size_t i = 0; i < plan.pools.size(); ++i) {
      if (plan.pools[i].role == Role::kIdle) continue;
      const std::string& f = p.fleet.pools[i].profile.family;
      if (family && *family != f) return invalid_argument("homogeneous: the plan uses more than one device family");
      family = &f;
    }
  }
  if (!prefill && !both) return invalid_argument("no pool serves prefill");
  if (prefill != decode) return invalid_argument("a prefill pool needs a decode pool and vice versa");
  if (p.fleet.budget_per_hour > 0 && plan_cost(p, plan) > p.fleet.budget_per_hour + 1e-9)
    return invalid_argument(
        fmt::format("cost {:.2f}/h exceeds the budget {:.2f}/h", plan_cost(p, plan), p.fleet.budget_per_hour));
  return ok_status();
}

Result<SimConfig> sim_config(const Problem& p, const Plan& plan) {
  TS_RETURN_IF_ERROR(check_plan(p, plan));
  SimConfig c;
  c.cost = p.cost;
  c.token_budget = p.fleet.token_budget;
  c.request_overhead_s = p.fleet.request_overhead_s;
  c.request_overhead_samples_s = p.fleet.request_overhead_samples_s;
  c.request_overhead_busy_samples_s = p.fleet.request_overhead_busy_samples_s;
  c.token_overhead_s = p.fleet.token_overhead_s;
  c.stream_start_overhead_s = p.fleet.stream_start_overhead_s;
  c.colocated_slowdown = p.fleet.colocated_slowdown;
  c.router = p.router;
  for (size_t i = 0; i < plan.pools.size(); ++i) {
    const PoolPlacement& pp = plan.pools[i];
    if (pp.role == Role::kIdle) continue;
    const Pool& pool = p.fleet.pools[i];
    SimInstance s;
    s.pool = pool.name;
    s.role = pp.role;
    s.tp = pp.tp;
    s.max_batch = pp.max_batch;
    s.latency = pool.profile.latency;
    s.interconnect_bandwidth = pool.profile.interconnect_bandwidth;
    s.network_bandwidth = pool.profile.network_bandwidth * pp.tp;
    s.kv_capacity_tokens = kv_capacity_tokens(p, pool, pp.tp);
    if (pool.decode_points && pp.tp == 1) s.decode_points = pool.profile.decode;  // measured at tp 1
    if (pool.prefill_points && pp.tp == 1) s.prefill_points = pool.profile.prefill;
    for (int k = 0; k < pp.instances; ++k) c.instances.push_back(s);
  }
  return c;
}

PlanEval evaluate_plan_on(const Problem& p, const Plan& plan, const std::vector<Request>& requests, double rate) {
  PlanEval e;
  e.plan = plan;
  auto config = sim_config(p, plan);
  if (!config.ok()) {
    e.why = config.status().message();
    return e;
  }
  auto sim = simulate(*config, requests);
  if (!sim.ok()) {
    e.why = sim.status().message();
    return e;
  }
  e.valid = true;
  e.slo = p.slo;
  e.sim_steps = sim->steps;
  e.cost_per_hour = plan_cost(p, plan);
  e.report = summarize(*sim, p.slo, rate);
  e.goodput_per_cost = e.cost_per_hour > 0 ? e.report.goodput / e.cost_per_hour : e.report.goodput * 1e9;
  return e;
}

PlanEval evaluate_plan(const Problem& p, const Plan& plan) { return evaluate_plan_on(p, plan, p.requests, p.rate); }

bool better(const PlanEval& a, const PlanEval& b) {
  if (a.valid != b.valid) return a.valid;
  if (!a.valid) return false;
  if (a.report.meets_slo != b.report.meets_slo) return a.report.meets_slo;
  if (a.report.meets_slo) {
    if (a.goodput_per_cost != b.goodput_per_cost) return a.goodput_per_cost > b.goodput_per_cost;
  } else {
    if (a.report.attainment != b.report.attainment) return a.report.attainment > b.report.attainment;
    // Equal attainment (often none): the plan whose worse percentile is nearer its target.
    auto miss = [](const PlanEval& e, const Slo& s) {
      return std::max(e.report.ttft.at_slo_percentile / s.ttft_s, e.report.tpot.at_slo_percentile / s.tpot_s);
    };
    double ma = miss(a, a.slo), mb = miss(b, b.slo);
    if (ma != mb) return ma < mb;
  }
  return a.cost_per_hour < b.cost_per_hour;
}

std::string describe_plan(const Problem& p, const Plan& plan) {
  std::string out;
  for (size_t i = 0; i < plan.pools.size(); ++i) {
    const PoolPlacement& pp = plan.pools[i];
    if (!out.empty()) out += "; ";
    if (pp.role == Role::kIdle) {
      out += fmt::format("{}: idle", p.fleet.pools[i].name);
    } else {
      out += fmt::format("{}: {} x{}{} batch {}", p.fleet.pools[i].name, role_name(pp.role), pp.instances,
                         pp.tp > 1 ? fmt::format(" (tp {})", pp.tp) : "", pp.max_batch);
    }
  }
  return out;
}

}  // namespace tessera::solver
