// The host connector's disk tier with a q8_0 KV cache (llama.cpp's -ctk/-ctv q8_0): a block evicted from the device
// lands on disk byte for byte as the cache held it (34-byte q8_0 blocks, the record's header saying q8_0), comes back
// for the same prefix with the greedy text of computing it, and a node whose cache holds another type never reads
// those records. The model is a seeded random one of a grouped-query family at head_dim 32 (whole q8_0 blocks per
// kv head), on the cpu backend.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>

#include "api/kv_layout.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/test_connectors.h"
#include "kv/host/block_file.h"
#include "kv/host/host_connector.h"
#include "kv/host/model_identity.h"
#include "kv/registry.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::kv {
namespace {

namespace fs = std::filesystem;
using engine::Engine;
using engine::GenerationRequest;
using engine::RequestOutput;
using model::TokenId;

constexpr int kBlockTokens = 8;

class HostKvTypes : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cfg = model::synth_shape_small("llama3.2-1b");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    cfg->n_layers = 2;
    config_ = *cfg;
    ASSERT_EQ(config_.head_dim % 32, 0);
    model_ = std::make_unique<model::SynthModel>(model::synthesize_weights(config_, 5, {.decisive = true}));
    tokenizer_ = model::synthesize_tokenizer(config_.vocab_size, 5);
    device_ = std::move(ops::open_device("cpu").value());
    dir_ = testing::scratch_dir();
    for (int i = 0; i < 3; ++i) {
      std::vector<TokenId> p;
      for (int k = 0; k < 27; ++k) p.push_back(3 + (i * 131 + k * 37) % (config_.vocab_size - 3));
      prompts_.push_back(p);
    }
  }

  struct Node {
    std::unique_ptr<engine::ModelRunner> runner;
    std::unique_ptr<Engine> engine;
    std::shared_ptr<HostConnector> host;
    std::shared_ptr<engine::testing::SavingConnector> saver;
    ~Node() {
      if (engine) engine->stop();
    }
  };
  // A cache of 8 blocks of 8 tokens in `type`, a disk tier (host memory too small for a block), and a connector
  // that copies each prompt's KV out in the cache's own type.
  std::unique_ptr<Node> make(DType type) {
    auto n = std::make_unique<Node>();
    engine::RunnerOptions ro;
    ro.max_batch_tokens = 64;
    ro.kv.block_tokens = kBlockTokens;
    ro.kv.num_blocks = 8;
    ro.kv.dtype = type;
    auto runner = engine::ModelRunner::create(*device_, config_, model_->weights, ro);
    EXPECT_TRUE(runner.ok()) << runner.status().to_string();
    n->runner = std::move(runner).value();
    n->engine = std::make_unique<Engine>(*n->runner, *tokenizer_, engine::EngineOptions{{.max_batch_tokens = 64}});
    ConnectorSpec spec;
    spec.model_identity = model_identity(config_, model_->weights, "backend=cpu");
    spec.options = HostOptions{.host_bytes = 1, .disk_dir = dir_, .disk_bytes = 16u << 20};
    auto made = make_connector(kHostConnector, spec);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    n->host = std::dynamic_pointer_cast<HostConnector>(*made);
    EXPECT_TRUE(n->engine->add_connector(n->host).ok());
    n->saver = std::make_shared<engine::testing::SavingConnector>();
    EXPECT_TRUE(n->engine->add_connector(n->saver).ok());
    n->engine->start();
    return n;
  }
  // Greedy ids of 8 new tokens; `kv` (when given) receives the prompt's KV in `dtype`, canonical layout.
  std::vector<TokenId> ask(Engine& e, const std::vector<TokenId>& prompt, std::shared_ptr<std::vector<uint8_t>> kv,
                           DType dtype, int* cached = nullptr) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.max_tokens = 8;
    if (kv) {
      auto p = std::make_shared<engine::testing::SaveParams>();
      p->out = kv;
      p->dtype = dtype;
      r.kv_transfer = p;
    }
    auto done = std::make_shared<std::promise<std::vector<TokenId>>>();
    auto ids = std::make_shared<std::vector<TokenId>>();
    auto c = std::make_shared<int>(0);
    auto id = e.submit(std::move(r), [done, ids, c](const RequestOutput& o) {
      ids->insert(ids->end(), o.tokens.begin(), o.tokens.end());
      *c = o.cached_tokens;
      if (o.finish != engine::FinishReason::kNone) done->set_value(*ids);
    });
    EXPECT_TRUE(id.ok());
    auto out = done->get_future().get();
    if (cached) *cached = *c;
    return out;
  }
  static engine::KvTierStats disk(const HostConnector& c) {
    for (const engine::KvTierStats& t : c.stats().tiers)
      if (t.tier == "disk") return t;
    return {};
  }

  model::ModelConfig config_;
  std::unique_ptr<model::SynthModel> model_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<ops::Device> device_;
  std::string dir_;
  std::vector<std::vector<TokenId>> prompts_;
};

