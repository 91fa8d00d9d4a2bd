// The pool connector (kv/pool) in one process: two engines, each with a pool connector and its own link agent, on
// one embedded control plane. Blocks one engine evicts are loaded by the other with every output equal to computing
// it; an engine loads its own published blocks back; a lease the store forgets is granted again and the blocks are
// published again; nothing leaks.
#include "kv/pool/pool_connector.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ctrl/embedded_server.h"
#include "engine/engine.h"
#include "greedy.h"
#include "kv/host/model_identity.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::kv {
namespace {

using engine::Engine;

class PoolConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto m = model::load_model(testing::stories260k_dir());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    device_ = std::move(ops::open_device("ref").value());
    identity_ = model_identity(model_.config, model_.weights, "backend=ref");
    ASSERT_TRUE(ctrl_.start("127.0.0.1", 0).ok());
    url_ = "http://127.0.0.1:" + std::to_string(ctrl_.port());
  }
  void TearDown() override { ctrl_.stop(); }

  // An engine whose cache holds 8 blocks of 8 tokens, with a pool connector of 1 MiB and 600 ms leases.
  struct Node {
    std::unique_ptr<engine::ModelRunner> runner;
    std::unique_ptr<Engine> engine;
    std::shared_ptr<PoolConnector> pool;
    ~Node() {
      if (engine) engine->stop();
    }
  };
  std::unique_ptr<Node> make() {
    auto n = std::make_unique<Node>();
    engine::RunnerOptions ro;
    ro.max_batch_tokens = 64;
    ro.kv.block_tokens = 8;
    ro.kv.num_blocks = 8;
    n->runner = std::move(engine::ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    n->engine =
        std::make_unique<Engine>(*n->runner, *model_.tokenizer, engine::EngineOptions{{.max_batch_tokens = 64}});
    PoolOptions o;
    o.pool_bytes = 1u << 20;
    o.store = store();
    o.lease_ttl = std::chrono::milliseconds(600);
    o.endpoints = {"tcp"};
    ConnectorSpec spec;
    spec.model_identity = identity_;
    spec.options = o;
    auto made = make_connector(kPoolConnector, spec);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    n->pool = std::dynamic_pointer_cast<PoolConnector>(*made);
    Status added = n->engine->add_connector(n->pool);
    EXPECT_TRUE(added.ok()) << added.to_string();
    n->engine->start();
    return n;
  }
  std::shared_ptr<ctrl::Store> store() {
    return std::shared_ptr<ctrl::Store>(ctrl::make_store("embedded", url_).value());
  }
  std::string ask(Engine& e, const std::string& prompt, int max_tokens) {
    return ask_greedy(e, model_, prompt, max_tokens).text;
  }
  std::string reference(const std::string& prompt, int max_tokens) {
    return greedy_reference(*device_, model_, prompt, max_tokens);
  }
  void fill_and_evict(Node& n) {
    EXPECT_EQ(ask(*n.engine, a_, 8), reference(a_, 8));
    for (const std::string& p : others_) ask(*n.engine, p, 16);
    EXPECT_GT(n.engine->stats().prefix.evictions, 0u);
  }
  static engine::KvTierStats tier(const PoolConnector& c) { return c.stats().tiers.at(0); }
  template <class Pred>
  static bool eventually(Pred pred, double seconds = 10) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  model::LoadedModel model_;
  std::unique_ptr<ops::Device> device_;
  std::string identity_;
  ctrl::EmbeddedServer ctrl_;
  std::string url_;
  const std::string a_ = "Once upon a time, there was a little girl named Lily. She loved to play";
  const std::vector<std::string> others_ = {"The cat sat on the mat and looked at the big dog in the garden",
                                            "Tom had a big red ball and he liked to play with it every day"};
};

