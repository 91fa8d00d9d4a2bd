// Embedding requests at the engine (GenerationRequest::pool), on seeded synthetic models in memory: a chunked
// causal prompt pools as it does whole, inputs batched together give what they give alone, blocks are freed and
// never enter the prefix cache (nor is a cached prefix used), an encoder's input is computed whole, and the
// pooled vector of last-token pooling is the hidden state the classifier reads. ChunkPool's arithmetic by hand.
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <future>
#include <numeric>

#include "engine/chunk_pool.h"
#include "engine/engine.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/refusing_device.h"

namespace tessera::engine {
namespace {

struct Result1 {
  std::vector<float> embedding;
  std::vector<TokenId> tokens;
  FinishReason finish = FinishReason::kNone;
  Status error;
  int prompt_tokens = 0, cached_tokens = 0;
};

class EmbeddingEngine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (auto d = ops::open_device(GetParam(), 0, ops::DeviceOptions{2, ""}); !d.ok())
      GTEST_SKIP() << GetParam() << " not available here: " << d.status().message();
  }
  void load(const std::string& shape) {
    auto c = model::synth_shape_small(shape);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    model_ = std::make_unique<model::SynthModel>(model::synthesize_weights(*c, 11));
    if (c->arch == "bert") {
      tokenizer_ = model::synthesize_wordpiece_tokenizer(c->vocab_size, 11);
    } else {
      tokenizer_ = model::synthesize_tokenizer(c->vocab_size, 11);
    }
    device_ = std::move(ops::open_device(GetParam(), 0, ops::DeviceOptions{2, ""}).value());
  }
  void start(int max_batch_tokens, int num_blocks = 256, std::chrono::microseconds gather = {},
             std::shared_ptr<KvConnector> connector = nullptr) {
    engine_.reset();
    runner_.reset();
    RunnerOptions ro;
    ro.max_batch_tokens = max_batch_tokens;
    ro.kv.block_tokens = 16;
    ro.kv.num_blocks = num_blocks;
    ro.max_sequences = 8;
    auto r = ModelRunner::create(*device_, model_->config, model_->weights, ro);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    runner_ = std::move(r).value();
    EngineOptions eo;
    eo.scheduler.max_batch_tokens = max_batch_tokens;
    eo.admission_window = gather;  // an idle engine gathers a burst into one step
    eo.admission_gap = gather;
    engine_ = std::make_unique<Engine>(*runner_, *tokenizer_, eo);
    if (connector) {
      ASSERT_TRUE(engine_->add_connector(std::move(connector)).ok());
    }
    engine_->start();
  }
  std::future<Result1> submit(GenerationRequest g, Status* status = nullptr) {
    auto p = std::make_shared<std::promise<Result1>>();
    auto acc = std::make_shared<Result1>();
    auto id = engine_->submit(std::move(g), [p, acc](const RequestOutput& o) {
      acc->tokens.insert(acc->tokens.end(), o.tokens.begin(), o.tokens.end());
      if (o.finish == FinishReason::kNone) return;
      acc->embedding = o.embedding;
      acc->finish = o.finish;
      acc->error = o.error;
      acc->prompt_tokens = o.prompt_tokens;
      acc->cached_tokens = o.cached_tokens;
      p->set_value(*acc);
    });
    if (status) *status = id.status();
    if (!id.ok()) p->set_value(Result1{});
    return p->get_future();
  }
  Result1 embed(std::vector<TokenId> prompt, ops::PoolKind kind) {
    GenerationRequest g;
    g.prompt = std::move(prompt);
    g.pool = kind;
    auto f = submit(std::move(g));
    EXPECT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    Result1 r = f.get();
    EXPECT_EQ(r.finish, FinishReason::kStop) << r.error.to_string();
    EXPECT_EQ(r.embedding.size(), static_cast<size_t>(model_->config.dim));
    return r;
  }
  // ref and cpu give each row the same bits whatever else is in the step; vulkan's matmul takes its vector kernel
  // up to 8 rows and tiles beyond, another summation order, so there the same input agrees to float rounding.
  void expect_same_embedding(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    if (GetParam() != "vulkan") {
      EXPECT_EQ(got, want) << what;
      return;
    }
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t j = 0; j < got.size(); ++j) EXPECT_NEAR(got[j], want[j], 1e-5f) << what << " element " << j;
  }
  std::vector<TokenId> prompt(int n, int salt) const {
    std::vector<TokenId> p;
    for (int i = 0; i < n; ++i)
      p.push_back(static_cast<TokenId>(5 + (i * 37 + salt * 101) % (model_->config.vocab_size - 5)));
    return p;
  }

  std::unique_ptr<model::SynthModel> model_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<ops::Device> device_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Engine> engine_;
};

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST_P(EmbeddingEngine, ChunkedCausalPromptsPoolAsWholeOnes) {
  load("qwen3-embedding-0.6b");
  const std::vector<TokenId> p = prompt(45, 1);
  for (ops::PoolKind kind : {ops::PoolKind::kLast, ops::PoolKind::kMean, ops::PoolKind::kFirst}) {
    start(64);  // whole
    const Result1 whole = embed(p, kind);
    EXPECT_EQ(whole.prompt_tokens, 45);
    start(16);  // three chunks of 16, 16, 13
    const Result1 chunked = embed(p, kind);
    EXPECT_LT(max_abs_diff(whole.embedding, chunked.embedding), 1e-5f) << static_cast<int>(kind);
  }
  // The kinds differ (the test would not notice a kind ignored otherwise).
  start(64);
  EXPECT_GT(max_abs_diff(embed(p, ops::PoolKind::kLast).embedding, embed(p, ops::PoolKind::kMean).embedding), 1e-3f);
}

