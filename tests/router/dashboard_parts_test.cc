// The dashboard's pure parts: LiveStats' per-second ring (injected clock), the planner history reader
// against the contract's JSON and against malformed values, and the node report readers (/health JSON,
// Prometheus text) against what serve/ writes and what a rogue node could send.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "router/dashboard/node_report.h"
#include "router/dashboard/planner_view.h"
#include "router/live_stats.h"
#include "solver/planner.h"

namespace tessera::router {
namespace {

using json = nlohmann::json;

class ManualClock final : public Clock {
 public:
  int64_t now_ns() const override { return ns; }
  void set_s(double s) { ns = static_cast<int64_t>(s * 1e9); }
  int64_t ns = 0;
};

TEST(LiveStats, PerSecondMeansMaxesAndIdleSecondsAsZeros) {
  ManualClock clock;
  LiveStats live(clock, 10);
  clock.set_s(100.2);
  live.record({0.010, 0.002, 20, true});
  live.record({0.030, 0.004, 10, true});
  clock.set_s(100.9);
  live.record({-1, -1, 5, false});  // a failed or whole answer: counted, no TTFT/TPOT
  clock.set_s(102.5);
  live.record({0.050, -1, 1, true});
  clock.set_s(103.1);  // seconds 100..102 are complete; 103 is not reported yet
  auto s = live.last(4);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].second, 99);
  EXPECT_EQ(s[0].requests, 0);
  EXPECT_EQ(s[1].second, 100);
  EXPECT_EQ(s[1].requests, 3);
  EXPECT_EQ(s[1].errors, 1);
  EXPECT_EQ(s[1].output_tokens, 35);
  EXPECT_EQ(s[1].ttft_count, 2);
  EXPECT_DOUBLE_EQ(s[1].ttft_mean_s, 0.020);
  EXPECT_DOUBLE_EQ(s[1].ttft_max_s, 0.030);
  EXPECT_DOUBLE_EQ(s[1].tpot_mean_s, 0.003);
  EXPECT_DOUBLE_EQ(s[1].tpot_max_s, 0.004);
  EXPECT_EQ(s[2].second, 101);
  EXPECT_EQ(s[2].requests, 0);  // idle second, filled in
  EXPECT_EQ(s[3].second, 102);
  EXPECT_EQ(s[3].ttft_count, 1);
  EXPECT_EQ(s[3].tpot_count, 0);
  EXPECT_DOUBLE_EQ(s[3].ttft_mean_s, 0.050);
}

TEST(LiveStats, OldSecondsAreOverwrittenNotMixedIn) {
  ManualClock clock;
  LiveStats live(clock, 5);
  clock.set_s(10.5);
  live.record({0.1, 0.01, 7, true});
  clock.set_s(15.5);  // the same slot (15 % 5 == 10 % 5): second 10 must not leak into 15
  live.record({0.2, 0.02, 3, true});
  clock.set_s(16.0);
  auto s = live.last(100);  // at most the capacity
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s.back().second, 15);
  EXPECT_EQ(s.back().requests, 1);
  EXPECT_EQ(s.back().output_tokens, 3);
  EXPECT_EQ(s.front().second, 11);
  EXPECT_EQ(s.front().requests, 0);
  clock.set_s(30.0);  // far later: everything older than the window reads as empty
  for (const auto& x : live.last(5)) EXPECT_EQ(x.requests, 0) << x.second;
}

const char* kPlannerExample = R"({"updated_ms":1700000005000,"state":"acting","reason":"decode queue grew",
  "decisions":[{"ts_ms":1700000000000,"action":"keep","node":"","from":"","to":"","reason":"within SLO",
                "predicted_gain":0,"applied":false},
               {"ts_ms":1700000004000,"action":"re-role","node":"prefill-0","from":"prefill","to":"decode",
                "reason":"long answers","predicted_gain":0.23,"applied":true}]})";

TEST(PlannerView, ReadsTheContractsJson) {
  json p = parse_planner_history(kPlannerExample);
  ASSERT_EQ(p["status"], "ok") << p.dump();
  EXPECT_EQ(p["state"], "acting");
  EXPECT_EQ(p["reason"], "decode queue grew");
  EXPECT_EQ(p["updated_ms"], 1700000005000);
  ASSERT_EQ(p["decisions"].size(), 2u);
  const json& d = p["decisions"][1];
  EXPECT_EQ(d["action"], "re-role");
  EXPECT_EQ(d["node"], "prefill-0");
  EXPECT_EQ(d["from"], "prefill");
  EXPECT_EQ(d["to"], "decode");
  EXPECT_DOUBLE_EQ(d["predicted_gain"].get<double>(), 0.23);
  EXPECT_EQ(d["applied"], true);
  EXPECT_EQ(p["dropped"], 0);
}

