// Sliding-window layers that keep only their windows (engine/kv_cache.h): the blocks a sequence holds, the pool
// running dry, the prefix cache over two pools, and, through the runner and the engine, logits and greedy text that
// are the same bits as a cache keeping every position.
#include <cctype>
#include <chrono>
#include <future>
#include <memory>
#include <numeric>
#include <ostream>
#include <thread>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/kv_fork.h"
#include "engine/model_runner.h"
#include "engine/test_connectors.h"
#include "model/loader.h"
#include "model/synth.h"
#include "model/synth_gemma4.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::engine {
namespace {

// Two layers of the tiny shape, the first sliding over 8 positions, in a context of 256.
model::ModelConfig sliding_tiny() {
  model::ModelConfig c = model::synth_shape("tiny").value();
  c.n_layers = 2;
  c.max_seq_len = 256;
  c.sliding_window = 8;
  c.sliding_pattern = 2;  // layer 0 slides, layer 1 is full
  return c;
}

int held(const SequenceKv& s) { return KvCache::window_blocks_held(s); }

std::unique_ptr<KvCache> make_cache(ops::Device& device, const model::ModelConfig& c, int window_blocks,
                                    bool prefix_cache = false) {
  auto cache = KvCache::create(device, c,
                               {.block_tokens = 4,
                                .num_blocks = 64,
                                .dtype = DType::kF32,
                                .prefix_cache = prefix_cache,
                                .window_blocks = window_blocks});
  EXPECT_TRUE(cache.ok()) << cache.status().to_string();
  return std::move(cache).value();
}

TEST(WindowKv, SlidingLayersHoldOnlyTheBlocksTheirWindowReads) {
  auto device = ops::open_device("ref").value();
  const model::ModelConfig c = sliding_tiny();
  auto cache = make_cache(*device, c, 12);
  KvCache& kv = *cache;
  ASSERT_TRUE(kv.windowed());
  EXPECT_TRUE(kv.windowed_layer(0));
  EXPECT_FALSE(kv.windowed_layer(1));
  EXPECT_EQ(kv.k(0).shape_string(), "[12, 4, 4, 8] f32");
  EXPECT_EQ(kv.k(1).shape_string(), "[64, 4, 4, 8] f32");
  EXPECT_EQ(kv.bytes_per_block(), kv.window_bytes_per_block());  // one layer each, alike

  // 100 positions in one step need all 25 of their blocks in the window pool too (a prompt's queries read every
  // window): refused, and nothing is held.
  SequenceKv a;
  EXPECT_EQ(kv.reserve(a, 100).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(a.blocks.empty());
  EXPECT_EQ(kv.blocks().available(), 64);
  EXPECT_EQ(kv.window_pool().available(), 12);
  // In steps of 10 it fits: between steps a sequence holds its last 7 positions' blocks.
  for (int len = 10; len <= 100; len += 10) {
    ASSERT_TRUE(kv.reserve(a, len).ok()) << len;
    EXPECT_LE(held(a), 5) << len;  // positions len - 10 - 7 .. len - 1
    a.length = len;
    kv.trim_window(a);
    EXPECT_LE(held(a), 3) << len;
  }
  EXPECT_EQ(a.blocks.size(), 25u);
  ASSERT_EQ(a.window_blocks.size(), 25u);
  for (size_t i = 0; i < 23; ++i) EXPECT_EQ(a.window_blocks[i], kNoBlock) << i;  // 93..99 are in blocks 23, 24
  EXPECT_NE(a.window_blocks[23], kNoBlock);
  EXPECT_NE(a.window_blocks[24], kNoBlock);
  EXPECT_EQ(kv.window_pool().available(), 10);
  kv.release(a);
  EXPECT_EQ(kv.blocks().available(), 64);
  EXPECT_EQ(kv.window_pool().available(), 12);
}

TEST(WindowKv, CanReserveCountsWhatTheTrimGivesBackAndAFailedReserveHoldsNothing) {
  auto device = ops::open_device("ref").value();
  auto cache = make_cache(*device, sliding_tiny(), 6);
  KvCache& kv = *cache;
  SequenceKv a, b;
  ASSERT_TRUE(kv.reserve(a, 20).ok());  // 5 window blocks, 1 left
  a.length = 20;
  EXPECT_EQ(kv.window_pool().available(), 1);
  // b needs 2: no.
  EXPECT_FALSE(kv.can_reserve(b, 8));
  EXPECT_EQ(kv.reserve(b, 8).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_TRUE(b.window_blocks.empty());
  EXPECT_EQ(kv.blocks().available(), 59);
  // a's next 10 positions need 3 more, and its window (from position 13, block 3) gives 3 back.
  EXPECT_TRUE(kv.can_reserve(a, 30));
  EXPECT_FALSE(kv.can_reserve(a, 40));  // 5 more
  ASSERT_TRUE(kv.reserve(a, 30).ok());
  EXPECT_EQ(held(a), 5);  // blocks 3..7
  a.length = 30;
  kv.trim_window(a);  // from position 23: blocks 5..7
  EXPECT_EQ(held(a), 3);
  EXPECT_TRUE(kv.can_reserve(b, 8));
  EXPECT_TRUE(kv.reserve(b, 8).ok());
}

// The tokens of a prompt: 1..n.
std::vector<model::TokenId> tokens(int n, int from = 1) {
  std::vector<model::TokenId> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), from);
  return t;
}

// What the scheduler does after each step (Scheduler::commit): registers the full blocks, then trims.
void commit(KvCache& kv, SequenceKv& s, std::span<const model::TokenId> t) {
  const std::vector<BlockHash> h = BlockManager::chain_hashes(t.first(static_cast<size_t>(s.length)), 4);
  for (size_t i = 0; i < h.size(); ++i) kv.register_full_block(s, i, h[i]);
  kv.trim_window(s);
}

TEST(WindowKv, APrefixIsReusedUpToAPointWhoseWindowIsStillCached) {
  auto device = ops::open_device("ref").value();
  auto cache = make_cache(*device, sliding_tiny(), 12, /*prefix_cache=*/true);
  KvCache& kv = *cache;
  const std::vector<model::TokenId> prompt = tokens(40);
  SequenceKv a;
  for (int len = 8; len <= 40; len += 8) {
    ASSERT_TRUE(kv.reserve(a, len).ok());
    a.length = len;
    commit(kv, a, prompt);
  }
  EXPECT_EQ(held(a), 2);  // blocks 8, 9: positions 33..39

  // The same prompt: all 10 blocks, the window's two shared with a.
  SequenceKv b;
  std::vector<model::TokenId> longer = prompt;
  longer.push_back(99);
  EXPECT_EQ(kv.match_prefix(b, longer, 40), 40);
  EXPECT_EQ(b.blocks, a.blocks);
  EXPECT_EQ(b.window_blocks[8], a.window_blocks[8]);
  EXPECT_EQ(b.window_blocks[9], a.window_blocks[9]);
  EXPECT_EQ(held(b), 2);
  kv.release(b);

  // A prompt that parts from it after 22 tokens: 5 whole blocks, whose window (positions 13..19: blocks 3, 4) a gave
  // back registered, so they are still cached.
  std::vector<model::TokenId> parted = tokens(22);
  for (int i = 0; i < 10; ++i) parted.push_back(500 + i);
  SequenceKv c;
  EXPECT_EQ(kv.match_prefix(c, parted, 31), 20);
  EXPECT_EQ(held(c), 2);
  kv.release(c);

  // Once other sequences have taken every free and cached window block, that window is gone: nothing is reused
  // (blocks 0..4 are still cached in the full layers' pool, but without their window they are no use).
  SequenceKv filler;
  ASSERT_TRUE(kv.reserve(filler, 40).ok());
  EXPECT_EQ(kv.window_pool().available(), 0);
  kv.release(filler);
  SequenceKv d;
  EXPECT_EQ(kv.match_prefix(d, parted, 31), 0);
  EXPECT_TRUE(d.blocks.empty());
  // The same prompt as a still finds its whole prefix: a holds that window.
  SequenceKv e;
  EXPECT_EQ(kv.match_prefix(e, longer, 40), 40);
}

TEST(WindowKv, OffWhenAskedOrWhenTheWindowCoversTheContext) {
  auto device = ops::open_device("ref").value();
  model::ModelConfig c = sliding_tiny();
  auto off = KvCache::create(*device, c, {.block_tokens = 4, .num_blocks = 64, .window_kv = false});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->windowed());
  EXPECT_EQ((*off)->k(0).shape_string(), "[64, 4, 4, 8] f32");
  c.max_seq_len = 8;  // the window is the whole context: nothing would ever leave it
  EXPECT_EQ(KvCache::window_pool_blocks(c, 4, 8, 64), 0);
  auto whole = KvCache::create(*device, c, {.block_tokens = 4, .num_blocks = 64});
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE((*whole)->windowed());
  c.max_seq_len = 256;
  // 8 sequences: each holds the blocks of 7 positions (2, one more where they straddle a boundary) and one more for a
  // step starting mid-block; a step of 64 positions adds 16.
  EXPECT_EQ(KvCache::window_pool_blocks(c, 4, 8, 64), 8 * 4 + 16);
}

