// The host connector (kv/host): device blocks the cache evicts go to host memory, then to disk, and come back for a
// later request with the same prefix, with every output equal to computing it; the disk tier survives a restart,
// never serves another model's files, and a corrupted file is recomputed, never used; full tiers evict least
// recently used first.
#include "kv/host/host_connector.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>

#include "engine/engine.h"
#include "engine/generator.h"
#include "greedy.h"
#include "kv/host/model_identity.h"
#include "kv/registry.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::kv {
namespace {

namespace fs = std::filesystem;
using engine::Engine;

class HostConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto m = model::load_model(testing::stories260k_dir());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    device_ = std::move(ops::open_device("ref").value());
    identity_ = model_identity(model_.config, model_.weights, "backend=ref");
  }
  // An engine whose cache holds 8 blocks of 8 tokens, with a host connector.
  struct Node {
    std::unique_ptr<engine::ModelRunner> runner;
    std::unique_ptr<Engine> engine;
    std::shared_ptr<HostConnector> host;
    ~Node() {
      if (engine) engine->stop();
    }
  };
  std::unique_ptr<Node> make(HostOptions o, const std::string& identity = "") {
    auto n = std::make_unique<Node>();
    engine::RunnerOptions ro;
    ro.max_batch_tokens = 64;
    ro.kv.block_tokens = 8;
    ro.kv.num_blocks = 8;
    n->runner = std::move(engine::ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    n->engine =
        std::make_unique<Engine>(*n->runner, *model_.tokenizer, engine::EngineOptions{{.max_batch_tokens = 64}});
    ConnectorSpec spec;
    spec.model_identity = identity.empty() ? identity_ : identity;
    spec.options = o;
    auto made = make_connector(kHostConnector, spec);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    n->host = std::dynamic_pointer_cast<HostConnector>(*made);
    Status added = n->engine->add_connector(n->host);
    EXPECT_TRUE(added.ok()) << added.to_string();
    n->engine->start();
    return n;
  }
  Answer ask(Engine& e, const std::string& prompt, int max_tokens) { return ask_greedy(e, model_, prompt, max_tokens); }
  std::string reference(const std::string& prompt, int max_tokens) {
    return greedy_reference(*device_, model_, prompt, max_tokens);
  }
  // Asks for `a_`, then for two other prompts that push its blocks out of the 8-block device cache.
  void fill_and_evict(Node& n) {
    EXPECT_EQ(ask(*n.engine, a_, 8).text, reference(a_, 8));
    for (const std::string& p : others_) ask(*n.engine, p, 16);
    EXPECT_GT(n.engine->stats().prefix.evictions, 0u);
  }
  static engine::KvTierStats tier(const HostConnector& c, const std::string& name) {
    for (const engine::KvTierStats& t : c.stats().tiers)
      if (t.tier == name) return t;
    ADD_FAILURE() << "no tier " << name;
    return {};
  }

  model::LoadedModel model_;
  std::unique_ptr<ops::Device> device_;
  std::string identity_;
  const std::string a_ = "Once upon a time, there was a little girl named Lily. She loved to play";
  const std::vector<std::string> others_ = {"The cat sat on the mat and looked at the big dog in the garden",
                                            "Tom had a big red ball and he liked to play with it every day"};
};

TEST_F(HostConnectorTest, EvictedBlocksComeBackFromHostMemory) {
  auto n = make({.host_bytes = 8u << 20});
  fill_and_evict(*n);
  EXPECT_GT(tier(*n->host, "host").blocks, 0u) << "evicted blocks were kept";
  EXPECT_GT(tier(*n->host, "host").save_bytes, 0u);
  const Answer again = ask(*n->engine, a_, 8);
  EXPECT_EQ(again.text, reference(a_, 8));
  const engine::KvTierStats h = tier(*n->host, "host");
  EXPECT_GT(h.hit_tokens, 0u);
  EXPECT_EQ(h.hit_tokens % 8, 0u) << "whole blocks";
  EXPECT_GE(again.cached_tokens, static_cast<int>(h.hit_tokens)) << "host hits are cached tokens";
  EXPECT_GT(h.load_bytes, 0u);
  EXPECT_EQ(n->engine->stats().kv_blocks_used, 0);
}

TEST_F(HostConnectorTest, EvictedBlocksGoToDiskAndComeBack) {
  TempDir dir;
  // Host memory smaller than one block: every evicted block goes straight on to the disk tier.
  auto n = make({.host_bytes = 1, .disk_dir = dir.path.string(), .disk_bytes = 16u << 20});
  fill_and_evict(*n);
  n->host->disk()->flush();
  const engine::KvTierStats before = tier(*n->host, "disk");
  EXPECT_GT(before.blocks, 0u);
  EXPECT_EQ(tier(*n->host, "host").blocks, 0u);
  EXPECT_EQ(ask(*n->engine, a_, 8).text, reference(a_, 8));
  const engine::KvTierStats d = tier(*n->host, "disk");
  EXPECT_GT(d.hit_tokens, 0u);
  EXPECT_GT(d.load_bytes, 0u);
  EXPECT_EQ(d.failed_blocks, 0u);
  EXPECT_EQ(n->engine->stats().kv_blocks_used, 0);
}

