// The planner's decision logic (solver/planner.h) with an injected clock and evaluator: hysteresis (a
// better placement must win windows_to_act windows in a row and by min_gain), cooldown (no action within
// cooldown_s of the last), holding when the control plane or the metrics are gone (and saying so), the node
// moves it orders, the bounded history and its JSON contract; and the simulator evaluator on a real fleet:
// long prompts / short answers want more prefill than short prompts / long answers.
#include <gtest/gtest.h>

#include <map>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "solver/planner.h"
#include "solver/planner_eval.h"
#include "solver/spec_yaml.h"

namespace tessera::solver {
namespace {

using json = nlohmann::json;

Fleet one_pool(int count) {
  Fleet f;
  Pool p;
  p.name = "cpu";
  p.count = count;
  p.cost_per_hour = 0;
  f.pools.push_back(p);
  return f;
}

std::vector<NodeView> nodes(int prefill, int decode, int both = 0) {
  std::vector<NodeView> out;
  int i = 0;
  for (int k = 0; k < prefill; ++k) out.push_back({"n" + std::to_string(i++), "", "cpu", "prefill", 0});
  for (int k = 0; k < decode; ++k) out.push_back({"n" + std::to_string(i++), "", "cpu", "decode", 0});
  for (int k = 0; k < both; ++k) out.push_back({"n" + std::to_string(i++), "", "cpu", "both", 0});
  return out;
}

PlannerObservation busy(double now_s, std::vector<NodeView> n) {
  PlannerObservation o;
  o.now_s = now_s;
  o.unix_ms = static_cast<int64_t>(now_s * 1000);
  o.nodes = std::move(n);
  o.live.rate = 4;
  o.live.mean_input = 100;
  o.live.mean_output = 20;
  o.window_requests = 40;
  return o;
}

// Goodput is the number of prefill nodes (this workload wants prefill), 0.5 for the current 1P+2D.
Evaluator wants_prefill() {
  return [](const Placement& p) -> Result<Prediction> {
    Prediction r;
    r.goodput = p[0].prefill;
    return r;
  };
}

TEST(Planner, CandidatesKeepThePoolSizeAndPairPrefillWithDecode) {
  const Fleet f = one_pool(3);
  std::vector<Placement> c = candidate_placements(f, PlannerPolicy{}, {{1, 2, 0}});
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.front(), (Placement{{1, 2, 0}}));  // the current one first
  for (const Placement& p : c) {
    EXPECT_EQ(p[0].total(), 3);
    EXPECT_GT(p[0].decode + p[0].both, 0);
    EXPECT_EQ(p[0].prefill > 0, p[0].decode > 0);
  }
  // 1P+2D, 2P+1D, 1P+1D+1B, 3B (0P+0D+3B), and nothing with prefill but no decode.
  EXPECT_EQ(c.size(), 4u);
  PlannerPolicy scaling;
  scaling.scale = true;
  std::vector<Placement> s = candidate_placements(f, scaling, {{1, 1, 0}});
  bool grew = false, shrank = false;
  for (const Placement& p : s) grew |= p[0].total() == 3, shrank |= p[0].total() == 1;
  EXPECT_TRUE(grew);
  EXPECT_TRUE(shrank);
  for (const Placement& p : s) EXPECT_LE(p[0].total(), 3);
}

TEST(Planner, HysteresisActsOnlyAfterTheSameBetterPlacementWinsEnoughWindows) {
  const Fleet f = one_pool(3);
  PlannerPolicy policy;
  policy.windows_to_act = 3;
  policy.cooldown_s = 0;
  PlannerState s;
  // Windows 1 and 2: better, but not yet held long enough.
  for (int w = 1; w <= 2; ++w) {
    auto d = plan_window(f, policy, s, busy(w * 5, nodes(1, 2)), wants_prefill());
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].action, "keep");
    EXPECT_NE(d[0].reason.find(fmt::format("window {} of 3", w)), std::string::npos) << d[0].reason;
    record_decisions(policy, s, w * 5, d);
  }
  // A window in which the current placement is best resets the count.
  Evaluator flat = [](const Placement&) -> Result<Prediction> { return Prediction{1, 1, 0, true, 0, 0}; };
  auto calm = plan_window(f, policy, s, busy(15, nodes(1, 2)), flat);
  ASSERT_EQ(calm.size(), 1u);
  EXPECT_EQ(calm[0].action, "keep");
  EXPECT_EQ(s.pending_windows, 0);
  for (int w = 4; w <= 5; ++w) {
    auto d = plan_window(f, policy, s, busy(w * 5, nodes(1, 2)), wants_prefill());
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].action, "keep");
  }
  auto act = plan_window(f, policy, s, busy(30, nodes(1, 2)), wants_prefill());
  ASSERT_EQ(act.size(), 1u);
  EXPECT_EQ(act[0].action, "re-role");
  EXPECT_EQ(act[0].from, "decode");
  EXPECT_EQ(act[0].to, "prefill");
  EXPECT_FALSE(act[0].applied);
  EXPECT_DOUBLE_EQ(act[0].predicted_gain, 1.0);  // 2 prefill nodes vs 1
  EXPECT_EQ(s.state, "acting");
}