// What the planner itself writes (solver::history_json), not only the contract's example: every decision kind
// it makes must reach the page.
TEST(PlannerView, ReadsWhatThePlannerWrites) {
  solver::PlannerState state;
  state.state = "acting";
  state.reason = "prompts grew longer";
  auto decision = [](int64_t ts, std::string action, std::string node, std::string from, std::string to) {
    solver::Decision d;
    d.ts_ms = ts;
    d.action = std::move(action);
    d.node = std::move(node);
    d.from = std::move(from);
    d.to = std::move(to);
    d.reason = "why";
    d.predicted_gain = 0.1;
    d.applied = true;
    return d;
  };
  state.history.push_back(decision(1, "keep", "", "cpu 1 prefill + 2 decode", "cpu 1 prefill + 2 decode"));
  state.history.push_back(decision(2, "re-role", "decode-1", "decode", "prefill"));
  state.history.push_back(decision(3, "scale-out", "prefill-1", "none", "prefill"));
  state.history.push_back(decision(4, "scale-in", "decode-0", "decode", "none"));
  json p = parse_planner_history(solver::history_json(state, 1700000000000));
  ASSERT_EQ(p["status"], "ok") << p.dump();
  EXPECT_EQ(p["dropped"], 0);
  ASSERT_EQ(p["decisions"].size(), 4u);
  EXPECT_EQ(p["decisions"][0]["from"], "cpu 1 prefill + 2 decode");
  EXPECT_EQ(p["decisions"][2]["from"], "none");
  EXPECT_EQ(p["decisions"][3]["action"], "scale-in");
}

TEST(PlannerView, RefusesMalformedValuesByName) {
  auto error_of = [](const std::string& v) {
    json p = parse_planner_history(v);
    EXPECT_EQ(p["status"], "invalid") << v;
    return p.value("error", std::string());
  };
  EXPECT_NE(error_of("not json").find("not JSON"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"updated_ms":"soon","state":"acting","decisions":[]})").find("updated_ms"), std::string::npos);
  EXPECT_NE(error_of(R"({"updated_ms":1,"state":"panicking","decisions":[]})").find("panicking"), std::string::npos);
  EXPECT_NE(error_of(R"({"updated_ms":1,"state":"off","decisions":{}})").find("decisions"), std::string::npos);
  EXPECT_NE(
      error_of(fmt::format(R"({{"updated_ms":1,"state":"off","reason":"{}","decisions":[]}})", std::string(5000, 'x')))
          .find("reason"),
      std::string::npos);
}

TEST(PlannerView, DropsUnreadableDecisionsAndKeepsTheNewest) {
  json v = {{"updated_ms", 5}, {"state", "holding"}, {"decisions", json::array()}};
  v["decisions"].push_back({{"ts_ms", 1}, {"action", "explode"}});                          // unknown action
  v["decisions"].push_back({{"ts_ms", "x"}, {"action", "keep"}});                           // wrong type
  v["decisions"].push_back({{"ts_ms", 2}, {"action", "keep"}, {"predicted_gain", 1e300}});  // out of range
  v["decisions"].push_back({{"ts_ms", 3}, {"action", "scale-out"}, {"to", "decode"}});
  json p = parse_planner_history(v.dump());
  ASSERT_EQ(p["status"], "ok");
  ASSERT_EQ(p["decisions"].size(), 1u);
  EXPECT_EQ(p["decisions"][0]["action"], "scale-out");
  EXPECT_EQ(p["decisions"][0]["predicted_gain"], nullptr);
  EXPECT_EQ(p["dropped"], 3);

  json many = {{"updated_ms", 5}, {"state", "acting"}, {"decisions", json::array()}};
  for (size_t i = 0; i < kMaxPlannerDecisions + 20; ++i)
    many["decisions"].push_back({{"ts_ms", i}, {"action", "keep"}});
  p = parse_planner_history(many.dump());
  ASSERT_EQ(p["decisions"].size(), kMaxPlannerDecisions);
  EXPECT_EQ(p["decisions"].front()["ts_ms"], 20);  // the oldest 20 left out
  EXPECT_EQ(p["decisions"].back()["ts_ms"], kMaxPlannerDecisions + 19);
  EXPECT_EQ(p["dropped"], 20);
}

