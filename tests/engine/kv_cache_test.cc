#include "engine/kv_cache.h"

#include <gtest/gtest.h>

#include "model/synth.h"
#include "ops/registry.h"

namespace tessera::engine {
namespace {

TEST(KvCache, ReserveGrowsBlockTablesAndFailsAtomically) {
  auto device = ops::open_device("ref");
  ASSERT_TRUE(device.ok());
  auto config = model::synth_shape("tiny");
  auto cache = KvCache::create(**device, *config,
                               {.block_tokens = 4, .num_blocks = 5, .dtype = DType::kF32, .prefix_cache = false});
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
  EXPECT_EQ(kv.blocks().available(), 2);
  kv.release(a);
  EXPECT_EQ(kv.blocks().available(), 5);
  EXPECT_TRUE(kv.reserve(b, 13).ok());
}

}  // namespace
}  // namespace tessera::engine
