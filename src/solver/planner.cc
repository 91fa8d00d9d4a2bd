// The planner's decision logic (planner.h).
#include "solver/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tessera::solver {
namespace {

using json = nlohmann::json;

bool role_allowed(const Pool& pool, const char* role) {
  return pool.roles.empty() || std::find(pool.roles.begin(), pool.roles.end(), role) != pool.roles.end();
}

std::string describe_roles(const PoolRoles& r) {
  std::vector<std::string> parts;
  if (r.prefill > 0) parts.push_back(fmt::format("{}P", r.prefill));
  if (r.decode > 0) parts.push_back(fmt::format("{}D", r.decode));
  if (r.both > 0) parts.push_back(fmt::format("{}B", r.both));
  return parts.empty() ? "0" : fmt::format("{}", fmt::join(parts, "+"));
}

int& count_of(PoolRoles& r, const std::string& role) {
  return role == "prefill" ? r.prefill : role == "decode" ? r.decode : r.both;
}
int count_in(const PoolRoles& r, const std::string& role) {
  return role == "prefill" ? r.prefill : role == "decode" ? r.decode : r.both;
}

// Relative gain of `best` over `current` in the objective. A current placement predicted to serve nothing
// within the SLO gains 100% from any placement that serves some (a finite number the history can hold).
double relative_gain(double best, double current) {
  if (current > 0) return best / current - 1;
  return best > 0 ? 1.0 : 0.0;
}

Decision keep(const Fleet& fleet, const PlannerObservation& obs, const Placement& current, const Placement& best,
              std::string reason, double gain) {
  Decision d;
  d.ts_ms = obs.unix_ms;
  d.action = "keep";
  d.from = describe_placement(fleet, current);
  d.to = describe_placement(fleet, best);
  d.reason = std::move(reason);
  d.predicted_gain = gain;
  d.applied = true;  // keeping is always carried out
  return d;
}

// The node moves from `current` to `target`: per pool, nodes of a role in surplus (least loaded first) take
// the roles in deficit; a pool that grows starts nodes, one that shrinks stops its least loaded surplus.
std::vector<Decision> moves(const Fleet& fleet, const std::vector<NodeView>& nodes, const Placement& current,
                            const Placement& target) {
  std::vector<Decision> out;
  for (size_t i = 0; i < fleet.pools.size(); ++i) {
    const std::string& pool = fleet.pools[i].name;
    std::vector<NodeView> mine;
    for (const NodeView& n : nodes) {
      if (n.pool == pool) mine.push_back(n);
    }
    std::stable_sort(mine.begin(), mine.end(), [](const NodeView& a, const NodeView& b) {
      return a.load != b.load ? a.load < b.load : a.id < b.id;
    });
    const PoolRoles& have = current[i];
    const PoolRoles& want = target[i];
    std::vector<const NodeView*> surplus;
    for (const char* role : {"prefill", "decode", "both"}) {
      int extra = count_in(have, role) - count_in(want, role);
      for (const NodeView& n : mine) {
        if (extra <= 0) break;
        if (n.role == role) surplus.push_back(&n), --extra;
      }
    }
    std::vector<std::string> deficit;
    for (const char* role : {"decode", "prefill", "both"}) {
      for (int k = count_in(want, role) - count_in(have, role); k > 0; --k) deficit.push_back(role);
    }
    size_t s = 0;
    for (const std::string& role : deficit) {
      Decision d;
      d.pool = pool;
      d.to = role;
      if (s < surplus.size()) {
        d.action = "re-role";
        d.node = surplus[s]->id;
        d.from = surplus[s]->role;
        ++s;
      } else {
        d.action = "scale-out";
        d.from = "none";
      }
      out.push_back(d);
    }
    for (; s < surplus.size(); ++s) {
      Decision d;
      d.action = "scale-in";
      d.pool = pool;
      d.node = surplus[s]->id;
      d.from = surplus[s]->role;
      d.to = "none";
      out.push_back(d);
    }
  }
  return out;
}

}  // namespace