TEST_F(HostConnectorTest, TheDiskTierSurvivesARestartAndIsKeyedByModel) {
  TempDir dir;
  const HostOptions o{.host_bytes = 1, .disk_dir = dir.path.string(), .disk_bytes = 16u << 20};
  {
    auto n = make(o);
    fill_and_evict(*n);
  }  // a clean shutdown writes what is queued
  {
    auto n = make(o);
    EXPECT_GT(tier(*n->host, "disk").blocks, 0u) << "indexed at start";
    EXPECT_EQ(ask(*n->engine, a_, 8).text, reference(a_, 8));
    EXPECT_GT(tier(*n->host, "disk").hit_tokens, 0u) << "found again after the restart";
  }
  {
    // Another model (here: another identity) never sees those files.
    auto n = make(o, identity_ + " another");
    EXPECT_EQ(tier(*n->host, "disk").blocks, 0u);
    EXPECT_EQ(ask(*n->engine, a_, 8).text, reference(a_, 8));
    EXPECT_EQ(tier(*n->host, "disk").hit_tokens, 0u);
  }
}

TEST_F(HostConnectorTest, ACorruptedDiskBlockIsRecomputedNeverUsed) {
  TempDir dir;
  const HostOptions o{.host_bytes = 1, .disk_dir = dir.path.string(), .disk_bytes = 16u << 20};
  std::string store;
  {
    auto n = make(o);
    fill_and_evict(*n);
    store = n->host->disk()->path();
  }
  // One flipped byte in the middle of every record's payload, one record cut short.
  int files = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(store)) {
    if (e.path().extension() != ".kvb") continue;
    const auto size = static_cast<std::streamoff>(fs::file_size(e.path()));
    if (files++ == 0) {
      fs::resize_file(e.path(), static_cast<uintmax_t>(size - 1));
      continue;
    }
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(size / 2);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(size / 2);
    f.write(&c, 1);
  }
  ASSERT_GT(files, 1);
  auto n = make(o);
  EXPECT_EQ(ask(*n->engine, a_, 8).text, reference(a_, 8));
  const engine::KvTierStats d = tier(*n->host, "disk");
  EXPECT_GE(d.failed_blocks, 1u) << "the corrupt record was detected";
  EXPECT_EQ(d.hit_tokens, 0u) << "and never used";
  EXPECT_EQ(n->engine->stats().kv_load_shortfalls, 1u) << "its positions were computed instead";
}

// Many requests at once in a cache too small for them: prefixes come back from host memory and from disk while
// sequences are preempted and readmitted; every output equals computing alone, and no block leaks.
TEST_F(HostConnectorTest, ConcurrentRequestsOverEvictedPrefixesGiveTheSameText) {
  TempDir dir;
  auto n = make({.host_bytes = 3 * 8 * 1024, .disk_dir = dir.path.string(), .disk_bytes = 16u << 20});
  fill_and_evict(*n);
  std::vector<std::string> prompts = {a_, others_[0], others_[1]};
  std::vector<std::string> want;
  for (const std::string& p : prompts) want.push_back(reference(p, 8));
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<Answer>> outs;
    for (int i = 0; i < 6; ++i) {
      outs.push_back(std::async(std::launch::async, [&, i] { return ask(*n->engine, prompts[i % 3], 8); }));
    }
    for (int i = 0; i < 6; ++i) EXPECT_EQ(outs[static_cast<size_t>(i)].get().text, want[i % 3]) << round << " " << i;
  }
  std::printf("preemptions %llu, host hits %llu, disk hits %llu tokens\n",
              static_cast<unsigned long long>(n->engine->stats().preemptions),
              static_cast<unsigned long long>(tier(*n->host, "host").hit_tokens),
              static_cast<unsigned long long>(tier(*n->host, "disk").hit_tokens));
  EXPECT_GT(tier(*n->host, "host").hit_tokens + tier(*n->host, "disk").hit_tokens, 0u);
  EXPECT_EQ(tier(*n->host, "disk").failed_blocks, 0u);
  EXPECT_EQ(n->engine->stats().kv_blocks_used, 0);
  EXPECT_EQ(n->engine->stats().kv_loading, 0);
}

std::shared_ptr<const HostBlock> block(engine::BlockHash h, size_t bytes) {
  auto b = std::make_shared<HostBlock>();
  b->hash = h;
  b->payload.assign(bytes, static_cast<uint8_t>(h));
  b->checksum = payload_checksum(b->payload);
  return b;
}

