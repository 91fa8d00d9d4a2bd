// Health rules with a fake clock: no sleeping.
#include <gtest/gtest.h>

#include "router/health.h"
#include "router/node_registry.h"

namespace tessera::router {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(Health, NewNodeIsHealthyAndProbedAtOnce) {
  ManualClock clock;
  HealthTracker h(clock, {});
  h.add("a");
  EXPECT_TRUE(h.healthy("a"));
  EXPECT_EQ(h.due_probes(), std::vector<std::string>{"a"});
  EXPECT_TRUE(h.due_probes().empty());  // a probe is running: not twice
}

// The default promise: a node that dies is out of rotation within 3 s, with no traffic at all, even when
// it dies right after a good probe and its probes hang until their timeout.
TEST(Health, DeadNodeOutOfRotationWithin3sByDefault) {
  for (int64_t death_ms : {0, 1, 499, 999}) {
    ManualClock clock;
    HealthTracker h(clock, {});
    const HealthOptions o = h.options();
    h.add("a");
    ASSERT_EQ(h.due_probes().size(), 1u);
    h.probe_result("a", true);  // at t = 0
    const int64_t death = death_ms * kMs;
    int64_t ejected_at = -1;
    // Step the clock 10 ms at a time; each due probe hangs for the full timeout and then fails.
    std::vector<int64_t> pending;  // completion times of running probes
    for (int64_t t = 0; t <= 10'000 * kMs && ejected_at < 0; t += 10 * kMs) {
      clock.advance_ns(t - clock.now_ns());
      for (auto it = pending.begin(); it != pending.end();) {
        if (*it <= t) {
          h.probe_result("a", false);
          if (!h.healthy("a")) ejected_at = t;
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      for (const auto& url : h.due_probes()) {
        if (t < death)
          h.probe_result(url, true);
        else
          pending.push_back(t + o.probe_timeout_ms * kMs);
      }
    }
    ASSERT_GE(ejected_at, 0);
    EXPECT_LE(ejected_at - death, 3000 * kMs) << "died at " << death_ms << " ms";
  }
}

TEST(Health, PassiveFailuresEjectAndOnlyProbesReadmit) {
  ManualClock clock;
  HealthTracker h(clock, {});
  h.add("a");
  h.request_result("a", RequestOutcome::kConnectError);
  h.request_result("a", RequestOutcome::kServerError);
  h.request_result("a", RequestOutcome::kSuccess);  // a success resets the streak
  h.request_result("a", RequestOutcome::kConnectError);
  h.request_result("a", RequestOutcome::kConnectError);
  EXPECT_TRUE(h.healthy("a"));
  EXPECT_TRUE(h.request_result("a", RequestOutcome::kServerError));
  EXPECT_FALSE(h.healthy("a"));
  EXPECT_FALSE(h.request_result("a", RequestOutcome::kSuccess));  // requests alone do not re-admit
  EXPECT_FALSE(h.healthy("a"));
  ASSERT_EQ(h.due_probes().size(), 1u);
  h.probe_result("a", true);
  EXPECT_FALSE(h.healthy("a"));  // one good probe is not enough (healthy_threshold = 2)
  EXPECT_TRUE(h.due_probes().empty());
  clock.advance_ns(1000 * kMs);
  ASSERT_EQ(h.due_probes().size(), 1u);
  EXPECT_TRUE(h.probe_result("a", true));
  EXPECT_TRUE(h.healthy("a"));
}

TEST(Health, FlappingProbesNeedConsecutiveSuccesses) {
  ManualClock clock;
  HealthOptions o;
  o.unhealthy_threshold = 1;
  HealthTracker h(clock, o);
  h.add("a");
  h.due_probes();
  h.probe_result("a", false);
  EXPECT_FALSE(h.healthy("a"));
  for (bool ok : {true, false, true, false}) {
    clock.advance_ns(o.probe_interval_ms * kMs);
    h.due_probes();
    h.probe_result("a", ok);
    EXPECT_FALSE(h.healthy("a"));
  }
}

TEST(NodeRegistry, LoadAccountingAndMeasuredSpeed) {
  ManualClock clock;
  NodeRegistry reg(clock);
  ASSERT_TRUE(reg.add("http://a:1", 2));
  ASSERT_FALSE(reg.add("http://a:1"));
  ASSERT_TRUE(reg.add("http://b:1"));
  reg.begin("http://a:1", 100);
  reg.begin("http://a:1", 50);
  auto a = *reg.status("http://a:1");
  EXPECT_EQ(a.load.in_flight, 2);
  EXPECT_EQ(a.load.outstanding_tokens, 150);
  EXPECT_EQ(a.load.capacity, 2);
  EXPECT_EQ(a.load.tokens_per_s, 100);  // the initial guess
  clock.advance_ns(1000 * kMs);
  reg.finish("http://a:1", 100, 100, RequestOutcome::kSuccess);
  clock.advance_ns(1000 * kMs);
  reg.finish("http://a:1", 50, 300, RequestOutcome::kSuccess);
  a = *reg.status("http://a:1");
  EXPECT_EQ(a.load.in_flight, 0);
  EXPECT_EQ(a.load.outstanding_tokens, 0);
  // First window: 100 tokens over 1 s busy; second: 300 over 1 s -> EWMA 0.3 * 300 + 0.7 * 100.
  EXPECT_DOUBLE_EQ(a.load.tokens_per_s, 160);
  // Idle time does not count as slow.
  clock.advance_ns(60'000 * kMs);
  reg.begin("http://a:1", 10);
  clock.advance_ns(500 * kMs);
  reg.finish("http://a:1", 10, 80, RequestOutcome::kSuccess);
  EXPECT_DOUBLE_EQ(reg.status("http://a:1")->load.tokens_per_s, 0.3 * 160 + 0.7 * 160);
}

TEST(NodeRegistry, CandidatesExcludeDrainingUnhealthyAndTried) {
  ManualClock clock;
  NodeRegistry reg(clock);
  for (const char* u : {"http://a:1", "http://b:1", "http://c:1", "http://d:1"}) reg.add(u);
  reg.set_draining("http://b:1", true);
  for (int i = 0; i < 3; ++i) reg.finish("http://c:1", 0, 0, RequestOutcome::kConnectError);
  auto c = reg.candidates({"http://d:1"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].url, "http://a:1");
  reg.set_draining("http://b:1", false);
  EXPECT_EQ(reg.candidates().size(), 3u);
  EXPECT_TRUE(reg.remove("http://a:1"));
  EXPECT_FALSE(reg.remove("http://a:1"));
  EXPECT_EQ(reg.candidates().size(), 2u);
  // Capacity comes from /health unless given.
  reg.due_probes();
  reg.probe_result("http://b:1", true, 512);
  EXPECT_EQ(reg.status("http://b:1")->load.capacity, 512);
}

}  // namespace
}  // namespace tessera::router