TEST_F(PoolConnectorTest, BlocksOneEngineEvictedAreLoadedByAnotherWithTheSameOutput) {
  auto a = make();
  auto b = make();
  fill_and_evict(*a);
  ASSERT_TRUE(eventually([&] { return tier(*a->pool).blocks > 0; })) << "A published what it evicted";
  ASSERT_TRUE(eventually([&] { return b->pool->peer_blocks() > 0; })) << "B's mirror saw it";
  EXPECT_EQ(ask(*b->engine, a_, 8), reference(a_, 8));
  const engine::KvTierStats t = tier(*b->pool);
  EXPECT_GT(t.hit_tokens, 0u);
  EXPECT_EQ(t.hit_tokens % 8, 0u) << "whole blocks";
  EXPECT_GT(t.load_bytes, 0u);
  EXPECT_EQ(t.failed_blocks, 0u);
  EXPECT_EQ(b->engine->stats().kv_blocks_used, 0) << "no block leaked";
}

TEST_F(PoolConnectorTest, AnEngineLoadsItsOwnPublishedBlocksBack) {
  auto a = make();
  fill_and_evict(*a);
  ASSERT_TRUE(eventually([&] { return tier(*a->pool).blocks > 0; }));
  // Its own entries reach its mirror through the watch.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(ask(*a->engine, a_, 8), reference(a_, 8));
  EXPECT_GT(tier(*a->pool).hit_tokens, 0u);
  EXPECT_EQ(tier(*a->pool).failed_blocks, 0u);
}

TEST_F(PoolConnectorTest, ALeaseTheStoreForgotIsGrantedAgainAndItsBlocksPublishedAgain) {
  auto a = make();
  auto b = make();
  fill_and_evict(*a);
  // Everything A published is in B's mirror.
  ASSERT_TRUE(eventually([&] {
    const size_t held = tier(*a->pool).blocks;
    return held > 0 && b->pool->peer_blocks() == held;
  }));
  const size_t published = b->pool->peer_blocks();
  // The store loses A's leases (as after a restart): its entries go, B's mirror empties.
  auto s = store();
  auto kvs = s->range("/tessera/kvpool/");
  ASSERT_TRUE(kvs.ok());
  for (const ctrl::KeyValue& kv : *kvs) {
    if (kv.key.find(a->pool->agent_name()) != std::string::npos) (void)s->revoke(kv.lease);
  }
  ASSERT_TRUE(eventually([&] { return b->pool->peer_blocks() == 0; }));
  // A's next renewal finds the lease gone: a new one, every slot's key again.
  ASSERT_TRUE(eventually([&] { return b->pool->peer_blocks() >= published; }))
      << b->pool->peer_blocks() << " of " << published;
  EXPECT_TRUE(eventually([&] { return b->pool->peer_blocks() == tier(*a->pool).blocks; }))
      << "every block A holds: " << b->pool->peer_blocks() << " of " << tier(*a->pool).blocks;
  EXPECT_EQ(ask(*b->engine, a_, 8), reference(a_, 8));
  EXPECT_GT(tier(*b->pool).hit_tokens, 0u);
}

TEST_F(PoolConnectorTest, APoolWithoutRoomForOneBlockOrAStoreIsRefused) {
  PoolOptions o;
  o.pool_bytes = 1u << 20;
  ConnectorSpec spec;
  spec.model_identity = identity_;
  spec.options = o;
  auto no_store = make_connector(kPoolConnector, spec);
  ASSERT_FALSE(no_store.ok());
  EXPECT_NE(no_store.status().message().find("--ctrl"), std::string::npos);
  o.store = store();
  o.pool_bytes = 100;
  spec.options = o;
  auto tiny = make_connector(kPoolConnector, spec);
  ASSERT_TRUE(tiny.ok()) << "the size is checked at attach, against the cache's block size";
  engine::RunnerOptions ro;
  ro.kv.block_tokens = 8;
  ro.kv.num_blocks = 8;
  auto runner = std::move(engine::ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
  Engine e(*runner, *model_.tokenizer, engine::EngineOptions{});
  Status added = e.add_connector(*tiny);
  EXPECT_FALSE(added.ok());
  EXPECT_NE(added.message().find("holds no KV block"), std::string::npos) << added.to_string();
}

}  // namespace
}  // namespace tessera::kv
