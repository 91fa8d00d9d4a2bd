// The simulator on cases small enough to work out by hand. The toy model costs exactly 1 FLOP per token
// and 1 KV byte per token with no weight traffic, so on an instance computing 1000 FLOP/s a step of n
// tokens takes overhead + n ms.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "solver/simulator.h"

namespace tessera::solver {
namespace {

ModelCost toy_cost() {
  ModelCost c;
  c.layer_matmul_params = 0.5;  // 2 * 0.5 * 1 layer = 1 FLOP per token
  c.n_layers = 1;
  c.dim = 1;
  c.kv_bytes_per_token = 1;
  return c;
}

SimInstance toy(Role role, int max_batch = 64, double kv = 1e9) {
  SimInstance s;
  s.pool = "toy";
  s.role = role;
  s.max_batch = max_batch;
  s.latency = {0.01, 1000, 1e30};
  s.network_bandwidth = 1000;  // 100 tokens of KV move in 0.1 s
  s.kv_capacity_tokens = kv;
  return s;
}

SimConfig config(std::vector<SimInstance> inst, int budget = 100000) {
  SimConfig c;
  c.cost = toy_cost();
  c.instances = std::move(inst);
  c.token_budget = budget;
  return c;
}

RequestOutcome one(const SimConfig& c, Request r) {
  auto res = simulate(c, {r});
  EXPECT_TRUE(res.ok()) << res.status().to_string();
  return res->requests[0];
}

// A 100-token prompt with 11 tokens out on a colocated instance, alone and then two at once: its TTFT and
// TPOT alone, and both requests' TPOT when they decode together.
void expect_alone_and_paired(const SimConfig& c, double ttft, double tpot_alone, double tpot_paired) {
  RequestOutcome o = one(c, {0, 100, 11});
  EXPECT_NEAR(o.ttft_s, ttft, 1e-12);
  EXPECT_NEAR(o.tpot_s, tpot_alone, 1e-12);
  auto two = simulate(c, {{0, 100, 11}, {0, 100, 11}});
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  for (const auto& r : two->requests) EXPECT_NEAR(r.tpot_s, tpot_paired, 1e-12);
}

TEST(Simulator, SingleRequestColocated) {
  // Prefill: 10 ms + 100 ms. Then 10 decode steps of 10 ms + 1 ms.
  RequestOutcome o = one(config({toy(Role::kBoth)}), {0, 100, 11});
  ASSERT_TRUE(o.served);
  EXPECT_NEAR(o.ttft_s, 0.110, 1e-12);
  EXPECT_NEAR(o.tpot_s, 0.011, 1e-12);
  EXPECT_NEAR(o.e2e_s, 0.220, 1e-12);
}

TEST(Simulator, ChunkedPrefillSplitsThePrompt) {
  // Budget 40: chunks of 40, 40, 20 tokens = 50 + 50 + 30 ms.
  RequestOutcome o = one(config({toy(Role::kBoth)}, 40), {0, 100, 1});
  EXPECT_NEAR(o.ttft_s, 0.130, 1e-12);
  EXPECT_NEAR(o.e2e_s, 0.130, 1e-12);
  EXPECT_EQ(o.tpot_s, 0);
}

TEST(Simulator, QueueingDelayOfAnOverloadedServer) {
  // One slot, service 110 ms, arrivals every 50 ms: request k starts at k * 110 ms, so its TTFT is
  // (k + 1) * 110 - k * 50 ms.
  std::vector<Request> reqs;
  for (int k = 0; k < 5; ++k) reqs.push_back({k * 0.05, 100, 1});
  auto res = simulate(config({toy(Role::kBoth, 1)}), reqs);
  ASSERT_TRUE(res.ok());
  for (int k = 0; k < 5; ++k) EXPECT_NEAR(res->requests[k].ttft_s, (k + 1) * 0.110 - k * 0.05, 1e-9) << k;
}

TEST(Simulator, ContinuousBatchingSharesSteps) {
  // Both prompts in one 200-token step (210 ms), then 10 steps of 2 tokens (12 ms each).
  auto res = simulate(config({toy(Role::kBoth)}), {{0, 100, 11}, {0, 100, 11}});
  ASSERT_TRUE(res.ok());
  for (const auto& o : res->requests) {
    EXPECT_NEAR(o.ttft_s, 0.210, 1e-12);
    EXPECT_NEAR(o.tpot_s, 0.012, 1e-12);
  }
}

TEST(Simulator, DisaggregatedPaysTheKvTransfer) {
  // Prefill 110 ms; 100 KV bytes over 1000 B/s = 100 ms; the first token reaches the client from the
  // decode instance once the KV is there (210 ms); then 10 decode steps of 11 ms.
  RequestOutcome o = one(config({toy(Role::kPrefill), toy(Role::kDecode)}), {0, 100, 11});
  ASSERT_TRUE(o.served);
  EXPECT_EQ(o.prefill_instance, 0);
  EXPECT_EQ(o.decode_instance, 1);
  EXPECT_NEAR(o.ttft_s, 0.110 + 0.100, 1e-12);
  EXPECT_NEAR(o.e2e_s, 0.110 + 0.100 + 0.110, 1e-12);
  EXPECT_NEAR(o.tpot_s, 0.110 / 10, 1e-12);
  // A request overhead (HTTP hops) adds to TTFT and E2E, not to TPOT.
  SimConfig c = config({toy(Role::kPrefill), toy(Role::kDecode)});
  c.request_overhead_s = 0.005;
  RequestOutcome h = one(c, {0, 100, 11});
  EXPECT_NEAR(h.ttft_s, 0.215, 1e-12);
  EXPECT_NEAR(h.e2e_s, 0.325, 1e-12);
  EXPECT_NEAR(h.tpot_s, 0.011, 1e-12);
}

TEST(Simulator, PerTokenServingWorkLengthensEachStepPerDecodingSequence) {
  // 2 ms of serving work per streamed token: one sequence's decode steps take 11 + 2 ms, two sequences'
  // 12 + 2 * 2 ms. Prefill-only steps (no decoding sequence) are unchanged.
  SimConfig c = config({toy(Role::kBoth)});
  c.token_overhead_s = 0.002;
  expect_alone_and_paired(c, 0.110, 0.013, 0.016);
  c.token_overhead_s = -1;
  EXPECT_FALSE(simulate(c, {{0, 100, 11}}).ok());
}

TEST(Simulator, StreamStartCostWeighsOnShortAnswersOnly) {
  // 20 ms once per stream, steps of 11 ms: 11 tokens -> TPOT (110 + 20) / 10 ms; 101 tokens -> (1100 + 20) / 100.
  SimConfig c = config({toy(Role::kBoth)});
  c.stream_start_overhead_s = 0.020;
  EXPECT_NEAR(one(c, {0, 100, 11}).tpot_s, 0.013, 1e-12);
  EXPECT_NEAR(one(c, {0, 100, 11}).ttft_s, 0.110, 1e-12) << "not part of TTFT";
  EXPECT_NEAR(one(c, {0, 100, 101}).tpot_s, 0.0112, 1e-12);
  EXPECT_NEAR(one(c, {0, 100, 1}).e2e_s, 0.110, 1e-12) << "a one-token answer has no stream to start";
}

TEST(Simulator, MeasuredOverheadSamplesSpreadOverTheRequestsDeterministically) {
  // Requests far apart, each alone: TTFT = 110 ms + its overhead sample. Every sample is used in turn
  // (a golden-ratio walk over the sorted samples), the same way on every run.
  SimConfig c = config({toy(Role::kBoth)});
  c.request_overhead_samples_s = {0.009, 0.001, 0.005, 0.003};
  std::vector<Request> reqs;
  for (int k = 0; k < 40; ++k) reqs.push_back({k * 10.0, 100, 1});
  auto a = simulate(c, reqs);
  auto b = simulate(c, reqs);
  ASSERT_TRUE(a.ok() && b.ok());
  std::map<long, int> seen;
  for (size_t k = 0; k < reqs.size(); ++k) {
    EXPECT_EQ(a->requests[k].ttft_s, b->requests[k].ttft_s);
    seen[std::lround((a->requests[k].ttft_s - 0.110) * 1e6)]++;
  }
  ASSERT_EQ(seen.size(), 4u) << "every sample is drawn";
  for (auto [us, n] : seen) EXPECT_GE(n, 8) << us << " us drawn " << n << " times of 40";
  c.request_overhead_samples_s = {0.001, -0.002};
  EXPECT_FALSE(simulate(c, reqs).ok());
}

TEST(Simulator, ARequestArrivingWhileItsDecoderDecodesDrawsTheBusySamples) {
  // Request 0 decodes from 110 ms to 220 ms; request 1 arrives at 150 ms (busy), request 2 at 10 s (idle).
  SimConfig c = config({toy(Role::kBoth)});
  c.request_overhead_samples_s = {0.001};
  c.request_overhead_busy_samples_s = {0.050};
  auto res = simulate(c, {{0, 100, 11}, {0.150, 10, 2}, {10, 100, 11}});
  ASSERT_TRUE(res.ok());
  EXPECT_NEAR(res->requests[0].ttft_s, 0.111, 1e-9);
  EXPECT_GT(res->requests[1].ttft_s, 0.050);
  EXPECT_NEAR(res->requests[2].ttft_s, 0.111, 1e-9);
  // Disaggregated: the decode instance's state counts, not the prefill instance's.
  SimConfig d = config({toy(Role::kPrefill), toy(Role::kDecode)});
  d.request_overhead_samples_s = {0.001};
  d.request_overhead_busy_samples_s = {0.050};
  auto pd = simulate(d, {{0, 100, 11}, {0.250, 10, 2}, {10, 100, 11}});
  ASSERT_TRUE(pd.ok());
  EXPECT_NEAR(pd->requests[0].ttft_s, 0.211, 1e-9);
  EXPECT_GT(pd->requests[1].ttft_s, 0.050) << "request 0 decodes from 210 to 320 ms";
  EXPECT_NEAR(pd->requests[2].ttft_s, 0.211, 1e-9);
}

TEST(Simulator, MeasuredDecodePointsReplaceTheModelForDecodeSteps) {
  // The toy model's decode step is 11 ms; measured points say 4 ms for one sequence at any context, so
  // the 10 decode steps take 40 ms while the prefill step keeps the model's 110 ms.
  SimConfig c = config({toy(Role::kBoth)});
  c.instances[0].decode_points = {{1, 8, 0.004}, {1, 512, 0.004}, {2, 8, 0.006}, {2, 512, 0.006}};
  expect_alone_and_paired(c, 0.110, 0.004, 0.006);
}

TEST(Simulator, MeasuredPrefillPointsReplaceTheModelForPrefillSteps) {
  // The toy model's 100-token prefill step is 110 ms; measured points say 50 ms at 100 tokens (between
  // 30 ms at 50 and 90 ms at 200). Decode steps keep the model's 11 ms.
  SimConfig c = config({toy(Role::kBoth)});
  c.instances[0].prefill_points = {{50, 1, 0.030}, {200, 1, 0.090}};
  RequestOutcome o = one(c, {0, 100, 11});
  EXPECT_NEAR(o.ttft_s, 0.050, 1e-12);
  EXPECT_NEAR(o.tpot_s, 0.011, 1e-12);
  // Two prompts in one step: 200 tokens read 90 ms (the toy model prices no attention, so several
  // prompts cost what one prompt of their tokens does).
  auto two = simulate(c, {{0, 100, 1}, {0, 100, 1}});
  ASSERT_TRUE(two.ok());
  for (const auto& r : two->requests) EXPECT_NEAR(r.ttft_s, 0.090, 1e-12);
  c.instances[0].prefill_points = {{50, 2, 0.030}};
  EXPECT_EQ(simulate(c, {{0, 100, 11}}).status().code(), StatusCode::kInvalidArgument) << "no single-prompt point";
}

TEST(Simulator, ColocatedInstancesSlowEachOthersSteps) {
  // Slowdown 0.5. Request 0 prefills alone (110 ms), its KV arrives at 210 ms and it decodes 10 steps of
  // 11 ms from there, alone. Request 1 arrives at 300 ms, during step 9 (298-309): its prefill starts while
  // the decode instance is mid-step, so it takes 165 ms (to 465), and step 10 starts while that prefill
  // runs: 16.5 ms, done at 325.5 ms. Request 1's KV arrives at 565 ms; its decode step starts alone.
  SimConfig c = config({toy(Role::kPrefill), toy(Role::kDecode)});
  c.colocated_slowdown = 0.5;
  auto res = simulate(c, {{0, 100, 11}, {0.300, 100, 2}});
  ASSERT_TRUE(res.ok());
  EXPECT_NEAR(res->requests[0].ttft_s, 0.210, 1e-12);
  EXPECT_NEAR(res->requests[0].e2e_s, 0.3255, 1e-12);
  EXPECT_NEAR(res->requests[1].ttft_s, 0.265, 1e-12);
  EXPECT_NEAR(res->requests[1].e2e_s, 0.276, 1e-12);
  c.colocated_slowdown = -0.1;
  EXPECT_FALSE(simulate(c, {{0, 100, 2}}).ok());
}

TEST(Simulator, TransfersShareTheLink) {
  // Both prompts prefill in one step (210 ms); the second transfer waits for the first (link busy).
  auto res = simulate(config({toy(Role::kPrefill), toy(Role::kDecode)}), {{0, 100, 2}, {0, 100, 2}});
  ASSERT_TRUE(res.ok());
  // First: transfer ends at 310 ms, one decode step of 11 ms -> 321 ms. Second: transfer ends at 410 ms.
  EXPECT_NEAR(res->requests[0].e2e_s, 0.321, 1e-12);
  EXPECT_NEAR(res->requests[1].e2e_s, 0.421, 1e-12);
}

TEST(Simulator, TheFirstTokenWaitsForTheDecodeStepInFlight) {
  // Both prompts prefill in one step (210 ms); transfers end at 310 and 410 ms. The first request decodes
  // 10 steps of 11 ms from 310 ms (to 420 ms); the second request's KV arrives during the step that started
  // at 409 ms, so it joins, and its first token goes out, at 420 ms; one more step ends it at 431 ms.
  auto res = simulate(config({toy(Role::kPrefill), toy(Role::kDecode)}), {{0, 100, 11}, {0, 100, 2}});
  ASSERT_TRUE(res.ok());
  EXPECT_NEAR(res->requests[0].ttft_s, 0.310, 1e-12);
  EXPECT_NEAR(res->requests[0].e2e_s, 0.420, 1e-12);
  EXPECT_NEAR(res->requests[1].ttft_s, 0.420, 1e-12);
  EXPECT_NEAR(res->requests[1].e2e_s, 0.431, 1e-12);
}

TEST(Simulator, KvCapacityLimitsConcurrencyAndRejectsWhatNeverFits) {
  // 150 tokens of KV: the second 111-token request waits until the first finishes at 220 ms.
  auto res = simulate(config({toy(Role::kBoth, 8, 150)}), {{0, 100, 11}, {0, 100, 11}, {0, 140, 20}});
  ASSERT_TRUE(res.ok());
  EXPECT_NEAR(res->requests[0].ttft_s, 0.110, 1e-12);
  EXPECT_NEAR(res->requests[1].ttft_s, 0.330, 1e-12);
  EXPECT_FALSE(res->requests[2].served);  // 160 tokens never fit
  Slo slo{1.0, 1.0, 90, 0.5};
  SloReport rep = summarize(*res, slo, 3.0);
  EXPECT_EQ(rep.unserved, 1);
  EXPECT_NEAR(rep.attainment, 2.0 / 3, 1e-12);
  EXPECT_NEAR(rep.goodput, 2.0, 1e-12);
  EXPECT_FALSE(rep.meets_slo);  // p90 TTFT is the unserved request's (infinite)
}

TEST(Simulator, AHybridModelsStateTakesCapacityAndTravelsWithTheKv) {
  // A recurrent state of 30 bytes is 30 positions at the toy's 1 KV byte each: 100 + 11 + 30 fit 150 positions,
  // 110 + 20 + 30 never do (without the state both fit).
  SimConfig c = config({toy(Role::kBoth, 8, 150)});
  c.cost.state_bytes = 30;
  auto res = simulate(c, {{0, 100, 11}, {0, 110, 20}});
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_TRUE(res->requests[0].served);
  EXPECT_FALSE(res->requests[1].served);
  c.cost.state_bytes = 0;
  res = simulate(c, {{0, 100, 11}, {0, 110, 20}});
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_TRUE(res->requests[0].served && res->requests[1].served);
  // Disaggregated: 100 KV bytes and the 30 of state cross the 1000 B/s link (130 ms) after the 110 ms prefill.
  SimConfig d = config({toy(Role::kPrefill), toy(Role::kDecode)});
  d.cost.state_bytes = 30;
  EXPECT_NEAR(one(d, {0, 100, 11}).ttft_s, 0.110 + 0.130, 1e-12);
}

TEST(Simulator, LeastLoadedSpreadsAndRoundRobinAlternates) {
  std::vector<Request> reqs = {{0, 100, 1}, {0, 100, 1}, {0, 100, 1}, {0, 100, 1}};
  auto ll = simulate(config({toy(Role::kBoth, 1), toy(Role::kBoth, 1)}), reqs);
  ASSERT_TRUE(ll.ok());
  EXPECT_EQ(ll->requests[0].prefill_instance, 0);
  EXPECT_EQ(ll->requests[1].prefill_instance, 1);
  EXPECT_NEAR(ll->requests[3].ttft_s, 0.220, 1e-12);
  SimConfig rr = config({toy(Role::kBoth, 1), toy(Role::kBoth, 1)});
  rr.router = RouterPolicy::kRoundRobin;
  auto r = simulate(rr, reqs);
  ASSERT_TRUE(r.ok());
  for (int k = 0; k < 4; ++k) EXPECT_EQ(r->requests[k].prefill_instance, k % 2);
}

TEST(Simulator, SummaryPercentilesAndSloVerdict) {
  std::vector<Request> reqs;
  for (int k = 0; k < 10; ++k) reqs.push_back({k * 1.0, 100, 11});  // no queueing: all identical
  auto res = simulate(config({toy(Role::kBoth)}), reqs);
  ASSERT_TRUE(res.ok());
  SloReport ok = summarize(*res, {0.2, 0.02, 90, 0.9}, offered_rate(reqs));
  EXPECT_NEAR(ok.offered_rate, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(ok.attainment, 1.0);
  EXPECT_TRUE(ok.meets_slo);
  EXPECT_NEAR(ok.ttft.p90, 0.110, 1e-12);
  SloReport tight = summarize(*res, {0.1, 0.02, 90, 0.9}, 1.0);
  EXPECT_DOUBLE_EQ(tight.attainment, 0.0);
  EXPECT_FALSE(tight.meets_slo);
}

TEST(Simulator, DeterministicAndRejectsBadConfigs) {
  std::vector<Request> reqs;
  for (int k = 0; k < 50; ++k) reqs.push_back({k * 0.013, 50 + (k * 37) % 200, 1 + (k * 11) % 30});
  SimConfig c = config({toy(Role::kPrefill), toy(Role::kDecode, 4), toy(Role::kBoth, 3)}, 128);
  auto a = simulate(c, reqs), b = simulate(c, reqs);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_TRUE(a->requests[i].served);
    EXPECT_EQ(a->requests[i].e2e_s, b->requests[i].e2e_s);
  }
  EXPECT_FALSE(simulate(config({toy(Role::kDecode)}), reqs).ok());
  EXPECT_FALSE(simulate(config({toy(Role::kPrefill)}), reqs).ok());
  EXPECT_FALSE(simulate(config({toy(Role::kBoth, 0)}), reqs).ok());
  EXPECT_FALSE(simulate(config({toy(Role::kBoth)}), {{1, 1, 1}, {0, 1, 1}}).ok());
  EXPECT_FALSE(router_policy_from_name("random").ok());
  EXPECT_EQ(role_from_name("decode").value(), Role::kDecode);
}

TEST(Simulator, StopsInsteadOfRunningForever) {
  SimConfig c = config({toy(Role::kBoth)}, 16);
  c.max_steps = 1000;
  auto res = simulate(c, {{0, 100000, 100000}});  // ~106k steps
  EXPECT_EQ(res.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(res.status().message().find("too large to simulate"), std::string::npos);
}

}  // namespace
}  // namespace tessera::solver