TEST(HostPool, EvictsTheLeastRecentlyUsed) {
  HostPool pool(250);
  EXPECT_TRUE(pool.insert(block(1, 100)).empty());
  EXPECT_TRUE(pool.insert(block(2, 100)).empty());
  EXPECT_NE(pool.find(1, /*touch=*/true), nullptr);  // 2 is now the least recently used
  auto out = pool.insert(block(3, 100));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]->hash, 2u);
  EXPECT_TRUE(pool.contains(1) && pool.contains(3) && !pool.contains(2));
  EXPECT_EQ(pool.bytes(), 200u);
  EXPECT_EQ(pool.blocks(), 2u);
}

BlockFormat tiny_format(uint64_t key) {
  BlockFormat f;
  f.store_key = key;
  f.geometry = {.n_layers = 2, .kv_dim = 4, .block_tokens = 2, .dtype = DType::kF32};
  return f;
}

TEST(DiskTier, EvictsTheLeastRecentlyUsedFileAndKeepsTheRestAcrossARestart) {
  TempDir dir;
  const BlockFormat f = tiny_format(7);
  const size_t record = kBlockHeaderBytes + f.payload_bytes();
  const DiskTierOptions o{.dir = dir.path.string(), .capacity_bytes = 2 * record};
  std::string path;
  {
    auto t = DiskTier::open(o, f, "model").value();
    path = t->path();
    t->write(block(1, f.payload_bytes()));
    t->write(block(2, f.payload_bytes()));
    t->flush();
    std::promise<size_t> got;
    t->read({1}, nullptr, [&](std::vector<std::shared_ptr<const HostBlock>> b) { got.set_value(b.size()); });
    EXPECT_EQ(got.get_future().get(), 1u);  // 1 is now the most recently used
    t->write(block(3, f.payload_bytes()));
    t->flush();
    EXPECT_TRUE(t->contains(1));
    EXPECT_FALSE(t->contains(2)) << "the least recently used file went";
    EXPECT_TRUE(t->contains(3));
    EXPECT_FALSE(fs::exists(fs::path(path) / "0000000000000002.kvb"));
    EXPECT_EQ(t->stats().evicted_blocks, 1u);
  }
  auto t = DiskTier::open(o, f, "model").value();
  EXPECT_TRUE(t->contains(1) && t->contains(3));
  EXPECT_EQ(t->stats().blocks, 2u);
  // A store with another key (another model or layout) lives elsewhere and sees none of them.
  auto other = DiskTier::open(o, tiny_format(8), "other").value();
  EXPECT_NE(other->path(), path);
  EXPECT_FALSE(other->contains(1));
}

TEST(BlockFile, RefusesAnythingButItsOwnIntactRecord) {
  const BlockFormat f = tiny_format(7);
  auto b = block(42, f.payload_bytes());
  std::vector<uint8_t> file = encode_block_file(f, *b);
  auto back = decode_block_file(f, 42, file);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ((*back)->payload, b->payload);
  EXPECT_EQ(decode_block_file(tiny_format(8), 42, file).status().code(), StatusCode::kFailedPrecondition)
      << "another store's record";
  EXPECT_EQ(decode_block_file(f, 43, file).status().code(), StatusCode::kFailedPrecondition) << "another prefix";
  std::vector<uint8_t> flipped = file;
  flipped[kBlockHeaderBytes + 3] ^= 1;
  EXPECT_EQ(decode_block_file(f, 42, flipped).status().code(), StatusCode::kDataLoss);
  std::vector<uint8_t> header = file;
  header[20] ^= 1;
  EXPECT_EQ(decode_block_file(f, 42, header).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(decode_block_file(f, 42, std::span(file).first(file.size() - 1)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(decode_block_file(f, 42, std::span(file).first(10)).status().code(), StatusCode::kDataLoss);
}

TEST(ConnectorRegistry, NamesTheKnownConnectorsAndChecksOptions) {
  auto unknown = make_connector("rdma-store", {});
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("host"), std::string::npos) << unknown.status().message();
  EXPECT_NE(unknown.status().message().find("pd-link"), std::string::npos) << unknown.status().message();
  EXPECT_EQ(make_connector(kHostConnector, {.options = 42}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_connector(kHostConnector, {.options = HostOptions{}}).status().code(), StatusCode::kInvalidArgument)
      << "neither host memory nor disk";
  EXPECT_EQ(make_connector(kHostConnector, {.model_identity = "m", .options = HostOptions{.disk_dir = "/tmp/x"}})
                .status()
                .code(),
            StatusCode::kInvalidArgument)
      << "a disk tier without a size";
  EXPECT_EQ(connector_registry().add(std::string(kHostConnector), make_host_connector).code(),
            StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace tessera::kv