TEST_P(EmbeddingEngine, BatchedInputsGiveWhatTheyGiveAlone) {
  for (const char* shape : {"qwen3-embedding-0.6b", "bge-small"}) {
    load(shape);
    start(256);
    std::vector<std::vector<float>> alone;
    for (int i = 0; i < 5; ++i) alone.push_back(embed(prompt(3 + 7 * i, i), ops::PoolKind::kMean).embedding);
    start(256, 256, std::chrono::milliseconds(500));
    std::vector<std::future<Result1>> together;
    for (int i = 0; i < 5; ++i) {
      GenerationRequest g;
      g.prompt = prompt(3 + 7 * i, i);
      g.pool = ops::PoolKind::kMean;
      together.push_back(submit(std::move(g)));
    }
    for (int i = 0; i < 5; ++i) {
      Result1 r = together[static_cast<size_t>(i)].get();
      ASSERT_EQ(r.finish, FinishReason::kStop) << r.error.to_string();
      expect_same_embedding(r.embedding, alone[static_cast<size_t>(i)], fmt::format("{} input {}", shape, i));
    }
    EXPECT_EQ(engine_->stats().steps, 1u) << "the five inputs were computed in one step";
  }
}

TEST_P(EmbeddingEngine, BlocksAreFreedAndThePrefixCacheIsNeitherUsedNorFilled) {
  load("qwen3-embedding-0.6b");
  const std::vector<TokenId> p = prompt(40, 2);  // two full blocks of 16 and a partial one
  start(64);
  const Result1 fresh = embed(p, ops::PoolKind::kLast);
  EngineStats s = engine_->stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.kv_blocks_cached, 0);
  // A generation of the same prompt finds nothing cached ...
  GenerationRequest g;
  g.prompt = p;
  g.max_tokens = 2;
  g.ignore_eos = true;  // sampled at temperature 1: an end token would stop it before max_tokens
  Result1 gen = submit(g).get();
  EXPECT_EQ(gen.finish, FinishReason::kLength) << gen.error.to_string();
  EXPECT_EQ(gen.cached_tokens, 0);
  EXPECT_GT(engine_->stats().kv_blocks_cached, 0);  // ... and caches its full blocks itself
  // An embedding of that prompt now ignores those cached blocks: the same vector as on a fresh engine.
  const Result1 after = embed(p, ops::PoolKind::kLast);
  EXPECT_EQ(after.cached_tokens, 0);
  EXPECT_EQ(after.embedding, fresh.embedding);
  EXPECT_EQ(engine_->stats().kv_blocks_used, 0);
}

// Records what the engine asks of a KV connector (engine/kv_connector.h); offers a whole prompt from its tier.
class WatchingConnector : public KvConnector {
 public:
  std::string_view name() const override { return "watching"; }
  Status attach(KvBlockIo&, std::function<void()>) override { return ok_status(); }
  KvMatch match(const KvRequestView& r, int supplied) override {
    matched.push_back(r.id);
    return {};  // nothing to fill: the positions are computed
  }
  bool finished(RequestId id, KvEnd) override {
    ended.push_back(id);
    return false;
  }
  bool start_save(std::span<const KvStepChunk> chunks) override {
    for (const KvStepChunk& c : chunks) offered.push_back(c.id);
    return false;
  }
  KvConnectorStats stats() const override { return {"watching", {}}; }
  std::vector<RequestId> matched, ended, offered;  // engine thread; read once the engine has stopped
};

