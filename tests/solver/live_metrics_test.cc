// Live metrics from Prometheus text, and the workload re-made for them (re-placement inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "solver/live_metrics.h"
#include "solver/watch.h"

namespace tessera::solver {
namespace {

TEST(LiveMetrics, ParsesSamplesWithLabelsCommentsAndTimestamps) {
  auto s = parse_prometheus(
      "# HELP x help text {with braces}\n# TYPE x counter\nx 3\n"
      "y{a=\"1\",b=\"has } and , inside\"} 2.5 1700000000000\n\n"
      "tessera_router_node_healthy{node=\"http://h:1\"} 1\ntessera_router_node_healthy{node=\"http://h:2\"} 0\n");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->at("x"), 3);
  EXPECT_EQ(s->at("y{a=\"1\",b=\"has } and , inside\"}"), 2.5);
  EXPECT_EQ(label_values(*s, "tessera_router_node_healthy", "node"),
            (std::vector<std::string>{"http://h:1", "http://h:2"}));
}

TEST(LiveMetrics, MalformedLinesAreErrorsNamingTheLine) {
  auto a = parse_prometheus("x 1\ny{a=\"1\" 2\n");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("line 2"), std::string::npos) << a.status().message();
  auto b = parse_prometheus("x one\n");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("'one' is not a number"), std::string::npos);
  EXPECT_FALSE(parse_prometheus("lonely_name\n").ok());
}

PromSamples node(double requests, double c10ms, double c100ms, double inf) {
  return {{"tessera_requests_total{endpoint=\"completions\",model=\"m\",status=\"200\"}", requests},
          {"tessera_requests_total{endpoint=\"completions\",model=\"m\",status=\"429\"}", 99},
          {"tessera_prompt_tokens_total{model=\"m\"}", requests * 100},
          {"tessera_generation_tokens_total{model=\"m\"}", requests * 20},
          {"tessera_time_to_first_token_seconds_bucket{model=\"m\",le=\"0.01\"}", c10ms},
          {"tessera_time_to_first_token_seconds_bucket{model=\"m\",le=\"0.1\"}", c100ms},
          {"tessera_time_to_first_token_seconds_bucket{model=\"m\",le=\"+Inf\"}", inf},
          {"tessera_inter_token_latency_seconds_sum{model=\"m\"}", requests * 19 * 0.005},
          {"tessera_inter_token_latency_seconds_count{model=\"m\"}", requests * 19}};
}

TEST(LiveMetrics, AWindowBetweenTwoScrapesOfTwoNodes) {
  // Over the window: 20 requests in 10 s on two nodes; TTFT: 10 within 10 ms, 10 in (10, 100] ms.
  ServingCounters a = serving_counters({node(5, 5, 5, 5), node(5, 5, 5, 5)});
  ServingCounters b = serving_counters({node(15, 10, 15, 15), node(15, 10, 15, 15)});
  EXPECT_EQ(b.requests, 30);  // the 429s are not counted
  Slo slo{0.055, 0.05, 90, 0.9};
  auto m = window_metrics(a, b, 10, slo);
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->rate, 2.0);
  EXPECT_DOUBLE_EQ(m->mean_input, 100);
  EXPECT_DOUBLE_EQ(m->mean_output, 20);
  EXPECT_NEAR(m->tpot_s, 0.005, 1e-12);
  // p90 of 20: the 18th observation; 10 are <= 10 ms, the other 10 spread over (10, 100]: 10 + 8/10 * 90 = 82.
  EXPECT_NEAR(m->ttft_s, 0.082, 1e-9);
  // Within 55 ms: 10 + 10 * 45/90 = 15 of 20.
  EXPECT_NEAR(m->attainment, 0.75, 1e-9);
  EXPECT_FALSE(window_metrics(a, a, 10, slo).ok());  // nothing finished
}

// A node's /metrics is untrusted input: NaN, negative, huge or mislabelled samples are ignored, so the
// window stays the one the sane samples describe instead of NaN or inf.
TEST(LiveMetrics, InsaneSamplesFromANodeAreIgnored) {
  PromSamples rogue = node(1e300, -3, std::nan(""), std::numeric_limits<double>::infinity());
  rogue["tessera_time_to_first_token_seconds_bucket{model=\"m\",le=\"banana\"}"] = 4;
  rogue["tessera_time_to_first_token_seconds_bucket{model=\"m\",le=\"nan\"}"] = 4;
  rogue["tessera_prompt_tokens_total{model=\"m\"}"] = -1e9;
  ServingCounters a = serving_counters({node(5, 5, 5, 5), rogue});
  ServingCounters b = serving_counters({node(15, 10, 15, 15), rogue});
  Slo slo{0.055, 0.05, 90, 0.9};
  auto m = window_metrics(a, b, 10, slo);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_DOUBLE_EQ(m->rate, 1.0);  // the sane node's 10 requests in 10 s
  EXPECT_DOUBLE_EQ(m->mean_input, 100);
  EXPECT_TRUE(std::isfinite(m->ttft_s));
  EXPECT_TRUE(std::isfinite(m->attainment));
  EXPECT_TRUE(std::isfinite(m->tpot_s));
}

TEST(LiveMetrics, ThePercentileBeyondTheLastBoundReadsAsThatBound) {
  ServingCounters a = serving_counters({node(0, 0, 0, 0)});
  ServingCounters b = serving_counters({node(10, 0, 0, 10)});
  EXPECT_DOUBLE_EQ(histogram_percentile(a.ttft, b.ttft, 90), 0.1);
  EXPECT_DOUBLE_EQ(histogram_fraction_below(a.ttft, b.ttft, 5.0), 0.0);
}

TEST(LiveMetrics, TheObservedWorkloadStretchesArrivalsAndScalesLengths) {
  Workload w;
  w.model.config.dim = 64;
  w.model.config.hidden_dim = 172;
  w.model.config.n_layers = 2;
  w.model.config.n_heads = 8;
  w.model.config.n_kv_heads = 4;
  w.model.config.head_dim = 8;
  w.model.config.vocab_size = 512;
  w.model.config.max_seq_len = 512;
  w.rate = 4;
  w.arrival = "uniform";
  w.requests = 40;
  w.input = {LengthDist::Kind::kFixed, 100, 0, 100, 100};
  w.output = {LengthDist::Kind::kFixed, 20, 0, 20, 20};
  Fleet f;
  Pool pool;
  pool.name = "a";
  pool.count = 1;
  pool.cost_per_hour = 1;
  pool.profile = profile_from_datasheet("a", Datasheet{1e12, 1e11, 1e9, 0, 1e9});
  f.pools.push_back(pool);
  auto p = Problem::make(f, w, Slo{1, 0.1, 90, 0.9});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  LiveMetrics live;
  live.rate = 8;
  live.mean_input = 150;
  live.mean_output = 10;
  auto o = observed_problem(*p, live);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  ASSERT_EQ(o->requests.size(), p->requests.size());
  EXPECT_DOUBLE_EQ(o->rate, 8);
  EXPECT_NEAR(o->requests.back().arrival_s, p->requests.back().arrival_s / 2, 1e-9);
  EXPECT_EQ(o->requests[3].input_tokens, 150);
  EXPECT_EQ(o->requests[3].output_tokens, 10);
  live.rate = 0;
  EXPECT_FALSE(observed_problem(*p, live).ok());
}

}  // namespace
}  // namespace tessera::solver