TEST(Planner, AGainUnderTheThresholdIsKept) {
  const Fleet f = one_pool(3);
  PlannerPolicy policy;
  policy.windows_to_act = 1;
  policy.min_gain = 0.2;
  PlannerState s;
  Evaluator slight = [](const Placement& p) -> Result<Prediction> {
    return Prediction{p[0].prefill == 2 ? 1.1 : 1.0, 1, 0, true, 0, 0};
  };
  for (int w = 0; w < 5; ++w) {
    for (const Decision& d : plan_window(f, policy, s, busy(w * 5, nodes(1, 2)), slight))
      EXPECT_EQ(d.action, "keep") << d.reason;
  }
  EXPECT_NE(s.reason.find("under the 20% threshold"), std::string::npos) << s.reason;
}

TEST(Planner, CooldownHoldsTheNextActionBack) {
  const Fleet f = one_pool(3);
  PlannerPolicy policy;
  policy.windows_to_act = 1;
  policy.cooldown_s = 60;
  PlannerState s;
  auto first = plan_window(f, policy, s, busy(100, nodes(1, 2)), wants_prefill());
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first[0].action, "re-role");
  first[0].applied = true;
  record_decisions(policy, s, 100, first);
  // Now 2P+1D; a workload that wants decode again arrives 10 s later: held back until 60 s have passed.
  Evaluator wants_decode = [](const Placement& p) -> Result<Prediction> {
    return Prediction{static_cast<double>(p[0].decode), 1, 0, true, 0, 0};
  };
  for (double t : {110.0, 130.0, 159.0}) {
    auto d = plan_window(f, policy, s, busy(t, nodes(2, 1)), wants_decode);
    for (const Decision& x : d) EXPECT_EQ(x.action, "keep");
    record_decisions(policy, s, t, d);
    EXPECT_NE(s.reason.find("cooldown 60 s"), std::string::npos) << s.reason;
  }
  auto later = plan_window(f, policy, s, busy(160, nodes(2, 1)), wants_decode);
  ASSERT_FALSE(later.empty());
  EXPECT_NE(later[0].action, "keep");
  // A failed action does not start a cooldown.
  PlannerState t;
  auto failed = plan_window(f, policy, t, busy(100, nodes(1, 2)), wants_prefill());
  ASSERT_EQ(failed[0].action, "re-role");
  failed[0].applied = false;
  record_decisions(policy, t, 100, failed);
  auto retry = plan_window(f, policy, t, busy(105, nodes(1, 2)), wants_prefill());
  ASSERT_FALSE(retry.empty());
  EXPECT_EQ(retry[0].action, "re-role");
}

