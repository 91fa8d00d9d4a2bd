#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tessera::engine {
namespace {

using model::TokenId;

TEST(BlockManager, HandsOutEachBlockOnceAndRunsDry) {
  BlockManager m(3, 4);
  std::vector<int> got;
  for (int i = 0; i < 3; ++i) got.push_back(static_cast<int>(*m.allocate()));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2}));
  auto none = m.allocate();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  m.release(BlockId{1});
  EXPECT_EQ(m.available(), 1);
  EXPECT_EQ(static_cast<int>(*m.allocate()), 1);
}

TEST(BlockManagerDeathTest, ReleasingAnUnheldBlockIsABrokenInvariant) {
  BlockManager m(2, 4);
  BlockId b = *m.allocate();
  m.release(b);
  EXPECT_DEATH(m.release(b), "check failed");
}

// Fills blocks for `tokens` the way the engine does: allocate, then register each full block's chain hash.
std::vector<BlockId> fill(BlockManager& m, const std::vector<TokenId>& tokens) {
  std::vector<BlockId> blocks;
  BlockHash h = 0;
  for (size_t i = 0; i < tokens.size(); i += 4) {
    blocks.push_back(*m.allocate());
    if (i + 4 <= tokens.size()) {
      h = BlockManager::chain_hash(h, std::span(tokens).subspan(i, 4));
      m.register_full_block(blocks.back(), h);
    }
  }
  return blocks;
}

TEST(BlockManager, PrefixMatchFindsWholeCachedBlocksAndSharesThem) {
  BlockManager m(8, 4);
  std::vector<TokenId> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<BlockId> blocks = fill(m, a);  // 2 full blocks + 1 partial
  std::vector<TokenId> b = {1, 2, 3, 4, 5, 6, 7, 8, 42, 43, 44};
  std::vector<BlockId> hit = m.match_prefix(b, static_cast<int>(b.size()) - 1);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], blocks[0]);
  EXPECT_EQ(hit[1], blocks[1]);
  EXPECT_EQ(m.ref_count(blocks[0]), 2);
  EXPECT_EQ(m.stats().hit_tokens, 8u);
  // A different second block stops the chain after the first.
  std::vector<TokenId> c = {1, 2, 3, 4, 0, 6, 7, 8, 9};
  EXPECT_EQ(m.match_prefix(c, 9).size(), 1u);
  // max_tokens caps the match (the engine keeps at least one token to compute).
  EXPECT_EQ(m.match_prefix(a, 7).size(), 1u);
}

TEST(BlockManager, ReleasedCachedBlocksStayFindableUntilEvictedLeastRecentlyUsedFirst) {
  BlockManager m(4, 4);
  std::vector<TokenId> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  BlockId ba = fill(m, a)[0];
  BlockId bb = fill(m, b)[0];
  m.release(ba);  // a becomes evictable first (least recently used)
  m.release(bb);
  EXPECT_EQ(m.available(), 4);
  EXPECT_EQ(m.cached(), 2);
  // Two free blocks are used before any cached one is touched.
  BlockId f1 = *m.allocate(), f2 = *m.allocate();
  EXPECT_EQ(m.stats().evictions, 0u);
  BlockId e = *m.allocate();  // evicts a
  EXPECT_EQ(e, ba);
  EXPECT_EQ(m.stats().evictions, 1u);
  EXPECT_TRUE(m.match_prefix(a, 4).empty());
  std::vector<BlockId> still = m.match_prefix(b, 4);
  ASSERT_EQ(still.size(), 1u);
  EXPECT_EQ(still[0], bb);
  EXPECT_EQ(m.available(), 0);
  (void)f1;
  (void)f2;
}

TEST(BlockManager, DisabledPrefixCacheNeverMatches) {
  BlockManager m(4, 4, /*enable_prefix_cache=*/false);
  std::vector<TokenId> a = {1, 2, 3, 4};
  BlockId b = fill(m, a)[0];
  m.release(b);
  EXPECT_TRUE(m.match_prefix(a, 4).empty());
  EXPECT_EQ(m.available(), 4);
}

}  // namespace
}  // namespace tessera::engine