std::string describe_placement(const Fleet& fleet, const Placement& p) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < fleet.pools.size() && i < p.size(); ++i)
    parts.push_back(fmt::format("{} {}", fleet.pools[i].name, describe_roles(p[i])));
  return fmt::format("{}", fmt::join(parts, ", "));
}

double objective(const Fleet& fleet, const Prediction& p) {
  bool costed = !fleet.pools.empty();
  for (const Pool& pool : fleet.pools) costed = costed && pool.cost_per_hour > 0;
  if (costed && p.cost_per_hour > 0) return p.goodput / p.cost_per_hour;
  return p.goodput;
}

std::vector<Placement> candidate_placements(const Fleet& fleet, const PlannerPolicy& policy, const Placement& current) {
  // Per pool, every split of every allowed size into the allowed roles.
  std::vector<std::vector<PoolRoles>> per_pool;
  for (size_t i = 0; i < fleet.pools.size(); ++i) {
    const Pool& pool = fleet.pools[i];
    const int now = i < current.size() ? current[i].total() : 0;
    int lo = now, hi = now;
    if (policy.scale) {
      lo = std::min(now, std::max(0, policy.min_nodes_per_pool));
      hi = std::max(now, pool.count);
    }
    std::vector<PoolRoles> splits;
    for (int n = lo; n <= hi; ++n) {
      for (int p = 0; p <= n; ++p) {
        for (int d = 0; p + d <= n; ++d) {
          PoolRoles r{p, d, n - p - d};
          if ((r.prefill > 0 && !role_allowed(pool, "prefill")) || (r.decode > 0 && !role_allowed(pool, "decode")) ||
              (r.both > 0 && !role_allowed(pool, "both")))
            continue;
          splits.push_back(r);
        }
      }
    }
    per_pool.push_back(std::move(splits));
  }
  std::vector<Placement> out = {current};
  Placement p(fleet.pools.size());
  std::function<void(size_t)> walk = [&](size_t i) {
    if (i == per_pool.size()) {
      int prefill = 0, decode = 0, both = 0;
      for (const PoolRoles& r : p) prefill += r.prefill, decode += r.decode, both += r.both;
      if (decode + both == 0 || (prefill > 0) != (decode > 0) || p == current) return;
      out.push_back(p);
      return;
    }
    for (const PoolRoles& r : per_pool[i]) {
      p[i] = r;
      walk(i + 1);
    }
  };
  if (current.size() == fleet.pools.size()) walk(0);
  return out;
}

Placement current_placement(const Fleet& fleet, const std::vector<NodeView>& nodes) {
  Placement p(fleet.pools.size());
  for (const NodeView& n : nodes) {
    for (size_t i = 0; i < fleet.pools.size(); ++i) {
      if (fleet.pools[i].name != n.pool) continue;
      if (n.role == "prefill" || n.role == "decode" || n.role == "both") ++count_of(p[i], n.role);
    }
  }
  return p;
}