// The runner with a windowed cache against one keeping every position: the same logits, bit for bit, through chunked
// prompts longer than the window, batched and graph decodes, and a fork. Gemma 2 and gpt-oss alternate sliding and full
// layers, Gemma 4 adds KV-sharing layers and unlike head sizes, and in Phi-3 every layer slides (the full layers' pool
// then holds no memory, only the block table).
struct RunnerCase {
  std::string shape, device;
};
void PrintTo(const RunnerCase& c, std::ostream* os) { *os << c.shape << " on " << c.device; }

class WindowRunner : public ::testing::TestWithParam<RunnerCase> {
 protected:
  void SetUp() override {
    auto d = ops::open_device(GetParam().device, 0, ops::DeviceOptions{2, ""});
    if (!d.ok()) GTEST_SKIP() << GetParam().device << " not available here: " << d.status().message();
    device_ = std::move(d).value();
    const std::string& shape = GetParam().shape;
    if (shape.starts_with("gemma4")) {
      auto s = model::gemma4_shape(shape, /*small=*/true);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      ASSERT_TRUE(model::resize_gemma4_shape(*s, 6, 256, 512, 8).ok());
      const std::string path = ::tessera::testing::scratch_dir() + "/window-" + shape + ".gguf";
      ASSERT_TRUE(model::write_gemma4_gguf(*s, 7, {}, path).ok());
      auto loaded = model::load_model(path, "", false);
      ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
      config_ = loaded->config;
      loaded_ = std::make_unique<model::LoadedModel>(std::move(loaded).value());
      weights_ = &loaded_->weights;
    } else {
      auto c = model::synth_shape_small(shape);
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      synth_ = std::make_unique<model::SynthModel>(model::synthesize_weights(*c, 11));
      config_ = synth_->config;
      weights_ = &synth_->weights;
    }
    config_.max_seq_len = 128;
    ASSERT_GT(config_.sliding_window, 0);
    ASSERT_LT(config_.sliding_window, 40);
  }
  std::unique_ptr<ModelRunner> make(bool window, bool graph = false, int window_blocks = 0, int num_blocks = 0) {
    RunnerOptions o;
    o.kv.window_blocks = window_blocks;
    o.kv.num_blocks = num_blocks;
    o.max_batch_tokens = 7;  // prompt chunks of 7: each step's window reaches back into the last one's blocks
    o.max_sequences = 4;
    o.kv.block_tokens = 4;
    o.kv.dtype = DType::kF16;
    o.kv.window_kv = window;
    o.graph = graph;
    auto r = ModelRunner::create(*device_, config_, *weights_, o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  std::unique_ptr<ops::Device> device_;
  model::ModelConfig config_;
  std::unique_ptr<model::SynthModel> synth_;
  std::unique_ptr<model::LoadedModel> loaded_;
  const model::ModelWeights* weights_ = nullptr;
};

TEST_P(WindowRunner, LogitsAreTheWholeCachesBitForBit) {
  auto whole = make(false), windowed = make(true);
  ASSERT_TRUE(whole && windowed);
  EXPECT_FALSE(whole->kv_cache().windowed());
  ASSERT_TRUE(windowed->kv_cache().windowed());
  EXPECT_LT(windowed->kv_cache().window_pool().num_blocks(), whole->kv_cache().num_blocks());

  const std::vector<TokenId> prompt_a = tokens(37, 5), prompt_b = tokens(23, 61);
  SequenceKv wa, wb, xa, xb;
  std::vector<float> want, got;
  ASSERT_TRUE(whole->prefill(wa, prompt_a, want).ok());
  ASSERT_TRUE(windowed->prefill(xa, prompt_a, got).ok());
  ASSERT_EQ(got, want);
  ASSERT_TRUE(whole->prefill(wb, prompt_b, want).ok());
  ASSERT_TRUE(windowed->prefill(xb, prompt_b, got).ok());
  ASSERT_EQ(got, want);
  // The fork shares a's window blocks and copies its partial one.
  SequenceKv wc, xc;
  ASSERT_TRUE(fork_kv(*whole, wa, wc).ok());
  ASSERT_TRUE(fork_kv(*windowed, xa, xc).ok());
  for (int step = 0; step < 12; ++step) {
    SequenceKv* w[] = {&wa, &wb, &wc};
    SequenceKv* x[] = {&xa, &xb, &xc};
    const std::vector<TokenId> next = {static_cast<TokenId>(100 + step), static_cast<TokenId>(200 + step),
                                       static_cast<TokenId>(300 + step)};
    ASSERT_TRUE(whole->decode(w, next, want).ok());
    ASSERT_TRUE(windowed->decode(x, next, got).ok());
    ASSERT_EQ(got, want) << "step " << step;
  }
  // Directly driven (no scheduler), a sequence gives its old window blocks back at its next reservation: what it
  // holds is its last window and one step's positions, never its whole length.
  const int bt = 4, window = config_.sliding_window;
  EXPECT_LE(held(xa), (window - 1 + bt - 1) / bt + 2);
  EXPECT_EQ(xa.blocks.size(), (37u + 12 + 3) / 4);
}

TEST_P(WindowRunner, APromptLongerThanTheWindowPoolIsTakenChunkByChunk) {
  // Chunks of 7 with the window of 8 before them span at most 14 positions, 5 blocks of 4: a pool of 5 takes a prompt
  // of 100 (25 blocks) chunk by chunk; a pool of 4 is refused before anything is computed or held.
  auto whole = make(false), roomy = make(true, false, 5), tight = make(true, false, 4);
  ASSERT_TRUE(whole && roomy && tight);
  ASSERT_EQ(config_.sliding_window, 8);
  const std::vector<TokenId> prompt = tokens(100, 3);
  SequenceKv w, r, t;
  std::vector<float> want, got;
  ASSERT_TRUE(whole->prefill(w, prompt, want).ok());
  Status st = roomy->prefill(r, prompt, got);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(got, want);
  EXPECT_EQ(r.length, 100);
  st = tight->prefill(t, prompt, got);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_EQ(t.length, 0);
  EXPECT_TRUE(t.blocks.empty());
  EXPECT_EQ(tight->kv_cache().window_pool().available(), 4);
  EXPECT_EQ(tight->kv_cache().blocks().available(), tight->kv_cache().num_blocks());
  // A cache sized for one short sequence (as `tessera generate` sizes it: 3 blocks for 10 positions and 2 more) caps
  // the window pool at those 3, which is all this prompt's chunks ever hold.
  auto small = make(true, false, 0, 3);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->kv_cache().window_pool().num_blocks(), 3);
  SequenceKv w2, s2;
  ASSERT_TRUE(whole->prefill(w2, std::span(prompt).first(10), want).ok());
  st = small->prefill(s2, std::span(prompt).first(10), got);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(got, want);
  for (TokenId next : {TokenId{40}, TokenId{41}}) {
    SequenceKv* w[] = {&w2};
    SequenceKv* x[] = {&s2};
    ASSERT_TRUE(whole->decode(w, std::span(&next, 1), want).ok());
    ASSERT_TRUE(small->decode(x, std::span(&next, 1), got).ok());
    EXPECT_EQ(got, want);
  }
}

TEST_P(WindowRunner, GraphDecodeWithAWindowedCacheGivesTheEagerLogits) {
  if (!device_->info().supports_graphs) GTEST_SKIP() << GetParam().device << " records no graphs";
  auto eager = make(false), graph = make(true, /*graph=*/true);
  ASSERT_TRUE(eager && graph);
  ASSERT_TRUE(graph->kv_cache().windowed());
  SequenceKv e, g;
  std::vector<float> want, got;
  ASSERT_TRUE(eager->prefill(e, tokens(30, 9), want).ok());
  ASSERT_TRUE(graph->prefill(g, tokens(30, 9), got).ok());
  for (int step = 0; step < 12; ++step) {
    SequenceKv* es[] = {&e};
    SequenceKv* gs[] = {&g};
    const TokenId t = static_cast<TokenId>(40 + step);
    ASSERT_TRUE(eager->decode(es, std::span(&t, 1), want).ok());
    ASSERT_TRUE(graph->decode(gs, std::span(&t, 1), got).ok());
    ASSERT_EQ(got, want) << "step " << step;
  }
  EXPECT_FALSE(graph->graphs().empty());
}

std::vector<RunnerCase> runner_cases() {
  std::vector<RunnerCase> out;
  for (const char* device : {"ref", "cpu", "opencl"}) {
    for (const char* shape : {"gemma2-2b", "gpt-oss-20b", "gemma4-e2b", "phi3-mini"}) out.push_back({shape, device});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, WindowRunner, ::testing::ValuesIn(runner_cases()), [](const auto& info) {
  std::string n = info.param.shape + "_" + info.param.device;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// Through the engine (scheduler, prefix cache, choices): the same greedy tokens as a cache keeping every position.
class WindowEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = model::synth_shape_small("gemma2-2b");
    ASSERT_TRUE(c.ok());
    c->max_seq_len = 256;
    model_ = std::make_unique<model::SynthModel>(model::synthesize_weights(*c, 11));
    tokenizer_ = model::synthesize_tokenizer(c->vocab_size, 11);
    device_ = std::move(ops::open_device("cpu", 0, ops::DeviceOptions{2, ""}).value());
  }
  struct Served {
    std::unique_ptr<ModelRunner> runner;
    std::unique_ptr<Engine> engine;
  };
  Served start(bool window, int max_sequences, int window_blocks = 0,
               const std::vector<std::shared_ptr<KvConnector>>& connectors = {}) {
    Served s;
    RunnerOptions ro;
    ro.max_batch_tokens = 16;
    ro.max_sequences = max_sequences;
    ro.kv.block_tokens = 4;
    ro.kv.num_blocks = 256;
    ro.kv.window_kv = window;
    ro.kv.window_blocks = window_blocks;
    s.runner = std::move(ModelRunner::create(*device_, model_->config, model_->weights, ro).value());
    EngineOptions eo;
    eo.scheduler.max_batch_tokens = 16;
    eo.scheduler.max_running = max_sequences;
    s.engine = std::make_unique<Engine>(*s.runner, *tokenizer_, eo);
    for (const auto& c : connectors) EXPECT_TRUE(s.engine->add_connector(c).ok()) << c->name();
    s.engine->start();
    return s;
  }
  struct Out {
    std::vector<std::vector<TokenId>> tokens;  // per choice
    int cached = 0;
    bool ok = true;
  };
  static std::future<Out> submit(Engine& e, std::vector<TokenId> prompt, int n = 1,
                                 std::shared_ptr<const KvTransferParams> kv = nullptr, int max_tokens = 24) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.kv_transfer = std::move(kv);
    r.ignore_eos = true;
    r.n = n;
    auto done = std::make_shared<std::promise<Out>>();
    auto acc = std::make_shared<Out>();
    acc->tokens.resize(static_cast<size_t>(n));
    auto left = std::make_shared<int>(n);
    auto id = e.submit(std::move(r), [done, acc, left](const RequestOutput& o) {
      auto& t = acc->tokens[static_cast<size_t>(o.index)];
      t.insert(t.end(), o.tokens.begin(), o.tokens.end());
      acc->cached = std::max(acc->cached, o.cached_tokens);
      if (o.finish == FinishReason::kNone) return;
      acc->ok = acc->ok && o.error.ok();
      if (--*left == 0) done->set_value(*acc);
    });
    if (!id.ok()) {
      Out failed;
      failed.ok = false;
      done->set_value(failed);
    }
    return done->get_future();
  }
  std::unique_ptr<model::SynthModel> model_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<ops::Device> device_;
};

TEST_F(WindowEngine, ConcurrentPromptsPrefixHitsAndChoicesGiveTheWholeCachesTokens) {
  const std::vector<TokenId> shared = tokens(41, 300);
  std::vector<TokenId> other = tokens(29, 300);  // parts from `shared` after 29 tokens
  for (int i = 0; i < 9; ++i) other.push_back(static_cast<TokenId>(470 + i));
  const std::vector<std::vector<TokenId>> prompts = {shared, tokens(55, 400), tokens(12, 20), other};  // vocab 512
  std::vector<Out> want;
  {
    Served whole = start(false, 4);
    for (const auto& p : prompts) want.push_back(submit(*whole.engine, p).get());
    want.push_back(submit(*whole.engine, shared, 3).get());
    for (const Out& o : want) ASSERT_TRUE(o.ok && o.tokens[0].size() == 24);
  }
  {
    // All four at once: the window pool is sized for max_sequences of them (20 blocks of 4 here), and each prompt of
    // up to 55 tokens goes through it in steps of 16.
    Served s = start(true, 4);
    ASSERT_TRUE(s.runner->kv_cache().windowed());
    EXPECT_EQ(s.runner->kv_cache().window_pool().num_blocks(), 20);
    std::vector<std::future<Out>> at_once;
    for (const auto& p : prompts) at_once.push_back(submit(*s.engine, p));
    for (size_t i = 0; i < prompts.size(); ++i) {
      Out o = at_once[i].get();
      ASSERT_TRUE(o.ok) << i;
      EXPECT_EQ(o.tokens, want[i].tokens) << "prompt " << i;
    }
  }
  // One after another, with room in the window pool for what the prefix cache keeps: `other` finds the 28 tokens it
  // shares with `shared` (7 blocks, whose window, blocks 5 and 6, `shared` gave back registered), and `shared` again
  // its whole prompt but the last token's block.
  Served s = start(true, 4, 64);
  Out first = submit(*s.engine, shared).get();
  Out parted = submit(*s.engine, other).get();
  Out again = submit(*s.engine, shared).get();
  ASSERT_TRUE(first.ok && parted.ok && again.ok);
  EXPECT_EQ(first.tokens, want[0].tokens);
  EXPECT_EQ(parted.tokens, want[3].tokens);
  EXPECT_EQ(again.tokens, want[0].tokens);
  EXPECT_EQ(first.cached, 0);
  EXPECT_EQ(parted.cached, 28);
  EXPECT_EQ(again.cached, 40);
  // Three choices of one prompt share its blocks (forked): each the whole cache's tokens.
  Out choices = submit(*s.engine, shared, 3).get();
  ASSERT_TRUE(choices.ok);
  EXPECT_EQ(choices.tokens, want.back().tokens);
}

// A prefill/decode hand-off between two windowed caches (what the pd-link connector does): the prefill side's
// sliding layers send the rows their window still holds (zeros for older positions, which no later step reads),
// the decode side keeps only the window of what arrives. Its greedy tokens are the whole cache's; it computes no
// prompt position, and its window pool, sized for one sequence, never holds a prompt's worth (a load reserved
// window blocks for every position before, and a 55-token prompt then waited for blocks forever).
TEST_F(WindowEngine, AHandOffBetweenWindowedCachesContinuesAsTheWholeCache) {
  using testing::LoadingConnector;
  using testing::LoadParams;
  using testing::SaveParams;
  using testing::SavingConnector;
  const std::vector<TokenId> shared = tokens(41, 300);
  std::vector<TokenId> longer = tokens(40, 300);  // shared's first 40, then its own 15: a prefix hit at the saver
  for (int i = 0; i < 15; ++i) longer.push_back(static_cast<TokenId>(450 + i));
  const std::vector<std::vector<TokenId>> prompts = {shared, longer};
  std::vector<Out> want;
  {
    Served whole = start(false, 1);
    for (const auto& p : prompts) want.push_back(submit(*whole.engine, p).get());
  }
  auto saver = std::make_shared<SavingConnector>();
  Served prefill = start(true, 1, 64, {saver});
  auto loader = std::make_shared<LoadingConnector>(LoadingConnector::Options{.auto_complete = true});
  Served decode = start(true, 1, 0, {loader});
  ASSERT_TRUE(prefill.runner->kv_cache().windowed() && decode.runner->kv_cache().windowed());
  const int pool = decode.runner->kv_cache().window_pool().num_blocks();
  EXPECT_LT(pool, 14) << "the decode side's pool must be smaller than a 55-token prompt's blocks of 4";
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    auto save = std::make_shared<SaveParams>();
    save->out = std::make_shared<std::vector<uint8_t>>();
    Out first = submit(*prefill.engine, prompts[i], 1, save, 1).get();
    ASSERT_TRUE(first.ok && first.tokens[0].size() == 1u);
    EXPECT_EQ(first.cached, i == 0 ? 0 : 40) << "the second prompt finds the first's 40 tokens on the prefill side";
    auto load = std::make_shared<LoadParams>();
    load->kv = save->out;
    load->prompt_len = static_cast<int>(prompts[i].size());
    load->first_tokens = first.tokens[0];
    const EngineStats before = decode.engine->stats();
    std::future<Out> got = submit(*decode.engine, prompts[i], 1, load);
    ASSERT_EQ(got.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the load never got its blocks";
    const Out o = got.get();
    ASSERT_TRUE(o.ok);
    EXPECT_EQ(o.tokens, want[i].tokens);
    // The stats are published after each step: the last one may trail the request's end by a moment.
    EngineStats after = decode.engine->stats();
    for (int t = 0; t < 100 && (after.window_blocks_used != 0 || after.kv_loaded_tokens == before.kv_loaded_tokens);
         ++t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      after = decode.engine->stats();
    }
    // Every position the decode side's own prefix cache did not hold arrived; none was computed there.
    EXPECT_EQ(after.kv_loaded_tokens - before.kv_loaded_tokens + static_cast<uint64_t>(o.cached), prompts[i].size());
    EXPECT_EQ(after.prompt_tokens - before.prompt_tokens + static_cast<uint64_t>(o.cached), prompts[i].size());
    EXPECT_EQ(after.window_blocks_used, 0);
  }
  // Asked for real rows from position 0 (a decode node that keeps every position), the saving side takes from its
  // prefix cache only the prefix whose window blocks hold rows from 0 on (1 block of 4 with a window of 8, not the
  // 40 tokens it has): what it saves is a whole cache's save, byte for byte.
  {
    auto whole_saver = std::make_shared<SavingConnector>();
    Served whole = start(false, 1, 0, {whole_saver});
    auto want_rows = std::make_shared<SaveParams>();
    want_rows->out = std::make_shared<std::vector<uint8_t>>();
    ASSERT_TRUE(submit(*whole.engine, longer, 1, want_rows, 1).get().ok);
    auto save = std::make_shared<SaveParams>();
    save->out = std::make_shared<std::vector<uint8_t>>();
    GenerationRequest r;
    r.prompt = longer;
    r.sampling.temperature = 0;
    r.max_tokens = 1;
    r.kv_transfer = save;
    r.real_rows_from = 0;
    auto done = std::make_shared<std::promise<int>>();
    ASSERT_TRUE(prefill.engine
                    ->submit(std::move(r),
                             [done](const RequestOutput& o) {
                               if (o.finish != FinishReason::kNone) done->set_value(o.cached_tokens);
                             })
                    .ok());
    EXPECT_EQ(done->get_future().get(), 4);
    EXPECT_TRUE(*save->out == *want_rows->out) << "a row differs from the whole cache's";
  }
  // A load that comes short (20 of the promised positions arrive), and one whose rows fail their check: the decode
  // side gives back the window blocks it took for the end of the prompt and computes the rest (the first 20 rows are
  // written during the step that continues from them, into the window blocks it reads), and gives the whole cache's
  // tokens. Holding those blocks, a pool sized for one sequence had no room to compute, and the request waited.
  for (const bool fail : {false, true}) {
    SCOPED_TRACE(fail ? "a load that fails" : "a load that comes short");
    const std::vector<TokenId> third = tokens(45, fail ? 150 : 100);  // no prefix on the decode side
    auto save = std::make_shared<SaveParams>();
    save->out = std::make_shared<std::vector<uint8_t>>();
    Out first = submit(*prefill.engine, third, 1, save, 1).get();
    ASSERT_TRUE(first.ok && first.tokens[0].size() == 1u);
    std::vector<TokenId> want_third;
    {
      Served whole = start(false, 1);
      want_third = submit(*whole.engine, third).get().tokens[0];
    }
    auto load = std::make_shared<LoadParams>();
    load->kv = save->out;
    load->prompt_len = static_cast<int>(third.size());
    load->first_tokens = first.tokens[0];
    load->deliver = fail ? -1 : 20;
    load->fail = fail;
    const uint64_t shortfalls = decode.engine->stats().kv_load_shortfalls;
    std::future<Out> got = submit(*decode.engine, third, 1, load);
    ASSERT_EQ(got.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    const Out o = got.get();
    ASSERT_TRUE(o.ok);
    EXPECT_EQ(o.tokens[0], want_third);
    EXPECT_EQ(decode.engine->stats().kv_load_shortfalls, shortfalls + 1);
  }
}

}  // namespace
}  // namespace tessera::engine