TEST(Planner, HoldsAndSaysSoWithoutTheControlPlaneOrTheMetrics) {
  const Fleet f = one_pool(3);
  PlannerPolicy policy;
  policy.windows_to_act = 1;
  policy.cooldown_s = 0;
  PlannerState s;
  int evaluations = 0;
  Evaluator counting = [&](const Placement& p) -> Result<Prediction> {
    ++evaluations;
    return Prediction{static_cast<double>(p[0].prefill), 1, 0, true, 0, 0};
  };
  PlannerObservation no_ctrl = busy(5, {});
  no_ctrl.ctrl = unavailable("connection refused");
  auto d = plan_window(f, policy, s, no_ctrl, counting);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, "keep");
  EXPECT_EQ(s.state, "holding");
  EXPECT_NE(s.reason.find("control plane unreachable: connection refused"), std::string::npos) << s.reason;
  record_decisions(policy, s, 5, d);
  // A second window without it is not recorded again (the history says it once).
  EXPECT_TRUE(plan_window(f, policy, s, no_ctrl, counting).empty());

  PlannerObservation no_metrics = busy(10, nodes(1, 2));
  no_metrics.metrics = unavailable("http://127.0.0.1:9/metrics: connection refused");
  d = plan_window(f, policy, s, no_metrics, counting);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, "keep");
  EXPECT_NE(s.reason.find("no metrics"), std::string::npos) << s.reason;
  EXPECT_EQ(s.state, "holding");
  PlannerObservation quiet = busy(15, nodes(1, 2));
  quiet.window_requests = 2;
  plan_window(f, policy, s, quiet, counting);
  EXPECT_EQ(s.state, "holding");
  EXPECT_EQ(evaluations, 0);  // nothing was predicted, nothing ordered
  EXPECT_EQ(s.holds, 4u);
  // Back: it acts again.
  d = plan_window(f, policy, s, busy(20, nodes(1, 2)), counting);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, "re-role");
  EXPECT_EQ(s.state, "acting");
}

TEST(Planner, MovesTheLeastLoadedNodeAndScalesWhereAllowed) {
  const Fleet f = one_pool(3);
  PlannerPolicy policy;
  policy.windows_to_act = 1;
  std::vector<NodeView> n = nodes(1, 2);
  n[1].load = 5;  // n1 busy, n2 idle: n2 is re-roled
  PlannerState s;
  auto d = plan_window(f, policy, s, busy(1, n), wants_prefill());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].node, "n2");
  // Scaling: 1P+1D in a pool of 3, a workload that wants two prefill nodes: the pool grows by one.
  policy.scale = true;
  PlannerState g;
  Evaluator two_prefill_one_decode = [](const Placement& p) -> Result<Prediction> {
    return Prediction{p[0].prefill == 2 && p[0].decode == 1 ? 2.0 : 1.0, 1, 0, true, 0, 0};
  };
  d = plan_window(f, policy, g, busy(1, nodes(1, 1)), two_prefill_one_decode);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, "scale-out");
  EXPECT_EQ(d[0].to, "prefill");
  EXPECT_EQ(d[0].pool, "cpu");
  // And shrinks: 2P+2D in a pool of 4 where 1P+1D is best; the least loaded of each role stops.
  PlannerState k;
  Evaluator small = [](const Placement& p) -> Result<Prediction> {
    return Prediction{p[0].prefill == 1 && p[0].decode == 1 && p[0].both == 0 ? 2.0 : 1.0, 1, 0, true, 0, 0};
  };
  d = plan_window(one_pool(4), policy, k, busy(1, nodes(2, 2)), small);
  ASSERT_EQ(d.size(), 2u);
  for (const Decision& x : d) EXPECT_EQ(x.action, "scale-in");
}

