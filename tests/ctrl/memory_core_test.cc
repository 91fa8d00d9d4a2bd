// The embedded store's pure core, driven by a ManualClock: lease expiry, revisions, watch history.
#include <gtest/gtest.h>

#include "ctrl/memory_core.h"

namespace tessera::ctrl {
namespace {

constexpr int64_t kMs = 1000000;
constexpr PutOptions kAdmin{.privileged = true};

TEST(MemoryCoreTest, LeaseExpiryDeletesItsKeysAtTheTtl) {
  ManualClock clock;
  MemoryCore core(clock);
  LeaseId l = *core.grant(1000);
  ASSERT_TRUE(core.put("/n/a", "1", l).ok());
  ASSERT_TRUE(core.put("/n/b", "2", LeaseId::kNone, kAdmin).ok());
  clock.advance_ns(999 * kMs);
  EXPECT_EQ(core.range("/n/").size(), 2u);
  clock.advance_ns(1 * kMs);
  EXPECT_EQ(core.expire(), 1);
  auto kvs = core.range("/n/");
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_EQ(kvs[0].key, "/n/b");
  EXPECT_EQ(core.keep_alive(l).code(), StatusCode::kNotFound);
  EXPECT_EQ(core.put("/n/c", "3", l).status().code(), StatusCode::kNotFound);
}

TEST(MemoryCoreTest, KeepAliveExtendsByOneTtl) {
  ManualClock clock;
  MemoryCore core(clock);
  LeaseId l = *core.grant(100);
  ASSERT_TRUE(core.put("/k", "v", l).ok());
  for (int i = 0; i < 10; ++i) {
    clock.advance_ns(90 * kMs);
    ASSERT_TRUE(core.keep_alive(l).ok()) << i;
  }
  EXPECT_EQ(core.range("/k").size(), 1u);
  clock.advance_ns(100 * kMs);
  EXPECT_TRUE(core.range("/k").empty());
}

TEST(MemoryCoreTest, RevisionsAndEventsInOrder) {
  ManualClock clock;
  MemoryCore core(clock);
  LeaseId l = *core.grant(100);
  EXPECT_EQ(*core.put("/a/1", "x", l), 1);
  EXPECT_EQ(*core.put("/b/1", "y", LeaseId::kNone, kAdmin), 2);
  EXPECT_EQ(*core.put("/a/1", "z", l), 3);
  EXPECT_EQ(*core.remove("/b/1"), 4);
  EXPECT_EQ(core.remove("/b/1").status().code(), StatusCode::kNotFound);
  clock.advance_ns(100 * kMs);
  core.expire();  // deletes /a/1: revision 5
  auto ev = core.events_since(0, "/a/");
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 3u);
  EXPECT_EQ((*ev)[0].kv.value, "x");
  EXPECT_EQ((*ev)[1].kv.value, "z");
  EXPECT_EQ((*ev)[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ((*ev)[2].kv.mod_revision, 5);
  EXPECT_TRUE(core.events_since(5, "/").value().empty());
  // Ahead of the store (it restarted) and behind the history (compacted) both ask for a re-read.
  EXPECT_EQ(core.events_since(6, "/").status().code(), StatusCode::kOutOfRange);
  MemoryCore small(clock, 2);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(small.put("/k", std::to_string(i), LeaseId::kNone, kAdmin).ok());
  EXPECT_EQ(small.events_since(1, "/").status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(small.events_since(3, "/").value().size(), 2u);
}

TEST(MemoryCoreTest, RevokeAndRebindingKeys) {
  ManualClock clock;
  MemoryCore core(clock);
  LeaseId a = *core.grant(100), b = *core.grant(1000);
  ASSERT_TRUE(core.put("/k", "1", a).ok());
  ASSERT_TRUE(core.put("/k", "2", b).ok());  // the key moves to lease b
  clock.advance_ns(200 * kMs);
  EXPECT_EQ(core.range("/k").size(), 1u);  // a expired, but /k is b's now
  ASSERT_TRUE(core.revoke(b).ok());
  EXPECT_TRUE(core.range("/k").empty());
  EXPECT_EQ(core.revoke(b).code(), StatusCode::kNotFound);
  EXPECT_EQ(core.grant(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core.put("", "x", LeaseId::kNone, kAdmin).status().code(), StatusCode::kInvalidArgument);
}

TEST(MemoryCoreTest, TtlBoundsAndQuotasAreClearErrors) {
  ManualClock clock;
  MemoryLimits limits;
  limits.max_keys = 3;
  limits.max_leases = 2;
  limits.max_keys_per_lease = 2;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 8;
  MemoryCore core(clock, 100, limits);
  // TTL bounds: INT64_MAX (the reported attack) and 1 ms are refused; the bounds themselves are accepted.
  EXPECT_EQ(core.grant(INT64_MAX).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core.grant(3600 * 1000 + 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core.grant(1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core.grant(-5).status().code(), StatusCode::kInvalidArgument);
  LeaseId a = *core.grant(100);
  LeaseId b = *core.grant(3600 * 1000);
  EXPECT_EQ(core.grant(1000).status().code(), StatusCode::kResourceExhausted);  // max_leases
  // Sizes.
  EXPECT_EQ(core.put(std::string(17, 'k'), "v", a).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core.put("/k", std::string(9, 'v'), a).status().code(), StatusCode::kInvalidArgument);
  // Entries per lease: a third key under `a` is refused, rewriting one of its two is not.
  ASSERT_TRUE(core.put("/a1", "v", a).ok());
  ASSERT_TRUE(core.put("/a2", "v", a).ok());
  EXPECT_EQ(core.put("/a3", "v", a).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(core.put("/a2", "w", a).ok());
  // Keys in the store.
  ASSERT_TRUE(core.put("/b1", "v", b).ok());
  EXPECT_EQ(core.put("/b2", "v", b).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(core.put("/b1", "w", b).ok());  // an existing key may change
  // Without a lease only when privileged.
  auto denied = core.put("/forever", "v", LeaseId::kNone);
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(denied.status().message().find("credential"), std::string::npos);
  ASSERT_TRUE(core.revoke(a).ok());
  EXPECT_TRUE(core.put("/forever", "v", LeaseId::kNone, kAdmin).ok());
  EXPECT_EQ(core.range("/").size(), 2u);
}

}  // namespace
}  // namespace tessera::ctrl
