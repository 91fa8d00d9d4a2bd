// The pool connector's bookkeeping (kv/pool/pool_index.h): control-plane keys and values, a node's mirror of the
// index fed by range() and watch events, and the slots of its own region.
#include "kv/pool/pool_index.h"

#include <gtest/gtest.h>

namespace tessera::kv {
namespace {

using ctrl::KeyValue;
using ctrl::WatchEvent;

constexpr uint64_t kStore = 0x0123456789abcdefull;

KeyValue block_kv(uint64_t store, engine::BlockHash h, const std::string& agent, uint64_t offset) {
  PoolEntry e{agent, 7, offset, 4096, 0xfeedull};
  return {pool_block_key(store, h, agent), encode_pool_entry(e)};
}

KeyValue agent_kv(const std::string& agent) {
  return {pool_agent_key(agent), "name=" + agent + " host=h tcp=1.2.3.4:5"};
}

WatchEvent put(KeyValue kv) { return {WatchEvent::Type::kPut, std::move(kv)}; }
WatchEvent del(const std::string& key) {
  WatchEvent e{WatchEvent::Type::kDelete, {}};
  e.kv.key = key;
  return e;
}

TEST(PoolKeys, RoundTripAndRefuseWhatIsNotAKey) {
  const std::string key = pool_block_key(kStore, 0xabcull, "kvpool-1-2");
  EXPECT_EQ(key, "/tessera/kvpool/blocks/0123456789abcdef/0000000000000abc/kvpool-1-2");
  auto k = parse_pool_key(key);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_EQ(k->kind, PoolKey::Kind::kBlock);
  EXPECT_EQ(k->store_key, kStore);
  EXPECT_EQ(k->hash, 0xabcull);
  EXPECT_EQ(k->agent, "kvpool-1-2");
  auto a = parse_pool_key(pool_agent_key("kvpool-9"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, PoolKey::Kind::kAgent);
  EXPECT_EQ(a->agent, "kvpool-9");
  for (const std::string bad :
       {"/tessera/nodes/x", "/tessera/kvpool/other/x", "/tessera/kvpool/agents/", "/tessera/kvpool/agents/a/b",
        "/tessera/kvpool/blocks/0123456789abcdef/0000000000000abc/", "/tessera/kvpool/blocks/0123/0000000000000abc/a",
        "/tessera/kvpool/blocks/0123456789abcdeg/0000000000000abc/a",
        "/tessera/kvpool/blocks/0123456789abcdef/0000000000000abc/a/b"}) {
    EXPECT_FALSE(parse_pool_key(bad).ok()) << bad;
  }
}

TEST(PoolKeys, EntryValuesAreCheckedLikeInput) {
  PoolEntry e{"a", 3, 8192, 4096, 0xdeadbeefull};
  auto d = decode_pool_entry("a", encode_pool_entry(e));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->region, 3u);
  EXPECT_EQ(d->offset, 8192u);
  EXPECT_EQ(d->bytes, 4096u);
  EXPECT_EQ(d->checksum, 0xdeadbeefull);
  EXPECT_FALSE(d->state);
  EXPECT_TRUE(decode_pool_entry("a", encode_pool_entry(e) + " later=1").ok()) << "fields of a later version";
  e.state = true;  // a hybrid model's state record
  EXPECT_NE(encode_pool_entry(e).find(" state=1"), std::string::npos);
  auto st = decode_pool_entry("a", encode_pool_entry(e));
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->state);
  EXPECT_FALSE(decode_pool_entry("a", "region=1 offset=2 bytes=3 checksum=4 state=yes").ok());
  for (const std::string bad :
       {"", "region=1 offset=2 bytes=3", "region=x offset=2 bytes=3 checksum=4", "region=1 offset=2 bytes=0 checksum=4",
        "region=1 offset=18446744073709551615 "
        "bytes=2 checksum=4",
        "region=1offset=2"}) {
    EXPECT_FALSE(decode_pool_entry("a", bad).ok()) << bad;
  }
}

TEST(PoolIndex, FollowsPutsAndDeletesAndKeepsOtherModelsOut) {
  PoolIndex index(kStore, "self");
  index.reset({agent_kv("peer"),
               block_kv(kStore, 1, "peer", 0),
               block_kv(kStore + 1, 2, "peer", 0),
               {"/tessera/kvpool/blocks/junk", "x"}});
  EXPECT_EQ(index.blocks(), 1u) << "another store key's block is not this model's";
  EXPECT_EQ(index.skipped_keys(), 1u);
  ASSERT_TRUE(index.find(1));
  EXPECT_EQ(index.find(1)->agent, "peer");
  EXPECT_FALSE(index.find(2));
  // Put again (a slot republished under a new lease): replaced, not counted twice.
  index.apply({put(block_kv(kStore, 1, "peer", 4096))});
  EXPECT_EQ(index.blocks(), 1u);
  EXPECT_EQ(index.find(1)->offset, 4096u);
  // This node holds it too: its own copy is preferred (no link needed).
  index.apply({put(block_kv(kStore, 1, "self", 0))});
  EXPECT_EQ(index.find(1)->agent, "self");
  EXPECT_EQ(index.blocks(), 2u);
  EXPECT_EQ(index.peer_blocks(), 1u);
  index.apply({del(pool_block_key(kStore, 1, "self"))});
  EXPECT_EQ(index.find(1)->agent, "peer");
  // The peer's lease lapsed: its agent and entries are deleted.
  index.apply({del(pool_agent_key("peer")), del(pool_block_key(kStore, 1, "peer"))});
  EXPECT_FALSE(index.find(1));
  EXPECT_EQ(index.blocks(), 0u);
  EXPECT_EQ(index.peer_blocks(), 0u);
  EXPECT_FALSE(index.agent_info("peer").ok());
}

// State records (a hybrid model's) are entries like the blocks', counted apart: a peer's blocks are its blocks.
TEST(PoolIndex, StateRecordsAreCountedApartFromBlocks) {
  PoolIndex index(kStore, "self");
  PoolEntry state{"peer", 7, 0, 9000, 0xbeefull, true};
  index.reset({agent_kv("peer"),
               block_kv(kStore, 1, "peer", 0),
               {pool_block_key(kStore, 0x51, "peer"), encode_pool_entry(state)}});
  EXPECT_EQ(index.peer_blocks(), 1u);
  EXPECT_EQ(index.peer_states(), 1u);
  ASSERT_TRUE(index.find(0x51));
  EXPECT_TRUE(index.find(0x51)->state);
  EXPECT_FALSE(index.find(1)->state);
  index.apply({del(pool_block_key(kStore, 0x51, "peer"))});
  EXPECT_EQ(index.peer_states(), 0u);
  EXPECT_EQ(index.peer_blocks(), 1u);
}

TEST(PoolIndex, ABlockOfAnAgentWithoutAnAddressIsNotOffered) {
  PoolIndex index(kStore, "self");
  index.apply({put(block_kv(kStore, 5, "ghost", 0))});
  EXPECT_FALSE(index.find(5)) << "nobody can read it: no AgentInfo";
  index.apply({put(agent_kv("ghost"))});
  ASSERT_TRUE(index.find(5));
  EXPECT_TRUE(index.agent_info("ghost").ok());
  index.apply({put({pool_block_key(kStore, 6, "ghost"), "region=1"})});
  EXPECT_FALSE(index.find(6)) << "a malformed value is ignored";
  EXPECT_EQ(index.skipped_keys(), 1u);
}

TEST(SlotTable, FreeSlotsFirstThenLeastRecentlyUsed) {
  SlotTable t(3);
  EXPECT_EQ(t.claim(10)->slot, 0u);
  EXPECT_EQ(t.claim(11)->slot, 1u);
  EXPECT_EQ(t.claim(12)->slot, 2u);
  EXPECT_EQ(t.used(), 3u);
  EXPECT_EQ(t.touch(10), 0u);  // 11 is now the least recently used
  EXPECT_FALSE(t.touch(99));
  auto c = t.claim(13);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->slot, 1u);
  ASSERT_TRUE(c->replaced);
  EXPECT_EQ(*c->replaced, 11u) << "the replaced block's entry must be removed first";
  EXPECT_FALSE(t.touch(11));
  EXPECT_EQ(t.replaced(), 1u);
  t.release(1);  // 13's publication failed
  EXPECT_FALSE(t.touch(13));
  EXPECT_EQ(t.used(), 2u);
  auto again = t.claim(14);
  EXPECT_EQ(again->slot, 1u) << "a released slot is reused before evicting";
  EXPECT_FALSE(again->replaced);
  auto held = t.held();
  EXPECT_EQ(held.size(), 3u);
  SlotTable none(0);
  EXPECT_FALSE(none.claim(1));
}

}  // namespace
}  // namespace tessera::kv