// A KV connector (the host/disk tiers, pd-link) never sees an embedding request: it is not matched, none of its
// steps is offered for saving and its end is not reported; a generation on the same engine is, all three.
TEST_P(EmbeddingEngine, KvConnectorsNeverSeeAnEmbedding) {
  load("qwen3-embedding-0.6b");
  auto watch = std::make_shared<WatchingConnector>();
  const std::vector<TokenId> p = prompt(40, 3);
  start(16, 256, {}, watch);  // three chunks
  const Result1 chunked = embed(p, ops::PoolKind::kLast);
  engine_->stop();
  EXPECT_TRUE(watch->matched.empty());
  EXPECT_TRUE(watch->offered.empty());
  EXPECT_TRUE(watch->ended.empty());
  start(64, 256, {}, watch);
  expect_same_embedding(embed(p, ops::PoolKind::kLast).embedding, chunked.embedding, "whole");  // the engine's rules
  GenerationRequest g;
  g.prompt = p;
  g.max_tokens = 2;
  g.ignore_eos = true;  // sampled at temperature 1: an end token would stop it before max_tokens
  Result1 gen = submit(g).get();
  EXPECT_EQ(gen.finish, FinishReason::kLength) << gen.error.to_string();
  engine_->stop();
  // The generation only: matched at least once (the contract asks again while its blocks cannot be allocated),
  // its steps offered, its end reported once.
  ASSERT_FALSE(watch->matched.empty());
  for (RequestId id : watch->matched) EXPECT_EQ(id, watch->matched[0]);
  EXPECT_FALSE(watch->offered.empty());
  ASSERT_EQ(watch->ended.size(), 1u);
  EXPECT_EQ(watch->ended[0], watch->matched[0]);
  for (RequestId id : watch->offered) EXPECT_EQ(id, watch->matched[0]);
}

TEST_P(EmbeddingEngine, LastTokenPoolingIsWhatTheClassifierReads) {
  // Tied embeddings: the last token's logits are token_embd . pooled.
  load("qwen3-embedding-0.6b");
  const model::ModelConfig& c = model_->config;
  ASSERT_TRUE(c.tied_embeddings);
  const std::vector<TokenId> p = prompt(20, 3);
  start(64);
  const Result1 e = embed(p, ops::PoolKind::kLast);
  SequenceKv seq;
  std::vector<float> logits;
  ASSERT_TRUE(runner_->prefill(seq, p, logits).ok());
  runner_->release(seq);
  const auto* table = reinterpret_cast<const float*>(model_->weights.find("token_embd.weight")->data);
  for (int t : {0, 7, c.vocab_size - 1}) {
    double dot = 0;
    for (int j = 0; j < c.dim; ++j)
      dot += static_cast<double>(table[static_cast<size_t>(t) * c.dim + j]) * e.embedding[j];
    EXPECT_NEAR(dot, logits[static_cast<size_t>(t)], 1e-4) << "token " << t;
  }
}

TEST_P(EmbeddingEngine, EncoderInputsAreComputedWholeAndBounded) {
  load("bge-small");
  start(32);
  // 32 tokens fit one step; 33 never would.
  const Result1 ok = embed(prompt(32, 4), ops::PoolKind::kFirst);
  EXPECT_EQ(ok.prompt_tokens, 32);
  GenerationRequest big;
  big.prompt = prompt(33, 4);
  big.pool = ops::PoolKind::kFirst;
  Status st;
  submit(big, &st).get();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--max-batch-tokens"), std::string::npos) << st.message();
  // An encoder generates nothing.
  GenerationRequest gen;
  gen.prompt = prompt(4, 4);
  submit(gen, &st).get();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("encoder"), std::string::npos) << st.message();
  // Non-causal: a later token changes an earlier one's state ([CLS] pooling sees the whole input).
  std::vector<TokenId> a = prompt(10, 5), b = a;
  b.back() = b.back() == 7 ? 8 : 7;
  EXPECT_GT(max_abs_diff(embed(a, ops::PoolKind::kFirst).embedding, embed(b, ops::PoolKind::kFirst).embedding), 1e-4f);
  EXPECT_EQ(engine_->stats().kv_blocks_used, 0);
}

