// The engine's side of the KV connector contract (engine/kv_connector.h), with real engines on stories260K: KV
// saved by one engine and supplied to another (at once, later, in part, with the first tokens), requests cancelled
// or preempted while loads are pending, blocks a connector keeps, evictions reported before reuse. Every output
// must equal single-sequence generation, and the block manager's counts must come back to where they started.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/test_connectors.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::engine {
namespace {

using namespace std::chrono_literals;
using testing::LoadingConnector;
using testing::LoadParams;
using testing::SaveParams;
using testing::SavingConnector;

struct Collected {
  std::string text;
  std::vector<TokenId> tokens;
  FinishReason finish = FinishReason::kNone;
  Status error;
  int cached_tokens = 0;
};

class KvConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto m = model::load_model(::tessera::testing::stories260k_dir());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    device_ = std::move(ops::open_device("ref").value());
  }
  struct Node {
    std::unique_ptr<ModelRunner> runner;
    std::unique_ptr<Engine> engine;
  };
  Node make(int num_blocks, SchedulerOptions so, int block_tokens, std::vector<std::shared_ptr<KvConnector>> cs,
            DType kv_dtype = DType::kF32) {
    RunnerOptions ro;
    ro.max_batch_tokens = so.max_batch_tokens;
    ro.kv.block_tokens = block_tokens;
    ro.kv.num_blocks = num_blocks;
    ro.kv.dtype = kv_dtype;
    Node n;
    n.runner = std::move(ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    n.engine = std::make_unique<Engine>(*n.runner, *model_.tokenizer, EngineOptions{so});
    for (auto& c : cs) EXPECT_TRUE(n.engine->add_connector(c).ok());
    n.engine->start();
    return n;
  }
  static std::future<Collected> submit(Engine& e, GenerationRequest r, RequestId* id_out = nullptr) {
    auto done = std::make_shared<std::promise<Collected>>();
    auto acc = std::make_shared<Collected>();
    auto id = e.submit(std::move(r), [done, acc](const RequestOutput& o) {
      acc->text += o.text;
      acc->tokens.insert(acc->tokens.end(), o.tokens.begin(), o.tokens.end());
      acc->cached_tokens = o.cached_tokens;
      if (o.finish != FinishReason::kNone) {
        acc->finish = o.finish;
        acc->error = o.error;
        done->set_value(*acc);
      }
    });
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    if (id_out && id.ok()) *id_out = *id;
    return done->get_future();
  }
  GenerationRequest greedy(const std::string& prompt, int max_tokens) {
    GenerationRequest r;
    r.prompt = model_.tokenizer->encode(prompt, true);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    return r;
  }
  std::string reference(const std::string& prompt, int max_tokens) {
    RunnerOptions ro;
    auto runner = ModelRunner::create(*device_, model_.config, model_.weights, ro).value();
    GenerateOptions go;
    go.max_tokens = max_tokens;
    go.echo_prompt = false;
    go.sampling.temperature = 0;
    std::string out;
    EXPECT_TRUE(generate(*runner, *model_.tokenizer, prompt, go, [&](std::string_view s) { out += s; }).ok());
    return out;
  }
  // The prompt's KV in the canonical layout (`dtype`), saved by an engine that computes it in chunks of 8, and the
  // first token that engine sampled.
  std::pair<std::shared_ptr<std::vector<uint8_t>>, TokenId> save_prompt(const std::string& prompt, DType dtype,
                                                                        int* layers_saved = nullptr) {
    auto saver = std::make_shared<SavingConnector>();
    Node p = make(64, {.max_batch_tokens = 8}, 16, {saver});
    auto params = std::make_shared<SaveParams>();
    params->out = std::make_shared<std::vector<uint8_t>>();
    params->dtype = dtype;
    GenerationRequest r = greedy(prompt, 1);
    r.kv_transfer = params;
    Collected first = submit(*p.engine, r).get();
    EXPECT_EQ(first.tokens.size(), 1u);
    p.engine->stop();
    if (layers_saved) *layers_saved = saver->layers_saved;
    return {params->out, first.tokens.empty() ? 0 : first.tokens[0]};
  }
  std::shared_ptr<LoadParams> load_params(const std::string& prompt, std::shared_ptr<std::vector<uint8_t>> kv,
                                          DType dtype) {
    auto p = std::make_shared<LoadParams>();
    p->kv = std::move(kv);
    p->dtype = dtype;
    p->prompt_len = static_cast<int>(model_.tokenizer->encode(prompt, true).size());
    return p;
  }
  static bool eventually(const std::function<bool()>& cond) {
    for (int i = 0; i < 500; ++i) {
      if (cond()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return cond();
  }

  model::LoadedModel model_;
  std::unique_ptr<ops::Device> device_;
  const std::string prompt_ = "Once upon a time, there was a little girl named Lily. She";
};

// Prefill on one engine, decode on another: the prompt's KV and first token arrive as one asynchronous load (what the
// pd-link connector does), in f32 and in f16 on the wire; the decoding engine continues exactly as one engine would
// (f32) or closely (f16), and enters the prompt once.
TEST_F(KvConnectorTest, KvComputedByAnotherEngineContinuesTheSameGeneration) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    int layers_saved = 0;
    auto [kv, first] = save_prompt(prompt_, dtype, &layers_saved);
    const int n = static_cast<int>(model_.tokenizer->encode(prompt_, true).size());
    EXPECT_EQ(layers_saved, model_.config.n_layers * ((n + 7) / 8)) << "every layer of every chunk of 8";
    auto loader = std::make_shared<LoadingConnector>(LoadingConnector::Options{.auto_complete = true});
    Node d = make(128, {.max_batch_tokens = 8}, 16, {loader});
    auto params = load_params(prompt_, kv, dtype);
    params->first_tokens = {first};
    GenerationRequest r = greedy(prompt_, 30);
    r.kv_transfer = params;
    Collected out = submit(*d.engine, r).get();
    if (dtype == DType::kF32) {
      EXPECT_EQ(out.text, reference(prompt_, 30));
    } else {
      EXPECT_EQ(out.text.substr(0, 20), reference(prompt_, 30).substr(0, 20)) << "f16 KV may drift late, not at once";
    }
    EXPECT_EQ(loader->allocations, 1);
    EXPECT_EQ(loader->layers_loaded, model_.config.n_layers) << "one load, every layer, outside any step";
    const EngineStats s = d.engine->stats();
    EXPECT_EQ(s.kv_loaded_tokens, static_cast<uint64_t>(n));
    EXPECT_EQ(s.prompt_tokens, static_cast<uint64_t>(n)) << "KV computed elsewhere counts as computed prompt tokens";
    EXPECT_EQ(s.kv_blocks_used, 0);
  }
}