std::vector<Decision> plan_window(const Fleet& fleet, const PlannerPolicy& policy, PlannerState& state,
                                  const PlannerObservation& obs, const Evaluator& evaluate) {
  ++state.windows;
  const Placement current = current_placement(fleet, obs.nodes);
  auto hold = [&](const std::string& kind, std::string reason) -> std::vector<Decision> {
    ++state.holds;
    state.state = "holding";
    state.reason = reason;
    state.pending.clear();
    state.pending_windows = 0;
    if (state.last_keep == kind) return {};
    state.last_keep = kind;
    return {keep(fleet, obs, current, current, std::move(reason), 0)};
  };
  // Without the control plane the planner does not know who serves what; without metrics it does not know
  // the workload. Either way it changes nothing (docs/solver.md, "When inputs disappear").
  if (!obs.ctrl.ok()) return hold("no-ctrl", "holding: control plane unreachable: " + obs.ctrl.message());
  if (!obs.metrics.ok()) return hold("no-metrics", "holding: no metrics: " + obs.metrics.message());
  if (obs.window_requests < policy.min_requests) {
    return hold("quiet", fmt::format("holding: {:.0f} requests finished in the window, fewer than the {:.0f} needed",
                                     obs.window_requests, policy.min_requests));
  }
  state.state = "acting";

  // Predict every allowed placement on the observed workload; the current one is the baseline.
  const std::vector<Placement> candidates = candidate_placements(fleet, policy, current);
  auto base = evaluate(current);
  if (!base.ok())
    return hold("no-baseline", "holding: the current placement cannot be evaluated: " + base.status().message());
  const double base_obj = objective(fleet, *base);
  Placement best = current;
  Prediction best_pred = *base;
  double best_obj = base_obj;
  for (size_t i = 1; i < candidates.size(); ++i) {
    auto e = evaluate(candidates[i]);
    if (!e.ok()) continue;
    // Strictly better only: ties keep the current placement (or the earlier candidate).
    const double o = objective(fleet, *e);
    if (o > best_obj * (1 + 1e-9) + 1e-12) best = candidates[i], best_pred = *e, best_obj = o;
  }
  const double gain = relative_gain(best_obj, base_obj);
  const std::string observed =
      fmt::format("rate {:.2f}/s, lengths {:.0f}/{:.0f}, TTFT {:.0f} ms, TPOT {:.1f} ms", obs.live.rate,
                  obs.live.mean_input, obs.live.mean_output, obs.live.ttft_s * 1e3, obs.live.tpot_s * 1e3);
  const std::string predicted =
      fmt::format("predicted goodput {:.2f}/s vs {:.2f}/s now", best_pred.goodput, base->goodput);

  if (best == current || gain < policy.min_gain) {
    state.pending.clear();
    state.pending_windows = 0;
    std::string kind = best == current ? "best" : "small-gain";
    state.reason = best == current ? fmt::format("keeping {}: best for the observed workload ({})",
                                                 describe_placement(fleet, current), observed)
                                   : fmt::format("keeping {}: {} would gain {:.0f}%, under the {:.0f}% threshold ({})",
                                                 describe_placement(fleet, current), describe_placement(fleet, best),
                                                 gain * 100, policy.min_gain * 100, observed);
    if (state.last_keep == kind) return {};
    state.last_keep = kind;
    return {keep(fleet, obs, current, best, state.reason, gain)};
  }
  // Hysteresis: the same better placement must win `windows_to_act` windows in a row.
  if (state.pending == best) {
    ++state.pending_windows;
  } else {
    state.pending = best;
    state.pending_windows = 1;
  }
  if (state.pending_windows < policy.windows_to_act) {
    state.reason = fmt::format("{} predicted {:.0f}% better ({}; {}): window {} of {} before acting",
                               describe_placement(fleet, best), gain * 100, predicted, observed, state.pending_windows,
                               policy.windows_to_act);
    state.last_keep = "hysteresis";
    return {keep(fleet, obs, current, best, state.reason, gain)};
  }
  const double since = obs.now_s - state.last_action_s;
  if (since < policy.cooldown_s) {
    state.reason = fmt::format(
        "{} predicted {:.0f}% better, held back: {:.0f} s since the last action (cooldown "
        "{:.0f} s)",
        describe_placement(fleet, best), gain * 100, since, policy.cooldown_s);
    if (state.last_keep == "cooldown") return {};
    state.last_keep = "cooldown";
    return {keep(fleet, obs, current, best, state.reason, gain)};
  }
  std::vector<Decision> out = moves(fleet, obs.nodes, current, best);
  const std::string why = fmt::format("{} -> {}: {} ({}; held {} windows)", describe_placement(fleet, current),
                                      describe_placement(fleet, best), predicted, observed, state.pending_windows);
  for (Decision& d : out) {
    d.ts_ms = obs.unix_ms;
    d.reason = why;
    d.predicted_gain = gain;
  }
  state.reason = "acting: " + why;
  state.last_keep.clear();
  state.pending.clear();
  state.pending_windows = 0;
  return out;
}

