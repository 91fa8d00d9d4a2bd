// KV events: the prefix cache's stored and removed blocks, numbered and replayable; a reader that fell behind, a
// new reader and another run of the node get the whole set; the router's index applies them and refuses a read
// that does not continue the last one; the wire format refuses hostile bodies.
#include "engine/kv_events.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "api/kv_events.h"
#include "engine/block_manager.h"

namespace tessera::engine {
namespace {

using model::TokenId;

TEST(KvEventLog, NumberedEventsAndAResetForEveryoneWhoCannotFollow) {
  KvEventLog log(4);
  const KvEventRead first = log.read(0, 0);
  EXPECT_TRUE(first.reset) << "a new reader starts from the whole set";
  EXPECT_EQ(first.last, 0u);
  EXPECT_TRUE(first.held[0].empty());
  log.publish(KvEventType::kStored, 11);
  log.publish(KvEventType::kStored, 22);
  log.publish(KvEventType::kRemoved, 11);
  const KvEventRead r = log.read(log.epoch(), 0);
  ASSERT_FALSE(r.reset);
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[0].seq, 1u);
  EXPECT_EQ(r.events[2].type, KvEventType::kRemoved);
  EXPECT_EQ(r.last, 3u);
  EXPECT_TRUE(log.read(log.epoch(), 3).events.empty());
  EXPECT_EQ(log.read(log.epoch(), 3).last, 3u);
  EXPECT_EQ(log.read(log.epoch(), 2).events.size(), 1u);
  // Past the capacity of 4: event 1 is gone, so a reader at 0 cannot follow and gets what is held now.
  log.publish(KvEventType::kStored, 33);
  log.publish(KvEventType::kStored, 44);
  const KvEventRead behind = log.read(log.epoch(), 0);
  EXPECT_TRUE(behind.reset);
  EXPECT_EQ(behind.held[0], (std::vector<uint64_t>{22, 33, 44}));
  EXPECT_EQ(behind.last, 5u);
  EXPECT_FALSE(log.read(log.epoch(), 1).reset) << "event 2 is still kept";
  EXPECT_TRUE(log.read(log.epoch() + 1, 5).reset) << "another run of the node";
  EXPECT_TRUE(log.read(log.epoch(), 99).reset) << "a number from the future";
  log.publish(KvEventType::kStored, 11, KvTier::kHost);  // moved down: a tier of its own
  EXPECT_EQ(log.read(0, 0).held[static_cast<int>(KvTier::kHost)], std::vector<uint64_t>{11});
  EXPECT_EQ(log.held(KvTier::kHost), 1u);
  EXPECT_EQ(log.held(), 3u);
}

TEST(KvEventLog, ThePrefixCachePublishesWhatItRegistersAndEvicts) {
  KvEventLog log;
  BlockManager m(2, 4);
  m.set_event_log(&log);
  const std::vector<TokenId> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  const BlockHash ha = BlockManager::chain_hash(0, a), hb = BlockManager::chain_hash(0, b);
  BlockId x = *m.allocate();
  m.register_full_block(x, ha);
  m.register_full_block(x, ha);  // already registered: no second event
  BlockId y = *m.allocate();
  m.register_full_block(y, hb);
  m.release(x);
  m.release(y);               // both cached and evictable
  BlockId z = *m.allocate();  // evicts the least recently used: a's block
  (void)z;
  const KvEventRead r = log.read(log.epoch(), 0);
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[0].hash, ha);
  EXPECT_EQ(r.events[1].hash, hb);
  EXPECT_EQ(r.events[2].type, KvEventType::kRemoved);
  EXPECT_EQ(r.events[2].hash, ha);
  EXPECT_EQ(log.held(), 1u);
  // Prefix cache off: nothing is registered, nothing published.
  KvEventLog quiet;
  BlockManager off(2, 4, false);
  off.set_event_log(&quiet);
  off.register_full_block(*off.allocate(), ha);
  EXPECT_TRUE(quiet.read(quiet.epoch(), 0).events.empty());
}

