#include "solver/search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include <fmt/core.h>

#include "base/rng.h"

namespace tessera::solver {
namespace {

double mean_in(const Problem& p) {
  double s = 0;
  for (const Request& r : p.requests) s += r.input_tokens;
  return p.requests.empty() ? 1 : s / p.requests.size();
}
double mean_out(const Problem& p) {
  double s = 0;
  for (const Request& r : p.requests) s += r.output_tokens;
  return p.requests.empty() ? 1 : s / p.requests.size();
}
// KV positions the longest request holds, its sliding window and recurrent state counted in positions.
double max_need(const Problem& p) {
  int m = 1;
  for (const Request& r : p.requests) m = std::max(m, r.input_tokens + r.output_tokens);
  return p.cost.held_positions(m);
}

std::string plan_key(const Plan& plan) {
  std::string k;
  for (const PoolPlacement& pp : plan.pools)
    k += fmt::format("{}:{}:{}:{}|", static_cast<int>(pp.role), pp.instances, pp.tp, pp.max_batch);
  return k;
}

// Full simulations, remembered so that no plan is simulated twice.
class Evaluator {
 public:
  explicit Evaluator(const Problem& p) : p_(p) {}
  const PlanEval& eval(const Plan& plan) {
    std::string k = plan_key(plan);
    auto it = cache_.find(k);
    if (it != cache_.end()) return it->second;
    PlanEval e = evaluate_plan(p_, plan);
    if (e.valid) ++simulations_;
    if (!e.valid && check_plan(p_, plan).ok()) last_error_ = e.why;  // valid plan, failed simulation
    steps_ += e.sim_steps;
    if (!best_ || better(e, *best_)) best_ = std::make_unique<PlanEval>(e);
    return cache_.emplace(k, std::move(e)).first->second;
  }
  bool seen(const Plan& plan) const { return cache_.count(plan_key(plan)) > 0; }
  long simulations() const { return simulations_; }
  double steps() const { return steps_; }
  const PlanEval* best() const { return best_.get(); }
  // Why the last plan that passed the constraint check could not be simulated (empty: none failed).
  const std::string& last_error() const { return last_error_; }