void record_decisions(const PlannerPolicy& policy, PlannerState& state, double now_s,
                      const std::vector<Decision>& decisions) {
  for (const Decision& d : decisions) {
    if (d.action != "keep") {
      if (d.applied) state.last_action_s = now_s;
      ++(d.applied ? state.actions_applied : state.actions_failed);
    }
    state.history.push_back(d);
  }
  while (state.history.size() > std::max<size_t>(1, policy.history)) state.history.pop_front();
}

std::string history_json(const PlannerState& state, int64_t updated_ms) {
  json ds = json::array();
  for (const Decision& d : state.history) {
    ds.push_back({{"ts_ms", d.ts_ms},
                  {"action", d.action},
                  {"node", d.node},
                  {"from", d.from},
                  {"to", d.to},
                  {"reason", d.reason},
                  {"predicted_gain", std::isfinite(d.predicted_gain) ? d.predicted_gain : 0.0},
                  {"applied", d.applied}});
  }
  json j = {{"updated_ms", updated_ms}, {"state", state.state}, {"reason", state.reason}, {"decisions", ds}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string planner_metrics_text(const PlannerState& state, const Placement& current, const Fleet& fleet) {
  std::string t =
      "# HELP tessera_planner_state The planner's state (1 on the current one)\n# TYPE tessera_planner_state gauge\n";
  for (const char* s : {"acting", "holding", "off"})
    t += fmt::format("tessera_planner_state{{state=\"{}\"}} {}\n", s, state.state == s ? 1 : 0);
  t += fmt::format(
      "# HELP tessera_planner_windows_total Metric windows the planner judged\n# TYPE tessera_planner_windows_total "
      "counter\ntessera_planner_windows_total {}\n"
      "# HELP tessera_planner_holds_total Windows in which the planner held (no control plane, no metrics, quiet)\n"
      "# TYPE tessera_planner_holds_total counter\ntessera_planner_holds_total {}\n",
      state.windows, state.holds);
  t += fmt::format(
      "# HELP tessera_planner_actions_total Re-roles and scalings the planner ordered, by outcome\n"
      "# TYPE tessera_planner_actions_total counter\ntessera_planner_actions_total{{applied=\"true\"}} {}\n"
      "tessera_planner_actions_total{{applied=\"false\"}} {}\n",
      state.actions_applied, state.actions_failed);
  std::map<std::pair<std::string, bool>, int> counts;
  double last_gain = 0;
  for (const Decision& d : state.history) {
    ++counts[{d.action, d.applied}];
    if (d.action != "keep") last_gain = d.predicted_gain;
  }
  t += "# HELP tessera_planner_decisions Decisions in the planner's bounded history, by action\n"
       "# TYPE tessera_planner_decisions gauge\n";
  for (const auto& [k, n] : counts)
    t += fmt::format("tessera_planner_decisions{{action=\"{}\",applied=\"{}\"}} {}\n", k.first,
                     k.second ? "true" : "false", n);
  t += fmt::format(
      "# HELP tessera_planner_last_predicted_gain Predicted relative gain of the last action\n"
      "# TYPE tessera_planner_last_predicted_gain gauge\ntessera_planner_last_predicted_gain {}\n",
      last_gain);
  t += "# HELP tessera_planner_nodes Nodes per pool and role as the planner sees them\n"
       "# TYPE tessera_planner_nodes gauge\n";
  for (size_t i = 0; i < fleet.pools.size() && i < current.size(); ++i) {
    t += fmt::format("tessera_planner_nodes{{pool=\"{}\",role=\"prefill\"}} {}\n", fleet.pools[i].name,
                     current[i].prefill);
    t += fmt::format("tessera_planner_nodes{{pool=\"{}\",role=\"decode\"}} {}\n", fleet.pools[i].name,
                     current[i].decode);
    t += fmt::format("tessera_planner_nodes{{pool=\"{}\",role=\"both\"}} {}\n", fleet.pools[i].name, current[i].both);
  }
  return t;
}

}  // namespace tessera::solver