// An asynchronous load without first tokens: the request holds its blocks and waits (computing nothing) until the
// connector reports the load, then computes only the positions the connector did not supply.
TEST_F(KvConnectorTest, AnAsynchronousLoadWaitsThenTheRestIsComputed) {
  auto [kv, first] = save_prompt(prompt_, DType::kF32);
  auto loader = std::make_shared<LoadingConnector>(LoadingConnector::Options{});
  Node d = make(64, {.max_batch_tokens = 64}, 16, {loader});
  const EngineStats before = d.engine->stats();
  GenerationRequest r = greedy(prompt_, 12);
  r.kv_transfer = load_params(prompt_, kv, DType::kF32);
  auto out = submit(*d.engine, r);
  ASSERT_TRUE(eventually([&] { return d.engine->stats().kv_loading == 1; }));
  EXPECT_EQ(out.wait_for(200ms), std::future_status::timeout) << "nothing is computed before the load ends";
  EXPECT_GT(d.engine->stats().kv_blocks_used, 0) << "its blocks are allocated while it waits";
  loader->complete_all();
  Collected c = out.get();
  EXPECT_EQ(c.text, reference(prompt_, 12));
  const int n = static_cast<int>(r.prompt.size());
  const EngineStats s = d.engine->stats();
  EXPECT_EQ(s.kv_loaded_tokens, static_cast<uint64_t>(n - 1)) << "every prompt position but the last";
  EXPECT_EQ(s.prompt_tokens - before.prompt_tokens, 1u) << "only the last prompt position is computed";
  EXPECT_EQ(c.cached_tokens, n - 1) << "cached positions, as the client's usage reports them";
  EXPECT_EQ(s.kv_blocks_used, before.kv_blocks_used);
  EXPECT_EQ(s.kv_loading, 0);
}