TEST(NodeReport, ReadsHealthAndIgnoresImplausibleFields) {
  NodeReport r;
  ASSERT_TRUE(parse_node_health(R"({"status":"ok","model":"m","backend":"cpu","device":"host CPU","waiting":2,
                                    "running":3,"kv_blocks_used":16,"kv_blocks_total":64})",
                                r)
                  .ok());
  EXPECT_EQ(r.backend, "cpu");
  EXPECT_EQ(r.device, "host CPU");
  EXPECT_EQ(r.kv_blocks_used, 16);
  EXPECT_EQ(r.kv_blocks_total, 64);
  EXPECT_EQ(r.waiting, 2);
  NodeReport bad;
  ASSERT_TRUE(
      parse_node_health(R"({"backend":7,"kv_blocks_used":-4,"kv_blocks_total":"many","running":1.5})", bad).ok());
  EXPECT_EQ(bad.backend, "");
  EXPECT_EQ(bad.kv_blocks_used, -1);
  EXPECT_EQ(bad.kv_blocks_total, -1);
  EXPECT_EQ(bad.running, -1);
  NodeReport more;  // more blocks used than exist: neither is believed
  ASSERT_TRUE(parse_node_health(R"({"kv_blocks_used":65,"kv_blocks_total":64})", more).ok());
  EXPECT_EQ(more.kv_blocks_total, -1);
  EXPECT_FALSE(parse_node_health("<html>", more).ok());
}

TEST(NodeReport, ReadsLinkCountersFromPrometheusText) {
  const std::string text =
      "# HELP tessera_pd_kv_bytes_total KV bytes received from prefill nodes\n"
      "# TYPE tessera_pd_kv_bytes_total counter\n"
      "tessera_pd_kv_bytes_total 3072\n"
      "tessera_pd_kv_bytes_from_total{prefill=\"http://127.0.0.1:1\"} 1024\n"
      "tessera_pd_kv_bytes_from_total{prefill=\"http://127.0.0.1:2\"} 2048\n"
      "tessera_pd_kv_bytes_from_total{prefill=\"http://q\\\"uote\\\\d\"} 5\n"
      "tessera_pd_kv_bytes_from_total{prefill=\"http://nan\"} NaN\n"
      "tessera_pd_kv_bytes_from_total{prefill=\"http://neg\"} -3\n"
      "tessera_pd_kv_bytes_from_total{prefill=\"unterminated} 9\n"
      "tessera_requests_total{model=\"m\",endpoint=\"chat\",status=\"200\"} 4\n"
      "tessera_prefix_cache_tier_hit_rate{connector=\"engine\",model=\"m\",tier=\"device\"} 0.25\n"
      "tessera_prefix_cache_tier_hit_rate{connector=\"host\",model=\"m\",tier=\"host\"} 0.5\n"
      "tessera_prefix_cache_tier_hit_rate{connector=\"host\",model=\"m\",tier=\"tape\"} 0.5\n"
      "tessera_prefix_cache_tier_hit_rate{connector=\"host\",model=\"m\",tier=\"disk\"} 7\n";
  NodeReport r;
  parse_node_metrics(text, r);
  EXPECT_EQ(r.tier_hit_rate, (std::map<std::string, double>{{"device", 0.25}, {"host", 0.5}}))
      << "known tiers only, rates within [0, 1]";
  EXPECT_DOUBLE_EQ(r.kv_bytes_received, 3072);
  ASSERT_EQ(r.kv_bytes_from.size(), 3u);
  EXPECT_DOUBLE_EQ(r.kv_bytes_from["http://127.0.0.1:1"], 1024);
  EXPECT_DOUBLE_EQ(r.kv_bytes_from["http://127.0.0.1:2"], 2048);
  EXPECT_DOUBLE_EQ(r.kv_bytes_from["http://q\"uote\\d"], 5);

  PromSample s;
  ASSERT_TRUE(parse_prom_line("tessera_requests_total{model=\"m\",endpoint=\"chat\"} 4", s));
  EXPECT_EQ(s.name, "tessera_requests_total");
  EXPECT_EQ(s.labels["endpoint"], "chat");
  EXPECT_DOUBLE_EQ(s.value, 4);
  EXPECT_FALSE(parse_prom_line("{x=\"1\"} 2", s));
  EXPECT_FALSE(parse_prom_line("name 12abc", s));
  EXPECT_FALSE(parse_prom_line("name{a=\"1\" 2", s));

  std::string flood;  // a node naming thousands of peers is believed for a bounded number of them
  for (int i = 0; i < 2000; ++i) flood += fmt::format("tessera_pd_kv_bytes_from_total{{prefill=\"p{}\"}} 1\n", i);
  NodeReport f;
  parse_node_metrics(flood, f);
  EXPECT_EQ(f.kv_bytes_from.size(), 256u);
}

}  // namespace
}  // namespace tessera::router