TEST(KvEventsWire, RoundTripAndHostileBodies) {
  api::KvEventsBody b{7, 3, 16, false, {{1, true, 0xffffffffffffffffull, 0}, {2, false, 5, 1}, {3, true, 9, 2}}, {}};
  auto back = api::parse_kv_events(api::kv_events_body(b));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->events.size(), 3u);
  EXPECT_EQ(back->events[0].hash, 0xffffffffffffffffull) << "64-bit hashes survive JSON";
  EXPECT_FALSE(back->events[1].stored);
  EXPECT_EQ(back->events[1].tier, 1);
  EXPECT_EQ(back->events[2].tier, 2);
  api::KvEventsBody reset{7, 3, 16, true, {}, {{1, 2}, {}, {3}}};
  auto r = api::parse_kv_events(api::kv_events_body(reset));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->held[0], (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(r->held[2], std::vector<uint64_t>{3});
  for (const char* hostile :
       {"", "[]", "{\"epoch\":1}", R"({"epoch":-1,"last":0,"block_tokens":16,"reset":false,"events":[]})",
        R"({"epoch":1,"last":0,"block_tokens":0,"reset":false,"events":[]})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":false,"events":[[1,"moved",3,"device"]]})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":false,"events":[[1,"stored",3,"tape"]]})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":false,"events":[[1,"stored",3]]})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":true})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":true,"held":[3]})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":true,"held":{"device":[-3]}})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":false,"states":1,"events":[]})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":false,"events":[[1,"stored",3,"device","block"]]})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":false,"events":[[1,"stored",3,"device","state",1]]})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":true,"held":{},"held_states":[3]})",
        R"({"epoch":1,"last":0,"block_tokens":16,"reset":true,"held":{},"held_states":{"host":["3"]}})"}) {
    EXPECT_FALSE(api::parse_kv_events(hostile).ok()) << hostile;
  }
}

// A hybrid model's log says so and carries the states each tier holds beside the blocks, in its events and in a
// reset, through the wire; an attention-only model's body is what it was (no "states").
TEST(KvEventsWire, AHybridNodesStatesTravelBesideItsBlocks) {
  KvEventLog log;
  log.set_states(true);
  log.publish(KvEventType::kStored, 5);
  log.publish_state(KvEventType::kStored, 5, KvTier::kDevice);
  log.publish_state(KvEventType::kStored, 6, KvTier::kHost);
  log.publish_state(KvEventType::kRemoved, 6, KvTier::kHost);
  log.publish_state(KvEventType::kStored, 7, KvTier::kDisk);
  EXPECT_EQ(log.held(), 1u) << "states are not blocks";
  EXPECT_EQ(log.held_states(KvTier::kDevice), 1u);
  EXPECT_EQ(log.held_states(KvTier::kHost), 0u);
  const KvEventRead r = log.read(log.epoch(), 0);
  ASSERT_EQ(r.events.size(), 5u);
  EXPECT_FALSE(r.events[0].state);
  EXPECT_TRUE(r.events[1].state);
  api::KvEventsBody b{r.epoch, r.last, 16, false, {}, {}};
  b.states = r.states;
  for (const KvEvent& e : r.events)
    b.events.push_back({e.seq, e.type == KvEventType::kStored, e.hash, static_cast<int>(e.tier), e.state});
  const std::string text = api::kv_events_body(b);
  EXPECT_NE(text.find(R"([2,"stored",5,"device","state"])"), std::string::npos) << text;
  auto back = api::parse_kv_events(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->states);
  ASSERT_EQ(back->events.size(), 5u);
  EXPECT_FALSE(back->events[0].state);
  EXPECT_TRUE(back->events[3].state);
  EXPECT_FALSE(back->events[3].stored);
  EXPECT_EQ(back->events[4].tier, 2);

  const KvEventRead whole = log.read(0, 0);
  ASSERT_TRUE(whole.reset);
  EXPECT_TRUE(whole.states);
  EXPECT_EQ(whole.held_states[0], std::vector<uint64_t>{5});
  EXPECT_TRUE(whole.held_states[1].empty());
  EXPECT_EQ(whole.held_states[2], std::vector<uint64_t>{7});
  api::KvEventsBody reset{whole.epoch, whole.last, 16, true, {}, {}};
  reset.states = true;
  for (int t = 0; t < kKvTiers; ++t) {
    reset.held[t] = whole.held[t];
    reset.held_states[t] = whole.held_states[t];
  }
  auto again = api::parse_kv_events(api::kv_events_body(reset));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->states);
  EXPECT_EQ(again->held[0], std::vector<uint64_t>{5});
  EXPECT_EQ(again->held_states[2], std::vector<uint64_t>{7});

  KvEventLog plain;
  plain.publish(KvEventType::kStored, 5);
  api::KvEventsBody p{plain.epoch(), 1, 16, false, {{1, true, 5, 0}}, {}};
  EXPECT_EQ(api::kv_events_body(p).find("state"), std::string::npos) << "unchanged for attention-only models";
}

}  // namespace
}  // namespace tessera::engine
