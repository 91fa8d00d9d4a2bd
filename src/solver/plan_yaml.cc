#include "solver/plan_yaml.h"

#include <yaml-cpp/yaml.h>

#include <cmath>

#include <fmt/core.h>

#include "solver/launch.h"

namespace tessera::solver {
namespace {

void latency(YAML::Emitter& e, const char* key, const LatencySummary& s) {
  auto ms = [](double v) { return std::isfinite(v) ? std::round(v * 1e5) / 1e2 : -1.0; };
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  e << YAML::Key << "p50" << YAML::Value << ms(s.p50) << YAML::Key << "p90" << YAML::Value << ms(s.p90);
  e << YAML::Key << "p99" << YAML::Value << ms(s.p99) << YAML::EndMap;
}

// The keys `tessera up` reads (model, tokenizer, chat_template, router, nodes), when the plan runs here.
void launch(YAML::Emitter& e, const Problem& p, const Plan& plan) {
  auto c = launch_cluster(p, plan);
  e << YAML::Key << "launchable" << YAML::Value << c.ok();
  if (!c.ok()) {
    e << YAML::Key << "launch_note" << YAML::Value << c.status().message();
    return;
  }
  e << YAML::Key << "model" << YAML::Value << c->model;
  if (!c->tokenizer.empty()) e << YAML::Key << "tokenizer" << YAML::Value << c->tokenizer;
  e << YAML::Key << "chat_template" << YAML::Value << c->chat_template;
  e << YAML::Key << "router" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "port" << YAML::Value
    << c->router_port << YAML::Key << "strategy" << YAML::Value << c->strategy << YAML::EndMap;
  e << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
  for (const LaunchNode& n : c->nodes) {
    e << YAML::Flow << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << n.name << YAML::Key << "role" << YAML::Value << n.role;
    e << YAML::Key << "backend" << YAML::Value << n.backend;
    if (n.threads > 0) e << YAML::Key << "threads" << YAML::Value << n.threads;
    if (!n.cpus.empty()) e << YAML::Key << "cpus" << YAML::Value << YAML::Flow << n.cpus;
    e << YAML::Key << "args" << YAML::Value << YAML::Flow << n.args;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
}

}  // namespace

std::string plan_to_yaml(const Problem& p, const SearchResult& r, const ReplanPolicy& policy, double solve_seconds) {
  const PlanEval& b = r.best;
  YAML::Emitter e;
  e.SetDoublePrecision(6);
  e.SetFloatPrecision(6);
  e << YAML::BeginMap;
  e << YAML::Key << "meets_slo" << YAML::Value << b.report.meets_slo;
  e << YAML::Key << "fallback" << YAML::Value << r.fallback;
  e << YAML::Key << "note" << YAML::Value << r.note;
  e << YAML::Key << "model_name" << YAML::Value << (p.workload.model.name.empty() ? "unnamed" : p.workload.model.name);
  e << YAML::Key << "slo" << YAML::Value << YAML::Flow << YAML::BeginMap;
  e << YAML::Key << "ttft_ms" << YAML::Value << p.slo.ttft_s * 1e3 << YAML::Key << "tpot_ms" << YAML::Value
    << p.slo.tpot_s * 1e3 << YAML::Key << "percentile" << YAML::Value << p.slo.percentile << YAML::Key << "attainment"
    << YAML::Value << p.slo.attainment << YAML::EndMap;
  e << YAML::Key << "cost_per_hour" << YAML::Value << b.cost_per_hour;
  e << YAML::Key << "predicted" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "offered_rps" << YAML::Value << b.report.offered_rate;
  e << YAML::Key << "goodput_rps" << YAML::Value << b.report.goodput;
  e << YAML::Key << "goodput_per_cost" << YAML::Value << b.goodput_per_cost;
  e << YAML::Key << "attainment" << YAML::Value << b.report.attainment;
  e << YAML::Key << "unserved" << YAML::Value << b.report.unserved;
  latency(e, "ttft_ms", b.report.ttft);
  latency(e, "tpot_ms", b.report.tpot);
  latency(e, "e2e_ms", b.report.e2e);
  e << YAML::EndMap;
  e << YAML::Key << "pools" << YAML::Value << YAML::BeginSeq;
  for (size_t i = 0; i < b.plan.pools.size(); ++i) {
    const PoolPlacement& pp = b.plan.pools[i];
    const Pool& pool = p.fleet.pools[i];
    e << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << pool.name;
    e << YAML::Key << "family" << YAML::Value << pool.profile.family;
    e << YAML::Key << "role" << YAML::Value << role_name(pp.role);
    if (pp.role != Role::kIdle) {
      e << YAML::Key << "instances" << YAML::Value << pp.instances;
      e << YAML::Key << "instance_size" << YAML::Value << pp.tp;
      e << YAML::Key << "max_batch" << YAML::Value << pp.max_batch;
      e << YAML::Key << "token_budget" << YAML::Value << p.fleet.token_budget;
      e << YAML::Key << "kv_capacity_tokens" << YAML::Value << kv_capacity_tokens(p, pool, pp.tp);
    }
    e << YAML::Key << "devices_used" << YAML::Value << (pp.role == Role::kIdle ? 0 : pp.instances * pp.tp);
    e << YAML::Key << "devices" << YAML::Value << pool.count;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::Key << "replan" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "planned_rate" << YAML::Value << p.rate;
  e << YAML::Key << "rate_drift" << YAML::Value << policy.rate_drift;
  e << YAML::Key << "length_drift" << YAML::Value << policy.length_drift;
  e << YAML::Key << "model_error" << YAML::Value << policy.model_error;
  e << YAML::Key << "improvement_threshold" << YAML::Value << policy.improvement_threshold;
  e << YAML::Key << "windows_to_trigger" << YAML::Value << policy.windows_to_trigger;
  e << YAML::Key << "cooldown_s" << YAML::Value << policy.cooldown_s;
  e << YAML::EndMap;
  e << YAML::Key << "search" << YAML::Value << YAML::Flow << YAML::BeginMap;
  e << YAML::Key << "simulations" << YAML::Value << r.evaluations << YAML::Key << "probes" << YAML::Value << r.probes
    << YAML::Key << "seconds" << YAML::Value << std::round(solve_seconds * 1e3) / 1e3 << YAML::EndMap;
  launch(e, p, b.plan);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

std::string plan_summary(const Problem& p, const SearchResult& r, double solve_seconds) {
  const PlanEval& b = r.best;
  const SloReport& s = b.report;
  std::string out = fmt::format("plan: {}\n", describe_plan(p, b.plan));
  out += fmt::format("{}{}\n", r.fallback ? "FALLBACK: " : "", r.note);
  out += fmt::format(
      "cost {:.2f}/h; offered {:.2f} req/s; goodput {:.2f} req/s ({:.3f} per cost/h); attainment {:.3f} "
      "(target {:.3f}); unserved {}\n",
      b.cost_per_hour, s.offered_rate, s.goodput, b.goodput_per_cost, s.attainment, p.slo.attainment, s.unserved);
  out += fmt::format("TTFT ms p50 {:.1f} p90 {:.1f} p99 {:.1f} (target {:.0f} at p{:g})\n", s.ttft.p50 * 1e3,
                     s.ttft.p90 * 1e3, s.ttft.p99 * 1e3, p.slo.ttft_s * 1e3, p.slo.percentile);
  out += fmt::format("TPOT ms p50 {:.2f} p90 {:.2f} p99 {:.2f} (target {:.1f} at p{:g})\n", s.tpot.p50 * 1e3,
                     s.tpot.p90 * 1e3, s.tpot.p99 * 1e3, p.slo.tpot_s * 1e3, p.slo.percentile);
  if (!r.capacities.empty()) {
    out += "capacity probes (requests/s per instance within its SLO share):\n";
    for (const CapacityProbe& c : r.capacities) {
      out += fmt::format("  {:<10} {:<8} tp {} batch {:<4} {:9.2f} req/s  {:.2f}/h  {:.3f} req/s per cost/h\n",
                         p.fleet.pools[c.pool].name, role_name(c.role), c.tp, c.max_batch, c.capacity, c.cost_per_hour,
                         c.cost_per_hour > 0 ? c.capacity / c.cost_per_hour : 0.0);
    }
  }
  out += fmt::format("search: {} simulations ({:.3g} simulated steps), {} probes, {:.2f} s\n", r.evaluations,
                     r.sim_steps, r.probes, solve_seconds);
  return out;
}

}  // namespace tessera::solver