// A load that comes short (a corrupt block, a lost peer): the positions that did not arrive are computed here.
TEST_F(KvConnectorTest, ALoadThatComesShortIsCompletedByComputing) {
  auto [kv, first] = save_prompt(prompt_, DType::kF32);
  for (bool async : {true, false}) {
    auto loader = std::make_shared<LoadingConnector>(LoadingConnector::Options{.async = async, .auto_complete = true});
    Node d = make(64, {.max_batch_tokens = 64}, 16, {loader});
    GenerationRequest r = greedy(prompt_, 12);
    auto params = load_params(prompt_, kv, DType::kF32);
    params->deliver = async ? 5 : -1;  // a sync load cannot come short: it is in memory when promised
    if (async) params->first_tokens = {first};
    r.kv_transfer = params;
    Collected c = submit(*d.engine, r).get();
    EXPECT_EQ(c.text, reference(prompt_, 12)) << "async " << async;
    EXPECT_EQ(d.engine->stats().kv_load_shortfalls, async ? 1u : 0u);
    EXPECT_EQ(d.engine->stats().kv_blocks_used, 0);
  }
}

// Cancelled while its load is pending: the request ends cancelled, the connector hears it (aborted), and every
// block goes back; a late completion from the connector is ignored.
TEST_F(KvConnectorTest, CancellationMidLoadFreesEverything) {
  auto [kv, first] = save_prompt(prompt_, DType::kF32);
  auto loader = std::make_shared<LoadingConnector>(LoadingConnector::Options{});
  Node d = make(64, {.max_batch_tokens = 64}, 16, {loader});
  const int used_before = d.engine->stats().kv_blocks_used;
  GenerationRequest r = greedy(prompt_, 12);
  auto params = load_params(prompt_, kv, DType::kF32);
  params->first_tokens = {first};
  r.kv_transfer = params;
  RequestId id = 0;
  auto out = submit(*d.engine, r, &id);
  ASSERT_TRUE(eventually([&] { return d.engine->stats().kv_loading == 1; }));
  d.engine->cancel(id);
  Collected c = out.get();
  EXPECT_EQ(c.finish, FinishReason::kCancelled);
  loader->complete_all();  // too late: the request is gone
  ASSERT_TRUE(eventually([&] { return d.engine->stats().kv_blocks_used == used_before; }));
  EXPECT_EQ(d.engine->stats().kv_loading, 0);
  const auto ends = loader->ends_seen();
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].first, id);
  EXPECT_EQ(ends[0].second, KvEnd::kAborted);
  // The engine goes on serving.
  EXPECT_EQ(submit(*d.engine, greedy("Tom had a big red ball and", 8)).get().text,
            reference("Tom had a big red ball and", 8));
}

// A connector that still moves a request's KV when it ends keeps its blocks until it lets go.
TEST_F(KvConnectorTest, BlocksAConnectorKeepsAreFreedWhenItLetsGo) {
  auto [kv, first] = save_prompt(prompt_, DType::kF32);
  auto loader = std::make_shared<LoadingConnector>(
      LoadingConnector::Options{.async = false, .auto_complete = true, .hold_blocks = true});
  Node d = make(64, {.max_batch_tokens = 64}, 16, {loader});
  GenerationRequest r = greedy(prompt_, 8);
  r.kv_transfer = load_params(prompt_, kv, DType::kF32);
  EXPECT_EQ(submit(*d.engine, r).get().text, reference(prompt_, 8));
  std::this_thread::sleep_for(50ms);
  const int held = d.engine->stats().kv_blocks_used;
  EXPECT_GT(held, 0) << "held for the connector";
  loader->release_held();
  ASSERT_TRUE(eventually([&] { return d.engine->stats().kv_blocks_used == 0; }));
}

