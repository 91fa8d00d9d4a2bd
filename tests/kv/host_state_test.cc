// The host connector with a hybrid model (Qwen3.5's linear-attention layers): an evicted block after which the
// device kept a state checkpoint takes that recurrent state along, in host memory and on disk, and a later prompt
// starting with those blocks goes on from it. The reference is the same model served without prefix reuse (every
// prompt computed from position 0): greedy tokens equal, the chosen tokens' logprobs within 1e-4, and the cached
// counts a user sees in `usage.prompt_tokens_details.cached_tokens`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <numeric>

#include <fmt/core.h>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "greedy.h"
#include "hybrid.h"
#include "kv/host/block_file.h"
#include "kv/host/block_store.h"
#include "kv/host/disk_tier.h"
#include "kv/host/host_connector.h"
#include "model/synth.h"
#include "ops/registry.h"

namespace tessera::kv {
namespace {

namespace fs = std::filesystem;
using engine::Engine;
using model::TokenId;

class HostState : public HybridKvTest {
 protected:
  struct Node {
    std::shared_ptr<HostConnector> host;
    std::unique_ptr<Served> e;
    engine::Engine* engine = nullptr;
  };
  // An engine (HybridKvTest::make_engine) with the host connector when `o` names a tier.
  std::unique_ptr<Node> make(int checkpoints, std::optional<HostOptions> o, int blocks = 24) {
    auto n = std::make_unique<Node>();
    std::vector<std::shared_ptr<engine::KvConnector>> connectors;
    if (o) {
      auto made = HostConnector::create(*o, kIdentity);
      EXPECT_TRUE(made.ok()) << made.status().to_string();
      n->host = *made;
      connectors.push_back(n->host);
    }
    n->e = make_engine(checkpoints, blocks, connectors);
    n->engine = n->e->engine.get();
    return n;
  }
  void ask_and_evict(Node& n, const Out& want, int hint = 0) { HybridKvTest::ask_and_evict(*n.engine, a_, want, hint); }
};

// Evicted to host memory: the block that ends at the checkpoint carries the state, the others none; asked again,
// the prompt takes its 40 positions from host memory and goes on from that state to the reference's tokens.
TEST_F(HostState, APrefixComesBackFromHostMemoryWithTheStateAfterIt) {
  const Out want = reference({a_})[0];
  auto n = make(8, HostOptions{.host_bytes = 64u << 20});
  ask_and_evict(*n, want);
  const std::vector<engine::BlockHash> h = engine::BlockManager::chain_hashes(a_, 4);
  BlockFormat f;
  f.geometry = n->engine->kv_geometry();
  ASSERT_GT(f.geometry.state_bytes, 0u);
  HostPool& pool = const_cast<HostPool&>(n->host->pool());
  ASSERT_NE(pool.find(h[9]), nullptr);
  EXPECT_TRUE(f.holds_state(*pool.find(h[9]))) << "the block ending at 40";
  ASSERT_NE(pool.find(h[8]), nullptr);
  EXPECT_FALSE(f.holds_state(*pool.find(h[8])));

  const Out got = ask(*n->engine, a_);
  expect_same(got, want, "from host memory");
  EXPECT_EQ(got.cached, 40);
  EXPECT_EQ(tier(*n->host, "host").hit_tokens, 40u);
  EXPECT_EQ(n->engine->stats().kv_load_shortfalls, 0u);
}

// The device's prefix hit ends at its own checkpoint (20) and the host tier goes on from there with the blocks after
// it and the state at 40: the step goes on from the host's state, not the device checkpoint's.
TEST_F(HostState, HostBlocksGoOnFromADevicePrefixHitWithTheirOwnState) {
  std::vector<TokenId> parting = tokens(20, 300);
  for (TokenId t : tokens(17, 400)) parting.push_back(t);
  const std::vector<Out> want = reference({a_, parting});
  auto n = make(8, HostOptions{.host_bytes = 64u << 20});
  ask_and_evict(*n, want[0], /*hint=*/20);  // the device keeps its checkpoints at 20 and 40, not the blocks
  const Out part = ask(*n->engine, parting);
  expect_same(part, want[1], "parting after 20");
  EXPECT_EQ(part.cached, 20) << "the host's blocks to 20 and their state";
  // The device holds a_'s blocks to 20 again (parting's) and its checkpoint there; the host the rest.
  const Out got = ask(*n->engine, a_);
  expect_same(got, want[0], "20 from the device, 20 from host memory");
  EXPECT_EQ(got.cached, 40);
  EXPECT_EQ(tier(*n->host, "host").hit_tokens, 40u) << "20 for each";
}

// One checkpoint on the device: the next prompt's takes its buffer, and the one given back goes to host memory,
// alone while the device still holds its blocks. Asked again, the prompt's device hit ends at that state (40 cached,
// none of them from the host tier's blocks); without the tier the device had no state left there and computed it all.
TEST_F(HostState, ACheckpointTheDeviceGivesBackIsKeptInHostMemory) {
  const std::vector<TokenId> b = tokens(41, 10);
  const std::vector<Out> want = reference({a_, b});
  {
    auto n = make(1, std::nullopt, 64);
    ASSERT_TRUE(ask(*n->engine, a_).ok);
    ASSERT_TRUE(ask(*n->engine, b).ok);
    EXPECT_EQ(ask(*n->engine, a_).cached, 0) << "without the tier its state is gone";
  }
  auto n = make(1, HostOptions{.host_bytes = 64u << 20}, 64);
  expect_same(ask(*n->engine, a_), want[0], "a");
  expect_same(ask(*n->engine, b), want[1], "b, which takes a's checkpoint");
  EXPECT_EQ(n->engine->stats().prefix.evictions, 0u) << "a's blocks are all still on the device";
  EXPECT_EQ(tier(*n->host, "host").blocks, 0u) << "no block left the device";
  EXPECT_GT(tier(*n->host, "host").bytes, 0u) << "a's state, kept alone";
  const Out got = ask(*n->engine, a_);
  expect_same(got, want[0], "a again, from its state in host memory");
  EXPECT_EQ(got.cached, 40);
  EXPECT_EQ(tier(*n->host, "host").hit_tokens, 0u) << "its positions came from the device";
}

// ... and when its blocks leave the device later, the block that ends at the state takes it along in its record,
// and the prompt comes back from host memory with it.
TEST_F(HostState, AGivenBackCheckpointLeavesWithItsBlock) {
  const std::vector<TokenId> b = tokens(41, 10);
  const Out want = reference({a_})[0];
  auto n = make(1, HostOptions{.host_bytes = 64u << 20});
  expect_same(ask(*n->engine, a_), want, "a");
  ASSERT_TRUE(ask(*n->engine, b).ok);  // takes a's checkpoint
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(ask(*n->engine, tokens(41, 10 + 50 * i)).ok);
  const std::vector<engine::BlockHash> h = engine::BlockManager::chain_hashes(a_, 4);
  BlockFormat f;
  f.geometry = n->engine->kv_geometry();
  HostPool& pool = const_cast<HostPool&>(n->host->pool());
  ASSERT_NE(pool.find(h[9]), nullptr);
  EXPECT_TRUE(f.holds_state(*pool.find(h[9]))) << "the block ending at 40 took the state along";
  const Out got = ask(*n->engine, a_);
  expect_same(got, want, "a again, from host memory");
  EXPECT_EQ(got.cached, 40);
  EXPECT_EQ(tier(*n->host, "host").hit_tokens, 40u);
}

// Evicted to disk: the state goes with its block's file, survives a restart (the engine's own checkpoints do not),
// and a prompt sharing only the first 20 positions, where the request's hint kept a state, goes on from there.
TEST_F(HostState, TheStateGoesToDiskAndSurvivesARestart) {
  std::vector<TokenId> parting = tokens(20, 300);  // a_'s first 20 positions, then its own
  for (TokenId t : tokens(17, 400)) parting.push_back(t);
  const std::vector<Out> want = reference({a_, parting});
  TempDir dir;
  const HostOptions o{.host_bytes = 1, .disk_dir = dir.path.string(), .disk_bytes = 64u << 20};
  {
    auto n = make(8, o);
    ask_and_evict(*n, want[0], /*hint=*/20);
    n->host->disk()->flush();
    EXPECT_EQ(tier(*n->host, "host").blocks, 0u);
    EXPECT_GE(tier(*n->host, "disk").blocks, 10u);
  }
  auto n = make(8, o);
  const Out got = ask(*n->engine, a_);
  expect_same(got, want[0], "from disk after a restart");
  EXPECT_EQ(got.cached, 40);
  EXPECT_EQ(tier(*n->host, "disk").hit_tokens, 40u);
  const Out part = ask(*n->engine, parting);
  expect_same(part, want[1], "parting after the hint");
  EXPECT_EQ(part.cached, 20);
  EXPECT_EQ(n->engine->stats().kv_load_shortfalls, 0u);
}

// A disk read that ends early (the file of the block with the state at 40 vanished) brings the run up to the last
// block with a state it read, the hint's at 20; the rest is computed, and the answer is still the reference's.
TEST_F(HostState, AReadThatEndsEarlyGoesOnFromTheLastStateItBrought) {
  const Out want = reference({a_})[0];
  TempDir dir;
  const HostOptions o{.host_bytes = 1, .disk_dir = dir.path.string(), .disk_bytes = 64u << 20};
  std::string store;
  {
    auto n = make(8, o);
    ask_and_evict(*n, want, /*hint=*/20);
    store = n->host->disk()->path();
  }
  const engine::BlockHash h9 = engine::BlockManager::chain_hashes(a_, 4)[9];
  // Gone after the restart indexed it: the match counts on it, the read does not find it.
  auto n = make(8, o);
  ASSERT_TRUE(fs::remove(fmt::format("{}/{:016x}.kvb", store, static_cast<uint64_t>(h9))));
  const Out got = ask(*n->engine, a_);
  expect_same(got, want, "after the short read");
  EXPECT_EQ(got.cached, 20);
  EXPECT_EQ(tier(*n->host, "disk").hit_tokens, 20u);
  EXPECT_EQ(n->engine->stats().kv_load_shortfalls, 1u);
}

// KV events (engine/kv_events.h): a hybrid model's log says it has states, and announces each state a tier takes in
// or drops under the hash of the block it follows, so that a router counts a prefix only up to a block with one: the
// device's checkpoint, the one it gives back kept alone in host memory, the record that takes it along, and the disk
// file with it, announced again after a restart.
TEST_F(HostState, KvEventsAnnounceTheStatesEachTierHolds) {
  TempDir dir;
  const HostOptions o{.host_bytes = 64u << 20, .disk_dir = dir.path.string(), .disk_bytes = 64u << 20};
  const std::vector<engine::BlockHash> h = engine::BlockManager::chain_hashes(a_, 4);
  const std::vector<TokenId> b = tokens(41, 10);
  const engine::BlockHash hb = engine::BlockManager::chain_hashes(b, 4)[9];
  auto states = [](const Node& n, engine::KvTier t) {
    const engine::KvEventRead r = n.engine->kv_events().read(0, 0);
    EXPECT_TRUE(r.states);
    return r.held_states[static_cast<int>(t)];
  };
  using engine::KvTier;
  {
    auto n = make(1, o, 64);
    ASSERT_TRUE(ask(*n->engine, a_).ok);
    EXPECT_EQ(states(*n, KvTier::kDevice), std::vector<uint64_t>{h[9]}) << "the checkpoint at 40";
    ASSERT_TRUE(ask(*n->engine, b).ok);  // takes a's checkpoint
    EXPECT_EQ(states(*n, KvTier::kDevice), std::vector<uint64_t>{hb});
    EXPECT_EQ(states(*n, KvTier::kHost), std::vector<uint64_t>{h[9]}) << "given back, kept alone in host memory";
    EXPECT_EQ(n->engine->kv_events().held(KvTier::kHost), 0u) << "no block left the device";
    for (int i = 1; i < 6; ++i) ASSERT_TRUE(ask(*n->engine, tokens(41, 10 + 50 * i)).ok);
    EXPECT_GT(n->engine->kv_events().held(KvTier::kHost), 0u);
    const std::vector<uint64_t> host = states(*n, KvTier::kHost);
    EXPECT_NE(std::find(host.begin(), host.end(), h[9]), host.end()) << "the record that took it along";
    EXPECT_EQ(states(*n, KvTier::kDisk), std::vector<uint64_t>{});
  }
  // Host memory of one byte: every record goes on to disk, the one after 40 with its state; a restarted node
  // announces the files it found, the state among them.
  const HostOptions disk{.host_bytes = 1, .disk_dir = dir.path.string(), .disk_bytes = 64u << 20};
  {
    auto n = make(8, disk);
    ask_and_evict(*n, reference({a_})[0]);
    n->host->disk()->flush();
    const std::vector<uint64_t> on_disk = states(*n, KvTier::kDisk);
    EXPECT_NE(std::find(on_disk.begin(), on_disk.end(), h[9]), on_disk.end());
    EXPECT_EQ(states(*n, KvTier::kHost), std::vector<uint64_t>{}) << "nothing stays in one byte";
  }
  auto n = make(8, disk);
  const std::vector<uint64_t> found = states(*n, KvTier::kDisk);
  EXPECT_NE(std::find(found.begin(), found.end(), h[9]), found.end()) << "announced again after the restart";
  EXPECT_LT(found.size(), n->engine->kv_events().held(KvTier::kDisk)) << "the blocks without a state are not states";
}

std::shared_ptr<const HostBlock> record(engine::BlockHash h, size_t bytes) {
  auto b = std::make_shared<HostBlock>();
  b->hash = h;
  b->payload.assign(bytes, static_cast<uint8_t>(h + bytes));
  b->checksum = payload_checksum(b->payload);
  return b;
}

// A hybrid model's records come with the state section or without; one with it replaces one without (the block
// left the device again, this time with a checkpoint after it) in host memory, in the disk tier's queue and on disk,
// never the other way round; a file says which it is by its size and its header, and a restart keeps that.
TEST(HostStateRecords, ARecordWithTheStateReplacesOneWithoutIt) {
  BlockFormat f;
  f.store_key = 9;
  f.geometry = {.n_layers = 2, .kv_dim = 4, .block_tokens = 2, .dtype = DType::kF32, .state_bytes = 48};
  const size_t bare = f.payload_bytes(), full = f.payload_bytes(true);
  ASSERT_EQ(full, bare + 48);
  EXPECT_FALSE(f.holds_state(*record(1, bare)));
  EXPECT_TRUE(f.holds_state(*record(1, full)));

  HostPool pool(10 * full);
  pool.insert(record(1, bare));
  pool.insert(record(1, full));
  EXPECT_TRUE(f.holds_state(*pool.find(1)));
  EXPECT_EQ(pool.bytes(), full);
  pool.insert(record(1, bare));
  EXPECT_TRUE(f.holds_state(*pool.find(1))) << "never replaced by one without";

  // A file of each kind decodes as what it is; a header claiming another state size is refused.
  for (size_t bytes : {bare, full}) {
    auto b = record(5, bytes);
    auto back = decode_block_file(f, 5, encode_block_file(f, *b));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ((*back)->payload, b->payload);
  }
  BlockFormat other = f;
  other.geometry.state_bytes = 40;
  EXPECT_FALSE(decode_block_file(other, 5, encode_block_file(f, *record(5, full))).ok());

  TempDir dir;
  const DiskTierOptions o{.dir = dir.path.string(), .capacity_bytes = 1u << 20};
  auto read = [](DiskTier& t, engine::BlockHash h) {
    std::promise<std::vector<std::shared_ptr<const HostBlock>>> got;
    t.read({h}, nullptr, [&](std::vector<std::shared_ptr<const HostBlock>> b) { got.set_value(std::move(b)); });
    return got.get_future().get();
  };
  {
    auto t = DiskTier::open(o, f, "model").value();
    t->write(record(1, bare));
    t->write(record(1, full));  // still queued, or being written: either way the one with the state is kept
    t->write(record(2, bare));
    t->flush();
    t->write(record(2, full));  // on disk without it: written again with it
    t->write(record(3, full));
    t->flush();
    t->write(record(3, bare));  // never replaces one with it
    t->flush();
    for (engine::BlockHash h : {1, 2, 3}) {
      bool state = false;
      EXPECT_TRUE(t->contains(h, &state) && state) << h;
    }
    EXPECT_EQ(t->stats().bytes, 3 * (kBlockHeaderBytes + full));
  }
  auto t = DiskTier::open(o, f, "model").value();
  for (engine::BlockHash h : {1, 2, 3}) {
    bool state = false;
    EXPECT_TRUE(t->contains(h, &state) && state) << "after a restart: " << h;
    auto got = read(*t, h);
    ASSERT_EQ(got.size(), 1u) << h;
    EXPECT_EQ(got[0]->payload, record(h, full)->payload) << h;
  }
  t->write(record(4, bare));
  t->flush();
  bool state = true;
  EXPECT_TRUE(t->contains(4, &state));
  EXPECT_FALSE(state);
  auto got = read(*t, 4);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(f.holds_state(*got[0]));
}

}  // namespace
}  // namespace tessera::kv
