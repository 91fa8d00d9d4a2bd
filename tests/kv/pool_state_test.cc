// The cluster pool (kv/pool) with a hybrid model (Qwen3.5's linear-attention layers): the recurrent state after a
// prefix travels through the pool beside its blocks, so a prompt one node computed is taken up by another from the
// state after its last cached block. Two engines in one process, each with a pool connector and its own link agent,
// on one embedded control plane. The reference is the same model served without prefix reuse (hybrid.h): greedy
// tokens equal, logprobs within 1e-4, and the cached positions a user sees.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>

#include "ctrl/embedded_server.h"
#include "hybrid.h"
#include "kv/host/block_file.h"
#include "kv/pool/pool_connector.h"

namespace tessera::kv {
namespace {

class PoolState : public HybridKvTest {
 protected:
  void SetUp() override {
    HybridKvTest::SetUp();
    ASSERT_TRUE(ctrl_.start("127.0.0.1", 0).ok());
    url_ = "http://127.0.0.1:" + std::to_string(ctrl_.port());
  }
  void TearDown() override { ctrl_.stop(); }
  std::shared_ptr<ctrl::Store> store() {
    return std::shared_ptr<ctrl::Store>(ctrl::make_store("embedded", url_).value());
  }

  struct Node {
    std::shared_ptr<PoolConnector> pool;
    std::unique_ptr<Served> e;
    engine::Engine* engine = nullptr;
  };
  // An engine (hybrid.h) with a pool connector of `pool_mib` MiB.
  std::unique_ptr<Node> make(int checkpoints, int blocks = 24, size_t pool_mib = 64) {
    auto n = std::make_unique<Node>();
    PoolOptions o;
    o.pool_bytes = pool_mib << 20;
    o.store = store();
    o.endpoints = {"tcp"};
    auto made = PoolConnector::create(o, kIdentity);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    n->pool = *made;
    n->e = make_engine(checkpoints, blocks, {n->pool});
    n->engine = n->e->engine.get();
    return n;
  }
  // The control-plane key of what `holder` publishes under `key` (a chain hash, or state_key of one).
  std::string key_of(const Node& holder, engine::BlockHash key) const {
    return pool_block_key(block_store_key(kIdentity, holder.engine->kv_geometry()), key, holder.pool->agent_name());
  }
  // The entry `holder` published under `key`, if any.
  std::optional<ctrl::KeyValue> entry(const Node& holder, engine::BlockHash key) {
    const std::string k = key_of(holder, key);
    auto got = store()->range(k);
    if (!got.ok()) return std::nullopt;
    for (const ctrl::KeyValue& kv : *got)
      if (kv.key == k) return kv;
    return std::nullopt;
  }
  bool published(const Node& holder, engine::BlockHash key) { return entry(holder, key).has_value(); }
  template <class Pred>
  static bool eventually(Pred pred) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // Waits until `holder` published `keys` and `reader`'s mirror of the index holds every entry `holder` published
  // (`holder` itself: every entry in the store, its own included).
  void wait_for(const Node& holder, const Node& reader, const std::vector<engine::BlockHash>& keys) {
    for (engine::BlockHash k : keys) ASSERT_TRUE(eventually([&] { return published(holder, k); })) << k;
    ASSERT_TRUE(eventually([&] {
      auto kvs = store()->range(std::string(kPoolPrefix) + "blocks/");
      size_t n = 0;
      for (const ctrl::KeyValue& kv : kvs.value())
        n += &holder == &reader || kv.key.ends_with("/" + holder.pool->agent_name());
      return &holder == &reader ? reader.pool->indexed_entries() == n
                                : reader.pool->peer_blocks() + reader.pool->peer_states() == n;
    }));
  }