TEST(Planner, HistoryIsBoundedOldestFirstAndKeepsTheContract) {
  const Fleet f = one_pool(3);
  PlannerPolicy policy;
  policy.history = 200;
  PlannerState s;
  for (int i = 0; i < 250; ++i) {
    Decision d;
    d.ts_ms = i;
    d.action = i % 2 ? "keep" : "re-role";
    d.node = "n1";
    d.from = "prefill";
    d.to = "decode";
    d.reason = "why \"quoted\"";
    d.predicted_gain = 0.23;
    d.applied = true;
    record_decisions(policy, s, i, {d});
  }
  ASSERT_EQ(s.history.size(), 200u);
  s.state = "acting";
  s.reason = "r";
  json j = json::parse(history_json(s, 1234));
  EXPECT_EQ(j["updated_ms"], 1234);
  EXPECT_EQ(j["state"], "acting");
  EXPECT_EQ(j["reason"], "r");
  ASSERT_EQ(j["decisions"].size(), 200u);
  EXPECT_EQ(j["decisions"][0]["ts_ms"], 50);  // the oldest 50 are gone
  EXPECT_EQ(j["decisions"][199]["ts_ms"], 249);
  const json& d = j["decisions"][0];
  for (const char* k : {"ts_ms", "action", "node", "from", "to", "reason", "predicted_gain", "applied"})
    EXPECT_TRUE(d.contains(k)) << k;
  EXPECT_EQ(d.size(), 8u);
  EXPECT_EQ(d["reason"], "why \"quoted\"");
  EXPECT_DOUBLE_EQ(d["predicted_gain"].get<double>(), 0.23);
  const std::string m = planner_metrics_text(s, {{1, 2, 0}}, f);
  EXPECT_NE(m.find("tessera_planner_state{state=\"acting\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("tessera_planner_actions_total{applied=\"true\"} 125"), std::string::npos) << m;
  EXPECT_NE(m.find("tessera_planner_nodes{pool=\"cpu\",role=\"decode\"} 2"), std::string::npos) << m;
}

// The simulator evaluator on a datasheet fleet of 3 one-device nodes: a long-prompt / short-answer workload
// predicts better with more prefill nodes than a short-prompt / long-answer one.
TEST(PlannerEval, TheSimulatorPrefersPrefillForLongPromptsAndDecodeForLongAnswers) {
  auto fleet = parse_fleet(R"(pools:
  - name: cpu
    count: 3
    cost_per_hour: 1
    batch_limits: [16]
    datasheet: {peak_tflops: 0.05, memory_bandwidth_gb_s: 10, memory_gb: 1, network_gb_s: 1}
)",
                           "fleet", ".");
  ASSERT_TRUE(fleet.ok()) << fleet.status().message();
  auto base = parse_workload(
      "model: {shape: stories15M}\nrate: 1\nrequests: 100\ninput: {fixed: 64}\noutput: "
      "{fixed: 32}\n",
      "workload", ".");
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto slo = parse_slo("ttft_ms: 400\ntpot_ms: 40\n", "slo");
  ASSERT_TRUE(slo.ok());
  auto best_for = [&](double rate, double in, double out) {
    LiveMetrics live;
    live.rate = rate;
    live.mean_input = in;
    live.mean_output = out;
    auto w = observed_workload(*base, live, {});
    EXPECT_TRUE(w.ok()) << w.status().message();
    Evaluator e = simulator_evaluator(*fleet, *w, *slo);
    std::map<std::string, double> g;
    Placement best;
    double best_obj = -1;
    for (const Placement& p : candidate_placements(*fleet, PlannerPolicy{}, {{1, 2, 0}})) {
      auto r = e(p);
      if (!r.ok()) continue;
      if (objective(*fleet, *r) > best_obj) best_obj = objective(*fleet, *r), best = p;
    }
    return best;
  };
  const Placement long_prompts = best_for(3, 480, 4);
  const Placement long_answers = best_for(3, 8, 200);
  ASSERT_EQ(long_prompts.size(), 1u);
  ASSERT_EQ(long_answers.size(), 1u);
  EXPECT_GE(long_prompts[0].prefill + long_prompts[0].both, long_answers[0].prefill + long_answers[0].both)
      << describe_placement(*fleet, long_prompts) << " vs " << describe_placement(*fleet, long_answers);
  EXPECT_NE(long_prompts, long_answers) << describe_placement(*fleet, long_prompts);
  // Bad metrics are a clear error, not a NaN workload.
  LiveMetrics nan;
  nan.rate = std::nan("");
  EXPECT_FALSE(observed_workload(*base, nan, {}).ok());
}

}  // namespace
}  // namespace tessera::solver