// Many requests with loads in a cache far too small for them all: sequences are preempted (the connector hears
// it), re-admitted and matched again; every output equals single-sequence generation and no block leaks.
TEST_F(KvConnectorTest, PreemptionWithLoadsChangesNoResultAndLeaksNoBlock) {
  const std::vector<std::string> prompts = {
      "Once upon a time, there was a little girl named Lily. She", "Lily went to the park with her mom and she saw",
      "The cat sat on the mat and looked at the big dog", "Tom had a big red ball and he liked to play"};
  std::vector<std::shared_ptr<LoadParams>> params;
  for (const std::string& p : prompts) params.push_back(load_params(p, save_prompt(p, DType::kF32).first, DType::kF32));
  auto loader = std::make_shared<LoadingConnector>(LoadingConnector::Options{.async = false});
  // 24 blocks of 4 tokens: room for one sequence (prompt + 40 tokens), far too few for four at once.
  Node d = make(24, {.max_batch_tokens = 16, .max_running = 4}, 4, {loader});
  std::vector<std::future<Collected>> outs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r = greedy(prompts[i], 40);
    r.kv_transfer = params[i];
    outs.push_back(submit(*d.engine, r));
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(outs[i].get().text, reference(prompts[i], 40)) << prompts[i];
  const EngineStats s = d.engine->stats();
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_GT(s.kv_loaded_tokens, 0u);
  EXPECT_EQ(s.kv_blocks_used, 0);
  int preempted = 0;
  for (const auto& [id, end] : loader->ends_seen()) preempted += end == KvEnd::kPreempted;
  EXPECT_GT(preempted, 0) << "connectors hear preemptions";
}

// Cached blocks the block manager evicts are reported, with their chain hashes, before anything overwrites them.
TEST_F(KvConnectorTest, EvictionsAreReportedBeforeTheBlocksAreReused) {
  auto watcher = std::make_shared<LoadingConnector>(LoadingConnector::Options{});
  Node d = make(8, {.max_batch_tokens = 64}, 8, {watcher});
  const std::vector<TokenId> a = model_.tokenizer->encode(prompt_, true);
  EXPECT_EQ(submit(*d.engine, greedy(prompt_, 4)).get().text, reference(prompt_, 4));
  // Other prompts push the first one's blocks out.
  for (const char* p : {"Lily went to the park with her mom and she saw a big", "The cat sat on the mat and looked"})
    submit(*d.engine, greedy(p, 16)).get();
  const EngineStats s = d.engine->stats();
  ASSERT_GT(s.prefix.evictions, 0u);
  ASSERT_TRUE(eventually([&] { return watcher->evictions_seen().size() == s.prefix.evictions; }));
  const std::vector<BlockHash> hashes = BlockManager::chain_hashes(a, 8);
  int found = 0;
  for (const EvictedBlock& e : watcher->evictions_seen())
    found += std::find(hashes.begin(), hashes.end(), e.hash) != hashes.end();
  EXPECT_GT(found, 0) << "the first prompt's full blocks, by their chain hashes";
}

TEST_F(KvConnectorTest, AConnectorNameIsAttachedOnce) {
  Node d = make(8, {}, 8, {std::make_shared<SavingConnector>()});
  Status again = d.engine->add_connector(std::make_shared<SavingConnector>());
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.to_string();
  EXPECT_TRUE(d.engine->add_connector(std::make_shared<LoadingConnector>(LoadingConnector::Options{})).ok())
      << "a running engine takes a new connector between steps";
}

}  // namespace
}  // namespace tessera::engine
