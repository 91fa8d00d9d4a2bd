// The decode node's breaker for prefill nodes, driven by a ManualClock: a hung node is skipped after one
// timeout, probed back, tried once (half-open) and closed on success; a slow node that still answers probes is
// given a second chance; errors open only after the threshold; cooldowns double up to their cap.
#include "serve/prefill_breaker.h"

#include <gtest/gtest.h>

namespace tessera::serve {
namespace {

constexpr int64_t kMs = 1'000'000;
const std::string kNode = "http://127.0.0.1:1";

TEST(PrefillBreaker, OneTimeoutOfAHungNodeOpensItUntilAProbeAndATrialSucceed) {
  ManualClock clock;
  PrefillBreaker b(clock, {.error_threshold = 3, .timeout_threshold = 2, .cooldown_ms = 1000, .max_cooldown_ms = 8000});
  EXPECT_TRUE(b.allow(kNode));
  EXPECT_TRUE(b.timeout(kNode)) << "the first timeout opens";
  EXPECT_EQ(b.state(kNode), BreakerState::kOpen);
  EXPECT_FALSE(b.allow(kNode));
  EXPECT_FALSE(b.timeout(kNode)) << "a call sent before it opened does not reopen it";
  // Probed at once: hung, so the probe fails and the cooldown starts.
  ASSERT_EQ(b.due_probes(), std::vector<std::string>{kNode});
  EXPECT_TRUE(b.due_probes().empty()) << "one probe at a time";
  b.probe_result(kNode, false);
  EXPECT_TRUE(b.due_probes().empty());
  clock.advance_ns(999 * kMs);
  EXPECT_TRUE(b.due_probes().empty());
  clock.advance_ns(1 * kMs);
  ASSERT_EQ(b.due_probes().size(), 1u);
  b.probe_result(kNode, false);  // still hung: 2 s now
  clock.advance_ns(1999 * kMs);
  EXPECT_TRUE(b.due_probes().empty());
  clock.advance_ns(1 * kMs);
  ASSERT_EQ(b.due_probes().size(), 1u);
  b.probe_result(kNode, true);  // back (SIGCONT): half-open
  EXPECT_EQ(b.state(kNode), BreakerState::kHalfOpen);
  EXPECT_TRUE(b.allow(kNode)) << "the trial";
  EXPECT_FALSE(b.allow(kNode)) << "only one trial at a time";
  b.success(kNode);
  EXPECT_EQ(b.state(kNode), BreakerState::kClosed);
  EXPECT_TRUE(b.allow(kNode));
  EXPECT_TRUE(b.allow(kNode));
  EXPECT_EQ(b.counters().opened, 1u);
  EXPECT_EQ(b.counters().skipped, 2u);
}

TEST(PrefillBreaker, ASlowNodeThatAnswersProbesGetsASecondChanceThenOpens) {
  ManualClock clock;
  PrefillBreaker b(clock, {.error_threshold = 3, .timeout_threshold = 2, .cooldown_ms = 1000, .max_cooldown_ms = 8000});
  EXPECT_TRUE(b.timeout(kNode));
  ASSERT_EQ(b.due_probes().size(), 1u);
  b.probe_result(kNode, true);  // it answers: slow, not hung
  EXPECT_EQ(b.state(kNode), BreakerState::kClosed);
  EXPECT_TRUE(b.allow(kNode));
  EXPECT_TRUE(b.timeout(kNode));  // the second timeout in a row
  ASSERT_EQ(b.due_probes().size(), 1u);
  b.probe_result(kNode, true);
  EXPECT_EQ(b.state(kNode), BreakerState::kHalfOpen) << "two timeouts in a row: only a trial may close it";
  EXPECT_TRUE(b.allow(kNode));
  EXPECT_TRUE(b.timeout(kNode)) << "a failed trial reopens";
  EXPECT_EQ(b.state(kNode), BreakerState::kOpen);
  clock.advance_ns(1999 * kMs);
  EXPECT_TRUE(b.due_probes().empty()) << "a failed trial doubles the cooldown";
  clock.advance_ns(1 * kMs);
  EXPECT_EQ(b.due_probes().size(), 1u);
}

TEST(PrefillBreaker, ErrorsOpenAfterTheThresholdAndASuccessResetsTheCount) {
  ManualClock clock;
  PrefillBreaker b(clock, {.error_threshold = 3, .timeout_threshold = 2, .cooldown_ms = 1000, .max_cooldown_ms = 4000});
  EXPECT_FALSE(b.error(kNode));
  EXPECT_FALSE(b.error(kNode));
  b.success(kNode);
  EXPECT_FALSE(b.error(kNode));
  EXPECT_FALSE(b.error(kNode));
  EXPECT_TRUE(b.allow(kNode));
  EXPECT_TRUE(b.error(kNode));
  EXPECT_FALSE(b.allow(kNode));
  EXPECT_TRUE(b.due_probes().empty()) << "an error-opened node waits out the cooldown before its probe";
  for (int64_t wait : {1000, 2000, 4000, 4000}) {  // doubling, capped
    clock.advance_ns((wait - 1) * kMs);
    EXPECT_TRUE(b.due_probes().empty()) << wait;
    clock.advance_ns(1 * kMs);
    ASSERT_EQ(b.due_probes().size(), 1u) << wait;
    b.probe_result(kNode, false);
  }
  EXPECT_TRUE(b.allow("http://127.0.0.1:2")) << "breakers are per node";
}

}  // namespace
}  // namespace tessera::serve