// Each pooling on each kind of embedding model gives ref's vector (a different summation order only).
TEST_P(EmbeddingEngine, EmbeddingsEqualRefs) {
  if (GetParam() == "ref") GTEST_SKIP() << "ref is the reference";
  struct Case {
    const char* shape;
    ops::PoolKind kind;
  };
  for (Case c : {Case{"bge-small", ops::PoolKind::kFirst}, Case{"bert-base", ops::PoolKind::kMean},
                 Case{"qwen3-embedding-0.6b", ops::PoolKind::kLast}}) {
    SCOPED_TRACE(c.shape);
    load(c.shape);
    std::vector<std::vector<float>> got;
    for (int n : {1, 9, 32}) {
      start(32);
      got.push_back(embed(prompt(n, n), c.kind).embedding);
    }
    device_ = std::move(ops::open_device("ref").value());
    for (size_t i = 0; i < got.size(); ++i) {
      const int n = i == 0 ? 1 : i == 1 ? 9 : 32;
      start(32);
      const std::vector<float> want = embed(prompt(n, n), c.kind).embedding;
      double dot = 0, gg = 0, ww = 0;
      for (size_t j = 0; j < want.size() && j < got[i].size(); ++j) {
        dot += static_cast<double>(want[j]) * got[i][j];
        gg += static_cast<double>(got[i][j]) * got[i][j];
        ww += static_cast<double>(want[j]) * want[j];
      }
      EXPECT_GT(dot / std::sqrt(gg * ww), 0.999999) << n << " tokens";
      EXPECT_LT(max_abs_diff(got[i], want), 1e-4f) << n << " tokens";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, EmbeddingEngine, ::testing::Values("ref", "cpu", "vulkan"));

TEST(ChunkPool, CombinesChunksAsOnePoolWould) {
  // Rows 1, 2 | 3, 4, 5 (one dimension): mean 3, first 1, last 5.
  ChunkPool mean(ops::PoolKind::kMean), first(ops::PoolKind::kFirst), last(ops::PoolKind::kLast);
  for (ChunkPool* p : {&mean, &first, &last}) {
    const ops::PoolKind k = p == &mean    ? ops::PoolKind::kMean
                            : p == &first ? ops::PoolKind::kFirst
                                          : ops::PoolKind::kLast;
    const float a = k == ops::PoolKind::kMean ? 1.5f : k == ops::PoolKind::kFirst ? 1.0f : 2.0f;
    const float b = k == ops::PoolKind::kMean ? 4.0f : k == ops::PoolKind::kFirst ? 3.0f : 5.0f;
    p->add(0, 2, std::vector<float>{a});
    p->add(2, 3, std::vector<float>{b});
    EXPECT_EQ(p->rows(), 5);
  }
  EXPECT_FLOAT_EQ(mean.result()[0], 3.0f);
  EXPECT_FLOAT_EQ(first.result()[0], 1.0f);
  EXPECT_FLOAT_EQ(last.result()[0], 5.0f);
  // A chunk at position 0 starts over (a preempted prompt computed again).
  mean.add(0, 1, std::vector<float>{10.0f});
  EXPECT_FLOAT_EQ(mean.result()[0], 10.0f);
}

// A device without the encoder operators is refused at load, naming them (not at the first step), and
// `--backend auto` passes it over; a causal embedding model's pooling is named too (serve then falls back to cpu).
// Every backend here runs them (cpu, and opencl and vulkan where present: EmbeddingEngine.*/vulkan); the refusal is
// checked on a device that declines them.
TEST(EncoderCapability, ADeviceWithoutTheEncoderOperatorsIsRefusedByName) {
  auto c = model::synth_shape_small("bge-small");
  ASSERT_TRUE(c.ok());
  const model::SynthModel m = model::synthesize_weights(*c, 11);
  for (const char* backend : {"cpu", "opencl", "vulkan"}) {
    auto dev = ops::open_device(backend);
    if (!dev.ok()) continue;
    EXPECT_TRUE(unsupported_layer_features(**dev, m.config).empty()) << backend;
    EXPECT_EQ(missing_embedding_ops(**dev, /*encoder=*/true), "") << backend;
  }
  testing::RefusingDevice dev(std::move(ops::open_device("ref").value()), "without-encoder", [](const ops::Op& op) {
    const bool encoder =
        std::holds_alternative<ops::LayerNormOp>(op) || std::holds_alternative<ops::ActivationOp>(op) ||
        std::holds_alternative<ops::AttentionNonCausalOp>(op) || std::holds_alternative<ops::PoolOp>(op);
    return encoder ? std::string("no encoder kernels") : std::string();
  });
  EXPECT_EQ(unsupported_layer_features(dev, m.config),
            (std::vector<std::string>{"encoder operators (pool, layer_norm, activation, attention_noncausal)"}));
  EXPECT_EQ(missing_embedding_ops(dev, /*encoder=*/false), "pool");
  auto r = ModelRunner::create(dev, m.config, m.weights, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("layer_norm"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("without-encoder"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessera::engine