  ctrl::EmbeddedServer ctrl_;
  std::string url_;
  const std::vector<engine::BlockHash> h_ = engine::BlockManager::chain_hashes(a_, 4);
};

// A evicts the prompt's blocks with the device's checkpoint at 40: the block records and the state record go into
// its slots; B takes the 40 positions and the state from A over the link and goes on to the reference's tokens.
TEST_F(PoolState, APrefixAndTheStateAfterItComeFromAnotherNode) {
  const Out want = reference({a_})[0];
  auto a = make(8);
  auto b = make(8);
  ask_and_evict(*a->engine, a_, want);
  wait_for(*a, *b, {h_[9], state_key(h_[9])});
  EXPECT_FALSE(published(*a, state_key(h_[8]))) << "no checkpoint after block 8";
  EXPECT_GE(b->pool->peer_states(), 1u);
  EXPECT_TRUE(eventually([&] { return b->pool->peer_blocks() == tier(*a->pool, "pool").blocks; }))
      << "A's blocks, its states left out";
  const engine::KvTierStats held = tier(*a->pool, "pool");
  EXPECT_GT(held.bytes, held.blocks * (kBlockHeaderBytes + a->engine->kv_geometry().block_bytes()))
      << "the state slots' bytes count";

  const Out got = ask(*b->engine, a_);
  expect_same(got, want, "from A's pool slots");
  EXPECT_EQ(got.cached, 40);
  EXPECT_EQ(tier(*b->pool, "pool").hit_tokens, 40u);
  EXPECT_EQ(tier(*b->pool, "pool").failed_blocks, 0u);
  EXPECT_EQ(b->engine->stats().kv_load_shortfalls, 0u);
}

// One checkpoint on A's device: the next prompt takes its buffer and the one given back goes into a state slot while
// its blocks are still on the device; they follow when they are evicted, and B goes on from that state.
TEST_F(PoolState, ACheckpointTheDeviceGivesBackGoesIntoTheStateSlots) {
  const Out want = reference({a_})[0];
  auto a = make(1, 64);
  auto b = make(1);
  expect_same(ask(*a->engine, a_), want, "a on A");
  ASSERT_TRUE(ask(*a->engine, tokens(41, 10)).ok);  // takes a's checkpoint
  ASSERT_EQ(a->engine->stats().prefix.evictions, 0u);
  wait_for(*a, *b, {state_key(h_[9])});
  EXPECT_FALSE(published(*a, h_[9])) << "its block is still on A's device";
  for (int i = 1; i < 6; ++i) ASSERT_TRUE(ask(*a->engine, tokens(41, 10 + 50 * i)).ok);
  wait_for(*a, *b, {h_[9]});

  const Out got = ask(*b->engine, a_);
  expect_same(got, want, "from A's pool slots");
  EXPECT_EQ(got.cached, 40);
}

// ... and the node itself: its device still holds a's blocks but no state after them, and goes on from the state in
// its own state slot (40 cached, none of them loaded from the pool; without the pool it computes them all).
TEST_F(PoolState, ADeviceHitGoesOnFromAStateInTheNodesOwnSlots) {
  const Out want = reference({a_})[0];
  auto a = make(1, 64);
  expect_same(ask(*a->engine, a_), want, "a");
  ASSERT_TRUE(ask(*a->engine, tokens(41, 10)).ok);  // takes a's checkpoint
  wait_for(*a, *a, {state_key(h_[9])});
  const Out got = ask(*a->engine, a_);
  expect_same(got, want, "a again, from its own state slot");
  EXPECT_EQ(got.cached, 40);
  EXPECT_EQ(tier(*a->pool, "pool").hit_tokens, 0u) << "its positions came from the device";
  EXPECT_EQ(a->engine->stats().prefix.evictions, 0u);
}

// The state at 40 is gone from the pool (its entry removed, as when its slot is taken): B's run ends at the last block
// whose state the pool still holds, the request's hint's at 20, and the rest is computed.
TEST_F(PoolState, ARunEndsAtTheLastBlockWhoseStateThePoolHolds) {
  const Out want = reference({a_})[0];
  auto a = make(8);
  auto b = make(8);
  ask_and_evict(*a->engine, a_, want, /*hint=*/20);
  wait_for(*a, *b, {h_[9], state_key(h_[4]), state_key(h_[9])});
  ASSERT_TRUE(store()->remove(key_of(*a, state_key(h_[9]))).ok());
  ASSERT_TRUE(eventually([&] { return !b->pool->indexed(state_key(h_[9])); }));  // B's mirror follows the watch

  const Out got = ask(*b->engine, a_);
  expect_same(got, want, "from A's pool slots to 20");
  EXPECT_EQ(got.cached, 20);
  EXPECT_EQ(tier(*b->pool, "pool").hit_tokens, 20u);
  EXPECT_EQ(b->engine->stats().kv_load_shortfalls, 0u) << "the match promised no more than that";
}

// A state that does not arrive intact (its entry's checksum is not its record's, as after the slot was rewritten)
// is not used, and nor are the blocks before it: the prompt is computed, one failure and one shortfall counted.
TEST_F(PoolState, AStateThatDoesNotArriveIntactIsNotUsed) {
  const Out want = reference({a_})[0];
  auto a = make(8);
  auto b = make(8);
  ask_and_evict(*a->engine, a_, want);
  wait_for(*a, *b, {h_[9], state_key(h_[9])});
  const std::optional<ctrl::KeyValue> kv = entry(*a, state_key(h_[9]));
  ASSERT_TRUE(kv.has_value());
  auto e = decode_pool_entry(a->pool->agent_name(), kv->value);
  ASSERT_TRUE(e.ok());
  e->checksum ^= 1;
  ASSERT_TRUE(store()->put(kv->key, encode_pool_entry(*e), kv->lease).ok());
  ASSERT_TRUE(eventually([&] {  // B's mirror follows the watch
    const std::optional<PoolEntry> seen = b->pool->indexed(state_key(h_[9]));
    return seen && seen->checksum == e->checksum;
  }));

  const Out got = ask(*b->engine, a_);
  expect_same(got, want, "computed");
  EXPECT_EQ(got.cached, 0);
  EXPECT_EQ(tier(*b->pool, "pool").hit_tokens, 0u);
  EXPECT_EQ(tier(*b->pool, "pool").failed_blocks, 1u);
  EXPECT_EQ(b->engine->stats().kv_load_shortfalls, 1u);
}

// A pool too small for one state record beside one block is refused at start, naming the size it needs.
TEST_F(PoolState, APoolWithoutRoomForAStateIsRefused) {
  engine::RunnerOptions ro;
  ro.kv.block_tokens = 4;
  ro.kv.num_blocks = 8;
  ro.kv.state_checkpoints = 1;
  auto runner = std::move(engine::ModelRunner::create(*device_, model_->config, model_->weights, ro).value());
  engine::Engine e(*runner, *tokenizer_, engine::EngineOptions{});
  PoolOptions o;
  o.pool_bytes = e.kv_geometry().state_bytes;  // the state, but not its record's header, nor a block beside it
  o.store = store();
  o.endpoints = {"tcp"};
  auto pool = PoolConnector::create(o, kIdentity);
  ASSERT_TRUE(pool.ok());
  Status added = e.add_connector(*pool);
  EXPECT_FALSE(added.ok());
  EXPECT_NE(added.message().find("holds no recurrent state record"), std::string::npos) << added.to_string();
}

// A state record names the state after its block and is no block record: each decoder refuses the other's, another
// block's and a damaged one.
TEST(PoolStateRecords, AStateRecordIsNeverTakenForABlock) {
  BlockFormat f;
  f.store_key = 9;
  f.geometry = {.n_layers = 2, .kv_dim = 4, .block_tokens = 2, .dtype = DType::kF32, .state_bytes = 48};
  std::vector<uint8_t> state(48);
  for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> rec = encode_state_record(f, 5, state);
  ASSERT_EQ(rec.size(), kBlockHeaderBytes + 48);
  auto back = decode_state_record(f, 5, rec);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE((*back)->state_only);
  EXPECT_EQ((*back)->payload, state);
  EXPECT_FALSE(decode_state_record(f, 6, rec).ok()) << "another block's state";
  EXPECT_FALSE(decode_block_file(f, 5, rec).ok());
  EXPECT_FALSE(decode_block_file(f, state_key(5), rec).ok());
  HostBlock block;
  block.hash = 5;
  block.payload.assign(f.payload_bytes(true), 3);
  block.checksum = payload_checksum(block.payload);
  EXPECT_FALSE(decode_state_record(f, 5, encode_block_file(f, block)).ok()) << "a block's record with its state";
  std::vector<uint8_t> damaged = rec;
  damaged.back() ^= 1;
  EXPECT_FALSE(decode_state_record(f, 5, damaged).ok());
}

}  // namespace
}  // namespace tessera::kv
