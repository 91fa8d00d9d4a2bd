// The router's exact prefix index: a node's whole set on a reset, events applied in order, a read that does not
// continue the last one dropped (the next read starts over), and matches only for the block size the hashes were
// made with.
#include "router/kv_event_index.h"

#include <gtest/gtest.h>

namespace tessera::router {
namespace {

TEST(KvEventIndex, ResetsEventsAndReadsThatDoNotContinue) {
  KvEventIndex index;
  const std::string n = "http://a:1";
  EXPECT_EQ(index.match(n, std::vector<uint64_t>{1}, 16).device, -1) << "not read yet: unknown, not zero";
  EXPECT_EQ(index.cursor(n), (std::pair<uint64_t, uint64_t>{0, 0}));
  ASSERT_TRUE(
      index.apply(n, {.epoch = 9, .last = 4, .block_tokens = 16, .reset = true, .held = {{10, 20}, {}, {}}}).ok());
  EXPECT_EQ(index.cursor(n), (std::pair<uint64_t, uint64_t>{9, 4}));
  EXPECT_EQ(index.match(n, std::vector<uint64_t>{10, 20, 30}, 16).device, 2);
  EXPECT_EQ(index.match(n, std::vector<uint64_t>{20, 10}, 16).device, 2);
  EXPECT_EQ(index.match(n, std::vector<uint64_t>{30, 10}, 16).device, 0) << "leading blocks only";
  EXPECT_EQ(index.match(n, std::vector<uint64_t>{10}, 32).device, -1) << "another block size: these hashes say nothing";
  ASSERT_TRUE(
      index.apply(n, {.epoch = 9, .last = 6, .block_tokens = 16, .events = {{5, true, 30, 0}, {6, false, 10, 0}}})
          .ok());
  EXPECT_EQ(index.match(n, std::vector<uint64_t>{10, 20, 30}, 16).device, 0);
  EXPECT_EQ(index.match(n, std::vector<uint64_t>{20, 30}, 16).device, 2);
  EXPECT_EQ(index.blocks(n)[0], 2u);
  // A gap (event 7 missing): dropped; the next read asks from the start.
  EXPECT_FALSE(index.apply(n, {.epoch = 9, .last = 8, .block_tokens = 16, .events = {{8, true, 40, 0}}}).ok());
  EXPECT_EQ(index.cursor(n), (std::pair<uint64_t, uint64_t>{0, 0}));
  EXPECT_EQ(index.match(n, std::vector<uint64_t>{20}, 16).device, -1);
  // Another run of the node (a new epoch) without a reset is refused the same way.
  ASSERT_TRUE(index.apply(n, {.epoch = 9, .last = 8, .block_tokens = 16, .reset = true, .held = {{20}, {}, {}}}).ok());
  EXPECT_FALSE(index.apply(n, {.epoch = 10, .last = 9, .block_tokens = 16, .events = {{9, true, 1, 0}}}).ok());
  index.remove_node(n);
  EXPECT_EQ(index.blocks(n)[0], 0u);
}

// A block that moved down to the host or disk tier still counts, after the device's run: the node loads it instead
// of computing it.
TEST(KvEventIndex, BlocksInTheLowerTiersFollowTheDevicesRun) {
  KvEventIndex index;
  const std::string n = "http://b:1";
  ASSERT_TRUE(index.apply(n, {.epoch = 1, .last = 0, .block_tokens = 16, .reset = true, .held = {{1}, {2}, {3}}}).ok());
  auto m = index.match(n, std::vector<uint64_t>{1, 2, 3, 4}, 16);
  EXPECT_EQ(m.device, 1);
  EXPECT_EQ(m.lower, 2);
  m = index.match(n, std::vector<uint64_t>{2, 3}, 16);
  EXPECT_EQ(m.device, 0);
  EXPECT_EQ(m.lower, 2);
  // Block 1 leaves the device for the host tier: removed from one, stored in the other.
  ASSERT_TRUE(
      index.apply(n, {.epoch = 1, .last = 2, .block_tokens = 16, .events = {{1, false, 1, 0}, {2, true, 1, 1}}}).ok());
  m = index.match(n, std::vector<uint64_t>{1, 2, 3}, 16);
  EXPECT_EQ(m.device, 0);
  EXPECT_EQ(m.lower, 3);
  EXPECT_EQ(index.blocks(n), (std::array<size_t, 3>{0, 2, 1}));
}

// A hybrid model's node (`states`) can use a prefix only up to a block after which some tier holds the recurrent
// state: the match ends there, wherever the blocks after it are; a node without `states` counts every block.
TEST(KvEventIndex, AHybridNodesRunEndsAtItsLastBlockWithAState) {
  KvEventIndex index;
  const std::string n = "http://h:1", plain = "http://p:1";
  const std::vector<uint64_t> chain = {1, 2, 3, 4, 5};
  ASSERT_TRUE(index
                  .apply(n, {.epoch = 1,
                             .last = 0,
                             .block_tokens = 16,
                             .reset = true,
                             .held = {{1, 2, 3}, {4, 5}, {}},
                             .states = true,
                             .held_states = {{2}, {}, {}}})
                  .ok());
  ASSERT_TRUE(
      index.apply(plain, {.epoch = 1, .last = 0, .block_tokens = 16, .reset = true, .held = {{1, 2, 3}, {4, 5}, {}}})
          .ok());
  EXPECT_EQ(index.states(n), (std::array<size_t, 3>{1, 0, 0}));
  EXPECT_FALSE(index.states(plain).has_value()) << "not a hybrid model's node";
  auto m = index.match(n, chain, 16);
  EXPECT_EQ(m.device, 2) << "the device's state after block 2";
  EXPECT_EQ(m.lower, 0);
  m = index.match(plain, chain, 16);
  EXPECT_EQ(m.device, 3);
  EXPECT_EQ(m.lower, 2);
  // The host tier takes in the state after block 4: the run goes on through the device's block 3 and the host's 4.
  ASSERT_TRUE(index.apply(n, {.epoch = 1, .last = 1, .block_tokens = 16, .events = {{1, true, 4, 1, true}}}).ok());
  m = index.match(n, chain, 16);
  EXPECT_EQ(m.device, 3);
  EXPECT_EQ(m.lower, 1);
  // The device gives its state after block 2 back and the host drops the one after 4: nothing is of use.
  ASSERT_TRUE(
      index
          .apply(
              n,
              {.epoch = 1, .last = 3, .block_tokens = 16, .events = {{2, false, 2, 0, true}, {3, false, 4, 1, true}}})
          .ok());
  m = index.match(n, chain, 16);
  EXPECT_EQ(m.device, 0);
  EXPECT_EQ(m.lower, 0);
  EXPECT_EQ(index.blocks(n), (std::array<size_t, 3>{3, 2, 0})) << "the blocks are all still there";
  // A state without its block (the run ends before it) counts nothing either.
  ASSERT_TRUE(index.apply(n, {.epoch = 1, .last = 4, .block_tokens = 16, .events = {{4, true, 9, 0, true}}}).ok());
  EXPECT_EQ(index.match(n, std::vector<uint64_t>{1, 9}, 16).device, 0);
}

}  // namespace
}  // namespace tessera::router