TEST_F(HostKvTypes, AQ8_0BlockGoesToDiskAndComesBackExactly) {
  auto kv = std::make_shared<std::vector<uint8_t>>();
  std::vector<TokenId> first;
  std::string store;
  {
    auto n = make(DType::kQ8_0);
    first = ask(*n->engine, prompts_[0], kv, DType::kQ8_0);
    for (size_t i = 1; i < prompts_.size(); ++i) ask(*n->engine, prompts_[i], nullptr, DType::kQ8_0);
    n->host->disk()->flush();
    EXPECT_GT(disk(*n->host).blocks, 0u);
    store = n->host->disk()->path();
    // Found again: the same greedy ids, with the prefix's blocks from disk.
    int cached = 0;
    EXPECT_EQ(ask(*n->engine, prompts_[0], nullptr, DType::kQ8_0, &cached), first);
    EXPECT_GT(disk(*n->host).hit_tokens, 0u);
    EXPECT_GE(cached, kBlockTokens);
    EXPECT_EQ(disk(*n->host).failed_blocks, 0u);
  }
  // Each record of the first prompt's whole blocks holds that block's q8_0 bytes exactly as the cache had them
  // (what the saving connector copied out of the device), layer by layer, K then V.
  const engine::KvGeometry g{
      .n_layers = config_.n_layers, .kv_dim = config_.kv_dim(), .block_tokens = kBlockTokens, .dtype = DType::kQ8_0};
  const api::KvLayout full{g.n_layers, g.kv_dim, DType::kQ8_0, static_cast<int>(prompts_[0].size())};
  ASSERT_EQ(kv->size(), full.bytes());
  EXPECT_EQ(g.row_bytes(), static_cast<size_t>(config_.kv_dim() / 32 * 34)) << "34-byte blocks of 32 values";
  const size_t half = static_cast<size_t>(kBlockTokens) * g.row_bytes();
  int matched = 0, records = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(store)) {
    if (e.path().extension() != ".kvb") continue;
    ++records;
    std::ifstream f(e.path(), std::ios::binary);
    std::vector<uint8_t> file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_EQ(file.size(), kBlockHeaderBytes + g.block_bytes());
    uint32_t dtype = 0;
    std::memcpy(&dtype, file.data() + 44, 4);  // after magic, version, header bytes, key, hash, tokens, layers, dim
    EXPECT_EQ(dtype, static_cast<uint32_t>(DType::kQ8_0));
    for (int b = 0; b < static_cast<int>(prompts_[0].size()) / kBlockTokens; ++b) {
      bool same = true;
      for (int l = 0; l < g.n_layers && same; ++l) {
        const uint8_t* rec = file.data() + kBlockHeaderBytes + 2 * static_cast<size_t>(l) * half;
        same = std::memcmp(rec, kv->data() + full.k_offset(l, b * kBlockTokens), half) == 0 &&
               std::memcmp(rec + half, kv->data() + full.v_offset(l, b * kBlockTokens), half) == 0;
      }
      matched += same;
    }
  }
  std::printf("%d records on disk, %d of them the first prompt's blocks byte for byte\n", records, matched);
  EXPECT_GE(matched, 2) << "the first prompt's 3 whole blocks were evicted to disk (at least 2 not yet reused)";

  // An f16 node on the same folder: its store is keyed by its KV type, so it indexes none of the q8_0 records and
  // computes the prompt itself.
  auto n = make(DType::kF16);
  EXPECT_EQ(disk(*n->host).blocks, 0u);
  int cached = 0;
  ask(*n->engine, prompts_[0], nullptr, DType::kF16, &cached);
  EXPECT_EQ(disk(*n->host).hit_tokens, 0u);
  EXPECT_EQ(cached, 0);
}

}  // namespace
}  // namespace tessera::kv
