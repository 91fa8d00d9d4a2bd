#include "engine/kv_cache.h"

#include <gtest/gtest.h>

#include "model/synth.h"
#include "ops/registry.h"

namespace tessera::engine {
namespace {

TEST(BlockAllocator, HandsOutEachBlockOnceAndRunsDry) {
  BlockAllocator a(3);
  std::vector<int> got;
  for (int i = 0; i < 3; ++i) {
    auto b = a.allocate();
    ASSERT_TRUE(b.ok());
    got.push_back(static_cast<int>(*b));
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2}));
  auto none = a.allocate();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  a.release(BlockId{1});
  EXPECT_EQ(a.free_count(), 1);
  EXPECT_EQ(static_cast<int>(*a.allocate()), 1);
}

TEST(BlockAllocatorDeathTest, DoubleReleaseIsABrokenInvariant) {
  BlockAllocator a(2);
  BlockId b = *a.allocate();
  a.release(b);
  EXPECT_DEATH(a.release(b), "check failed");
}

TEST(KvCache, ReserveGrowsBlockTablesAndFailsAtomically) {
  auto device = ops::open_device("ref");
  ASSERT_TRUE(device.ok());
  auto config = model::synth_shape("tiny");
  auto cache = KvCache::create(**device, *config, {.block_tokens = 4, .num_blocks = 5, .dtype = DType::kF32});
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  KvCache& kv = **cache;
  EXPECT_EQ(kv.k(0).shape_string(), "[5, 4, 4, 8] f32");
  EXPECT_EQ(kv.bytes_per_block(), 2u * 5 * 4 * 4 * 8 * 4);

  SequenceKv a, b;
  ASSERT_TRUE(kv.reserve(a, 9).ok());  // 3 blocks
  EXPECT_EQ(a.blocks.size(), 3u);
  ASSERT_TRUE(kv.reserve(a, 12).ok());  // still 3
  EXPECT_EQ(a.blocks.size(), 3u);
  Status s = kv.reserve(b, 13);  // needs 4, only 2 left
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(kv.allocator().free_count(), 2);
  kv.release(a);
  EXPECT_EQ(kv.allocator().free_count(), 5);
  EXPECT_TRUE(kv.reserve(b, 13).ok());
}

}  // namespace
}  // namespace tessera::engine