 private:
  const Problem& p_;
  std::map<std::string, PlanEval> cache_;
  std::unique_ptr<PlanEval> best_;
  long simulations_ = 0;
  double steps_ = 0;
  std::string last_error_;
};

Status no_valid_plan(const Evaluator& ev) {
  if (!ev.last_error().empty()) return resource_exhausted(ev.last_error());
  return failed_precondition(
      "no valid plan: no pool can hold the model with room for the longest request, or no configuration keeps one "
      "request within the SLO");
}

SearchResult finish(const PlanEval& best, long evaluations, long probes, const std::string& method) {
  SearchResult r;
  r.best = best;
  r.evaluations = evaluations;
  r.probes = probes;
  r.fallback = !best.valid || !best.report.meets_slo;
  r.note = r.fallback ? fmt::format("{}: no plan meets the SLO; this is the plan with the highest attainment", method)
                      : fmt::format("{}: best goodput per cost among plans meeting the SLO", method);
  return r;
}

// ---- capacity probes -------------------------------------------------------------------------------

struct Probe {
  PoolConfig config;
  size_t pool = 0;
  double capacity = 0;       // requests/s one instance sustains within its SLO share
  double instance_cost = 0;  // per hour
  int max_instances = 0;
};

SimInstance instance_of(const Problem& p, size_t pool, const PoolConfig& c) {
  const Pool& pl = p.fleet.pools[pool];
  SimInstance s;
  s.pool = pl.name;
  s.role = c.role;
  s.tp = c.tp;
  s.max_batch = c.max_batch;
  s.latency = pl.profile.latency;
  s.interconnect_bandwidth = pl.profile.interconnect_bandwidth;
  s.network_bandwidth = pl.profile.network_bandwidth * c.tp;
  s.kv_capacity_tokens = kv_capacity_tokens(p, pl, c.tp);
  if (pl.decode_points && c.tp == 1) s.decode_points = pl.profile.decode;  // measured at tp 1
  if (pl.prefill_points && c.tp == 1) s.prefill_points = pl.profile.prefill;
  return s;
}

// A partner that takes no time and never runs out of room: it isolates the probed instance's phase.
SimInstance ideal_partner(Role role, double network_bandwidth) {
  SimInstance s;
  s.pool = "ideal";
  s.role = role;
  s.max_batch = 1 << 30;
  s.latency = {0, 1e30, 1e30};
  s.network_bandwidth = network_bandwidth;
  s.kv_capacity_tokens = 1e18;
  return s;
}

std::vector<Request> probe_requests(const Problem& p, double rate, int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<Request> out;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    t += -std::log(1.0 - rng.next_f32()) / rate;
    const Request& src = p.requests[rng.next_u32() % p.requests.size()];
    out.push_back({t, src.input_tokens, src.output_tokens});
  }
  return out;
}

// The probed phase meets its share of the SLO: enough requests within its target(s), and the SLO
// percentile of its latency (or latencies) within target.
bool probe_passes(const Problem& p, const SimConfig& c, Role role, double rate, int n, uint64_t seed) {
  std::vector<Request> reqs = probe_requests(p, rate, n, seed);
  auto sim = simulate(c, reqs);
  if (!sim.ok()) return false;
  std::vector<double> ttft, tpot;
  int met = 0;
  for (const RequestOutcome& o : sim->requests) {
    if (!o.served) return false;
    bool ok_ttft = o.ttft_s <= p.slo.ttft_s, ok_tpot = o.tpot_s <= p.slo.tpot_s;
    bool ok = role == Role::kPrefill ? ok_ttft : role == Role::kDecode ? ok_tpot : ok_ttft && ok_tpot;
    met += ok;
    ttft.push_back(o.ttft_s);
    tpot.push_back(o.tpot_s);
  }
  auto at_pct = [&](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    size_t rank = static_cast<size_t>(std::ceil(p.slo.percentile / 100.0 * v.size()));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
  };
  if (role != Role::kDecode && at_pct(ttft) > p.slo.ttft_s) return false;
  if (role != Role::kPrefill && at_pct(tpot) > p.slo.tpot_s) return false;
  return met >= p.slo.attainment * reqs.size() - 1e-9;
}

double probe_capacity(const Problem& p, size_t pool, const PoolConfig& cfg, const SearchOptions& o, long* probes) {
  SimInstance s = instance_of(p, pool, cfg);
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
  if (cfg.role == Role::kPrefill) c.instances = {s, ideal_partner(Role::kDecode, s.network_bandwidth)};
  if (cfg.role == Role::kDecode) c.instances = {ideal_partner(Role::kPrefill, s.network_bandwidth), s};
  if (cfg.role == Role::kBoth) c.instances = {s};
  // Upper bound from the roofline: a full token budget of prefill, or a full batch of decode.
  double in = mean_in(p), out = mean_out(p);
  double budget = p.fleet.token_budget;
  double t_pre = step_seconds(
      s.latency, step_work(p.cost, prefill_shape(p.cost, std::min(budget, in), std::max(1.0, budget / in))), s.tp,
      s.interconnect_bandwidth, p.cost);
  double pre_rate = std::max(1.0, budget / in) / t_pre;
  double t_dec = step_seconds(s.latency, step_work(p.cost, decode_shape(cfg.max_batch, in + out / 2)), s.tp,
                              s.interconnect_bandwidth, p.cost);
  double dec_rate = cfg.max_batch / (t_dec * std::max(1.0, out - 1));
  double hi = cfg.role == Role::kPrefill  ? pre_rate
              : cfg.role == Role::kDecode ? dec_rate
                                          : std::min(pre_rate, dec_rate);
  hi *= 1.5;
  double lo = 0;
  if (probe_passes(p, c, cfg.role, hi, o.probe_requests, o.seed)) {
    ++*probes;
    return hi;
  }
  ++*probes;
  for (int it = 0; it < 9; ++it) {
    double mid = (lo + hi) / 2;
    ++*probes;
    if (probe_passes(p, c, cfg.role, mid, o.probe_requests, o.seed)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// ---- analytic seeds ----------------------------------------------------------------------------------

struct Seed {
  Plan plan;
  double cost = 0;
};

// Covers `need` requests/s with the chosen per-pool probes at least cost (greedy on cost per request/s,
// colocated pools against the cheapest prefill + decode pair), then rounds counts up. Returns false if
// the pools cannot cover it.
bool cover(const Problem& p, const std::vector<const Probe*>& choice, double need, Seed* out) {
  struct Avail {
    const Probe* probe;
    double left;   // requests/s still available
    double taken;  // requests/s assigned
  };
  std::vector<Avail> colo, pre, dec;
  for (const Probe* pr : choice) {
    if (!pr) continue;
    if (pr->capacity <= 0) return false;
    Avail a{pr, pr->capacity * pr->max_instances, 0};
    (pr->config.role == Role::kBoth ? colo : pr->config.role == Role::kPrefill ? pre : dec).push_back(a);
  }
  auto unit = [](const Avail& a) { return a.probe->instance_cost / a.probe->capacity; };
  auto cheapest = [&](std::vector<Avail>& v) -> Avail* {
    Avail* best = nullptr;
    for (Avail& a : v)
      if (a.left > 1e-12 && (!best || unit(a) < unit(*best))) best = &a;
    return best;
  };
  double remaining = need;
  while (remaining > 1e-12) {
    Avail* c = cheapest(colo);
    Avail* a = cheapest(pre);
    Avail* b = cheapest(dec);
    bool pd = a && b;
    if (!c && !pd) return false;
    if (c && (!pd || unit(*c) <= unit(*a) + unit(*b))) {
      double take = std::min(remaining, c->left);
      c->left -= take, c->taken += take, remaining -= take;
    } else {
      double take = std::min({remaining, a->left, b->left});
      a->left -= take, a->taken += take, b->left -= take, b->taken += take, remaining -= take;
    }
  }
  out->plan.pools.assign(p.fleet.pools.size(), PoolPlacement{});
  out->cost = 0;
  for (auto* v : {&colo, &pre, &dec}) {
    for (const Avail& a : *v) {
      if (a.taken <= 1e-12) continue;
      int n = static_cast<int>(std::ceil(a.taken / a.probe->capacity - 1e-9));
      n = std::clamp(n, 1, a.probe->max_instances);
      out->plan.pools[a.probe->pool] = {a.probe->config.role, n, a.probe->config.tp, a.probe->config.max_batch};
      out->cost += n * a.probe->instance_cost;
    }
  }
  return check_plan(p, out->plan).ok();
}

// Every combination of one probe (or idle) per pool, covered at `need`; the `keep` cheapest distinct plans.
std::vector<Seed> analytic_seeds(const Problem& p, const std::vector<std::vector<Probe>>& probes, double need,
                                 int keep) {
  std::vector<Seed> seeds;
  std::map<std::string, bool> seen;
  std::vector<const Probe*> choice(probes.size(), nullptr);
  std::vector<size_t> idx(probes.size(), 0);  // 0: idle, k: probes[pool][k - 1]
  while (true) {
    for (size_t i = 0; i < probes.size(); ++i) choice[i] = idx[i] == 0 ? nullptr : &probes[i][idx[i] - 1];
    Seed s;
    if (cover(p, choice, need, &s)) {
      std::string k = plan_key(s.plan);
      if (!seen.count(k)) {
        seen[k] = true;
        seeds.push_back(std::move(s));
      }
    }
    size_t i = 0;
    while (i < idx.size() && ++idx[i] > probes[i].size()) idx[i++] = 0;
    if (i == idx.size()) break;
  }
  std::stable_sort(seeds.begin(), seeds.end(), [](const Seed& a, const Seed& b) { return a.cost < b.cost; });
  if (static_cast<int>(seeds.size()) > keep) seeds.resize(keep);
  return seeds;
}

// When nothing covers the rate: every pool at full strength in each of its probed configurations.
std::vector<Seed> capacity_seeds(const Problem& p, const std::vector<std::vector<Probe>>& probes, int keep) {
  std::vector<std::pair<double, Seed>> all;
  std::vector<size_t> idx(probes.size(), 0);
  while (true) {
    Seed s;
    s.plan.pools.assign(p.fleet.pools.size(), PoolPlacement{});
    double colo = 0, pre = 0, dec = 0;
    for (size_t i = 0; i < probes.size(); ++i) {
      if (idx[i] == 0) continue;
      const Probe& pr = probes[i][idx[i] - 1];
      s.plan.pools[i] = {pr.config.role, pr.max_instances, pr.config.tp, pr.config.max_batch};
      double cap = pr.capacity * pr.max_instances;
      (pr.config.role == Role::kBoth ? colo : pr.config.role == Role::kPrefill ? pre : dec) += cap;
    }
    if (check_plan(p, s.plan).ok()) {
      s.cost = plan_cost(p, s.plan);
      all.emplace_back(colo + std::min(pre, dec), std::move(s));
    }
    size_t i = 0;
    while (i < idx.size() && ++idx[i] > probes[i].size()) idx[i++] = 0;
    if (i == idx.size()) break;
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Seed> out;
  for (auto& [cap, s] : all) {
    if (static_cast<int>(out.size()) >= keep) break;
    out.push_back(std::move(s));
  }
  return out;
}

// Idles prefill pools when no pool decodes and decode pools when no pool prefills.
Plan repair(Plan plan) {
  bool pre = false, dec = false;
  for (const PoolPlacement& pp : plan.pools) {
    pre |= pp.role == Role::kPrefill;
    dec |= pp.role == Role::kDecode;
  }
  for (PoolPlacement& pp : plan.pools) {
    if ((pp.role == Role::kPrefill && !dec) || (pp.role == Role::kDecode && !pre)) pp = PoolPlacement{};
  }
  return plan;
}

std::vector<int> fitting_sizes(const Problem& p, const Pool& pool) {
  std::vector<int> out;
  const double need = max_need(p);
  if (!pool.instance_sizes.empty()) {
    for (int s : pool.instance_sizes)
      if (s <= pool.count && kv_capacity_tokens(p, pool, s) >= need) out.push_back(s);
    return out;
  }
  for (int s = 1; s <= std::min(pool.count, 64); s *= 2) {
    if (kv_capacity_tokens(p, pool, s) >= need) return {s};
  }
  return out;
}

}  // namespace

std::vector<PoolConfig> pool_configs(const Problem& p, size_t pool) {
  const Pool& pl = p.fleet.pools[pool];
  std::vector<int> batches = pl.batch_limits.empty() ? std::vector<int>{16, 64, 256} : pl.batch_limits;
  std::vector<PoolConfig> out;
  for (Role r : {Role::kPrefill, Role::kDecode, Role::kBoth}) {
    if (!pl.roles.empty() && std::find(pl.roles.begin(), pl.roles.end(), role_name(r)) == pl.roles.end()) continue;
    for (int tp : fitting_sizes(p, pl))
      for (int b : batches) out.push_back({r, tp, b});
  }
  return out;
}

namespace {

// The pools enumerated together: all of them, or (homogeneous) those of one device family at a time with
// every other pool idle.
std::vector<std::vector<size_t>> pool_groups(const Problem& p) {
  std::vector<std::vector<size_t>> groups;
  if (!p.homogeneous) {
    groups.emplace_back();
    for (size_t i = 0; i < p.fleet.pools.size(); ++i) groups[0].push_back(i);
    return groups;
  }
  std::map<std::string, size_t> by_family;
  for (size_t i = 0; i < p.fleet.pools.size(); ++i) {
    auto [it, fresh] = by_family.emplace(p.fleet.pools[i].profile.family, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  return groups;
}

std::vector<PoolPlacement> pool_options(const Problem& p, size_t i) {
  std::vector<PoolPlacement> out{PoolPlacement{}};
  for (const PoolConfig& c : pool_configs(p, i))
    for (int n = 1; n * c.tp <= p.fleet.pools[i].count; ++n) out.push_back({c.role, n, c.tp, c.max_batch});
  return out;
}

}  // namespace

double plan_space_size(const Problem& p) {
  double total = 0;
  for (const auto& group : pool_groups(p)) {
    double n = 1;
    for (size_t i : group) n *= static_cast<double>(pool_options(p, i).size());
    total += n;
  }
  return total;
}

Result<SearchResult> exhaustive_search(const Problem& p, double max_plans) {
  double space = plan_space_size(p);
  if (space > max_plans)
    return resource_exhausted(
        fmt::format("exhaustive search would simulate up to {:.0f} plans (limit {:.0f}); use the scalable search",
                    space, max_plans));
  Evaluator ev(p);
  for (const auto& group : pool_groups(p)) {
    std::vector<std::vector<PoolPlacement>> options;
    for (size_t i : group) options.push_back(pool_options(p, i));
    std::vector<size_t> idx(options.size(), 0);
    Plan plan;
    plan.pools.assign(p.fleet.pools.size(), PoolPlacement{});
    while (true) {
      for (size_t k = 0; k < idx.size(); ++k) plan.pools[group[k]] = options[k][idx[k]];
      if (check_plan(p, plan).ok()) ev.eval(plan);
      size_t k = 0;
      while (k < idx.size() && ++idx[k] >= options[k].size()) idx[k++] = 0;
      if (k == idx.size()) break;
    }
  }
  if (!ev.best() || !ev.best()->valid) return no_valid_plan(ev);
  SearchResult r = finish(*ev.best(), ev.simulations(), 0, "exhaustive search");
  r.sim_steps = ev.steps();
  return r;
}

Result<SearchResult> scalable_search(const Problem& p, const SearchOptions& o) {
  long probes = 0;
  std::vector<std::vector<Probe>> table(p.fleet.pools.size());
  for (size_t i = 0; i < table.size(); ++i) {
    for (const PoolConfig& c : pool_configs(p, i)) {
      Probe pr;
      pr.config = c;
      pr.pool = i;
      pr.capacity = probe_capacity(p, i, c, o, &probes);
      pr.instance_cost = c.tp * p.fleet.pools[i].cost_per_hour;
      pr.max_instances = p.fleet.pools[i].count / c.tp;
      table[i].push_back(pr);  // capacity 0 (misses the SLO even alone) still serves the fallback
    }
  }
  Evaluator ev(p);
  auto budget_left = [&] { return ev.simulations() < o.max_evaluations && ev.steps() < o.max_sim_steps; };
  // Verify seeds at several headrooms (probes are conservative: pooled instances absorb bursts better
  // than one alone, so less than 1 can be enough), stopping once one meets the SLO at headroom >= 1.
  bool any_seed = false;
  for (double headroom : {0.8, 0.9, 1.0, 1.15, 1.35, 1.6}) {
    std::vector<Seed> seeds = analytic_seeds(p, table, p.rate * headroom, o.seeds_to_simulate);
    any_seed = any_seed || !seeds.empty();
    for (const Seed& s : seeds) {
      if (!budget_left()) break;
      ev.eval(s.plan);
    }
    if (headroom >= 1.0 && ev.best() && ev.best()->valid && ev.best()->report.meets_slo) break;
    if (!budget_left()) break;
  }
  if (!ev.best() || !ev.best()->valid || !ev.best()->report.meets_slo) {
    for (const Seed& s : capacity_seeds(p, table, o.seeds_to_simulate)) {
      if (!budget_left()) break;
      ev.eval(s.plan);
    }
  }
  if (!ev.best() || !ev.best()->valid) return no_valid_plan(ev);
  // Hill climbing on the simulator, first improvement, neighbours in a seeded order.
  Rng rng(o.seed);
  bool improved = true;
  while (improved && budget_left()) {
    improved = false;
    Plan cur = ev.best()->plan;
    std::vector<Plan> nbrs;
    for (size_t i = 0; i < cur.pools.size(); ++i) {
      const PoolPlacement& pp = cur.pools[i];
      if (pp.role == Role::kIdle) continue;
      int tenth = std::max(1, pp.instances / 10);
      for (int delta : {-1, +1, -tenth, +tenth}) {
        Plan n = cur;
        n.pools[i].instances += delta;
        if (n.pools[i].instances == 0) n.pools[i] = PoolPlacement{};
        nbrs.push_back(n);
      }
    }
    // Move one instance's worth of devices from pool j to pool i (taking a configuration if i is idle).
    for (size_t j = 0; j < cur.pools.size(); ++j) {
      if (cur.pools[j].role == Role::kIdle) continue;
      for (size_t i = 0; i < cur.pools.size(); ++i) {
        if (i == j) continue;
        Plan base = cur;
        if (--base.pools[j].instances == 0) base.pools[j] = PoolPlacement{};
        if (cur.pools[i].role != Role::kIdle) {
          base.pools[i].instances++;
          nbrs.push_back(repair(base));
          continue;
        }
        for (const PoolConfig& c : pool_configs(p, i)) {
          Plan n = base;
          n.pools[i] = {c.role, 1, c.tp, c.max_batch};
          nbrs.push_back(repair(n));
        }
      }
    }
    // Another configuration for one pool (role, size or batch limit), keeping its devices; a prefill or
    // decode side left without its partner goes idle.
    for (size_t i = 0; i < cur.pools.size(); ++i) {
      const PoolPlacement& pp = cur.pools[i];
      int devices = pp.role == Role::kIdle ? 1 : pp.instances * pp.tp;
      for (const PoolConfig& c : pool_configs(p, i)) {
        if (c.role == pp.role && c.tp == pp.tp && c.max_batch == pp.max_batch) continue;
        Plan n = cur;
        n.pools[i] = {c.role, std::max(1, devices / c.tp), c.tp, c.max_batch};
        nbrs.push_back(repair(n));
        if (n.pools[i].instances > 1) {  // a larger batch limit may need fewer instances: both moves at once
          Plan fewer = n;
          fewer.pools[i].instances--;
          nbrs.push_back(repair(fewer));
        }
        // The same change with the rest of the plan colocated (a disaggregated plan becoming a colocated
        // one needs every pool to change at once, which single moves cannot reach through valid plans).
        if (c.role != Role::kBoth) continue;
        for (size_t j = 0; j < n.pools.size(); ++j) {
          PoolPlacement& q = n.pools[j];
          if (j == i || (q.role != Role::kPrefill && q.role != Role::kDecode)) continue;
          for (const PoolConfig& cj : pool_configs(p, j))
            if (cj.role == Role::kBoth && cj.tp == q.tp && cj.max_batch == q.max_batch) q.role = Role::kBoth;
        }
        nbrs.push_back(repair(n));
      }
    }
    for (size_t k = nbrs.size(); k > 1; --k) std::swap(nbrs[k - 1], nbrs[rng.next_u32() % k]);
    for (const Plan& n : nbrs) {
      if (!budget_left()) break;
      if (ev.seen(n) || !check_plan(p, n).ok()) continue;
      ev.eval(n);  // the evaluator keeps the best plan seen
      if (!(ev.best()->plan == cur)) {
        improved = true;
        break;
      }
    }
  }
  SearchResult r = finish(*ev.best(), ev.simulations(), probes, "scalable search");
  r.sim_steps = ev.steps();
  for (const auto& row : table)
    for (const Probe& pr : row)
      r.capacities.push_back(
          {pr.pool, pr.config.role, pr.config.tp, pr.config.max_batch, pr.capacity, pr.instance_cost});
  if (!any_seed) r.note += " (no configuration mix covers the rate by the capacity estimates)";
  return r;
}

}  // namespace tessera::solver
