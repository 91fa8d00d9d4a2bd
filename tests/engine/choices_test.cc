// The sampling and batching fields of a request at the engine: n choices from one prefill with copy-on-write KV
// (each choice equal to a single run with its own seed), prompt_logprobs equal to the log-softmax of a fresh
// prefill of each prefix, min_tokens, logit_bias, and seed 0 as a seed like any other. stories260K on the ref
// backend.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <map>
#include <set>

#include "engine/engine.h"
#include "engine/kv_fork.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::engine {
namespace {

const char* kLong = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";

struct Choice {
  std::vector<TokenId> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  Status error;
  int completion_tokens = 0;
  std::vector<TokenLogprobs> prompt_logprobs;
};

class EngineChoices : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto m = model::load_model(testing::stories260k_dir());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    device_ = std::move(ops::open_device("ref").value());
  }
  void start(int num_blocks, SchedulerOptions so = {}, int block_tokens = 16) {
    RunnerOptions ro;
    ro.max_batch_tokens = so.max_batch_tokens;
    ro.kv.block_tokens = block_tokens;
    ro.kv.num_blocks = num_blocks;
    runner_ = std::move(ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    engine_ = std::make_unique<Engine>(*runner_, *model_.tokenizer, EngineOptions{so});
    engine_->start();
  }
  // Every choice's outputs, by index, once each has ended.
  std::map<int, Choice> run(GenerationRequest r, Status* submit_status = nullptr, RequestId* id_out = nullptr) {
    struct State {
      std::mutex mu;
      std::map<int, Choice> choices;
      int ended = 0;
      std::promise<void> done;
    };
    auto st = std::make_shared<State>();
    const int n = r.n;
    auto id = engine_->submit(std::move(r), [st, n](const RequestOutput& o) {
      std::lock_guard<std::mutex> lock(st->mu);
      Choice& c = st->choices[o.index];
      c.tokens.insert(c.tokens.end(), o.tokens.begin(), o.tokens.end());
      c.text += o.text;
      if (!o.prompt_logprobs.empty()) c.prompt_logprobs = o.prompt_logprobs;
      c.completion_tokens = o.completion_tokens;
      if (o.finish != FinishReason::kNone) {
        c.finish = o.finish;
        c.error = o.error;
        if (++st->ended == n) st->done.set_value();
      }
    });
    if (submit_status) *submit_status = id.status();
    if (!id.ok()) return {};
    if (id_out) *id_out = *id;
    auto f = st->done.get_future();
    EXPECT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    std::lock_guard<std::mutex> lock(st->mu);
    return st->choices;
  }
  GenerationRequest request(const std::string& prompt, int max_tokens, float temperature = 0.0f) {
    GenerationRequest r;
    r.prompt = model_.tokenizer->encode(prompt, true);
    r.sampling.temperature = temperature;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }

  model::LoadedModel model_;
  std::unique_ptr<ops::Device> device_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Engine> engine_;
};

// n choices cost one prefill, and choice i is exactly the single run seeded with seed + i: the forked KV (shared
// full blocks, a copied partial block) holds what a prefill of its own would have.
TEST_F(EngineChoices, NChoicesPrefillOnceAndEachEqualsItsSeededSingleRun) {
  start(256, {.max_batch_tokens = 64, .max_running = 16});
  for (const std::string& prompt :
       {std::string("Once upon a time, there was a little"), std::string("The cat sat on the mat and")}) {
    GenerationRequest r = request(prompt, 24, 0.9f);
    r.sampling.seed = 7;
    r.n = 4;
    const int prompt_len = static_cast<int>(r.prompt.size());
    const uint64_t before = engine_->stats().prompt_tokens;
    std::map<int, Choice> choices = run(r);
    ASSERT_EQ(choices.size(), 4u);
    EXPECT_EQ(engine_->stats().prompt_tokens - before, static_cast<uint64_t>(prompt_len)) << "one prefill";
    std::set<std::vector<TokenId>> distinct;
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(choices[i].finish, FinishReason::kLength) << choices[i].error.to_string();
      EXPECT_EQ(choices[i].completion_tokens, 24);
      distinct.insert(choices[i].tokens);
      GenerationRequest single = request(prompt, 24, 0.9f);
      single.sampling.seed = 7 + i;
      std::map<int, Choice> one = run(single);
      EXPECT_EQ(choices[i].tokens, one[0].tokens)
          << "choice " << i << " of '" << prompt << "' (" << prompt_len << " prompt tokens)";
    }
    EXPECT_GT(distinct.size(), 1u) << "different seeds draw different choices";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(engine_->stats().kv_blocks_used, 0) << "every shared and copied block goes back";
}

// A prompt of exactly one block: nothing to copy, each choice's next token opens a block of its own.
TEST_F(EngineChoices, AWholeBlockPromptIsSharedWithoutACopy) {
  start(64, {.max_batch_tokens = 64}, 4);
  GenerationRequest r = request("Once upon a time", 12);
  r.prompt.resize(8);  // two whole blocks of 4
  r.n = 3;
  std::map<int, Choice> choices = run(r);
  GenerationRequest single = r;
  single.n = 1;
  const std::vector<TokenId> want = run(single)[0].tokens;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(choices[i].tokens, want) << "greedy: every choice is the one answer";
}

// No block is free for the copy of the partial block: that choice computes the prompt again when there is room,
// and still equals its single run.
TEST_F(EngineChoices, AChoiceWithoutRoomForItsCopyIsRecomputed) {
  start(2, {.max_batch_tokens = 64}, 16);  // the prompt and its 10 new tokens fill both blocks; none is left
  GenerationRequest r = request(kLong, 10, 1.0f);
  ASSERT_GE(r.prompt.size(), 20u);
  r.prompt.resize(20);
  r.sampling.seed = 11;
  r.n = 2;
  const uint64_t before = engine_->stats().prompt_tokens;
  std::map<int, Choice> choices = run(r);
  // The second choice computed the 4 prompt tokens past the cached whole block again.
  EXPECT_EQ(engine_->stats().prompt_tokens - before, 24u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(choices[i].finish, FinishReason::kLength) << choices[i].error.to_string();
    GenerationRequest single = r;
    single.n = 1;
    single.sampling.seed = 11 + i;
    EXPECT_EQ(choices[i].tokens, run(single)[0].tokens) << "choice " << i;
  }
}

TEST_F(EngineChoices, CancellingTheRequestEndsEveryChoice) {
  start(64, {.max_batch_tokens = 8});
  GenerationRequest r = request("Once upon a time", 400, 1.0f);
  r.n = 3;
  auto ended = std::make_shared<std::atomic<int>>(0);
  auto done = std::make_shared<std::promise<void>>();
  auto id = engine_->submit(r, [ended, done](const RequestOutput& o) {
    if (o.finish == FinishReason::kCancelled && ++*ended == 3) done->set_value();
  });
  ASSERT_TRUE(id.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  engine_->cancel(*id);
  ASSERT_EQ(done->get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(engine_->stats().kv_blocks_used, 0);
}

TEST_F(EngineChoices, ForkedKvHoldsTheSameRowsInItsOwnTailBlock) {
  start(16, {}, 16);
  SequenceKv a;
  std::vector<float> logits;
  std::vector<TokenId> prompt = model_.tokenizer->encode(kLong, true);
  ASSERT_GE(prompt.size(), 20u);
  prompt.resize(20);
  ASSERT_TRUE(engine_->run_on_engine_thread([&] { ASSERT_TRUE(runner_->prefill(a, prompt, logits).ok()); }).ok());
  SequenceKv b;
  Status st;
  ASSERT_TRUE(engine_->run_on_engine_thread([&] { st = fork_kv(*runner_, a, b); }).ok());
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(b.length, a.length);
  ASSERT_EQ(b.blocks.size(), 2u);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_NE(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(runner_->kv_cache().blocks().ref_count(a.blocks[0]), 2);
  const size_t kv_dim = static_cast<size_t>(model_.config.kv_dim());
  for (int l = 0; l < model_.config.n_layers; ++l) {
    std::vector<float> ka(a.length * kv_dim), va(ka.size()), kb(ka.size()), vb(ka.size());
    ASSERT_TRUE(runner_->export_kv(a, l, 0, a.length, DType::kF32, ka.data(), va.data()).ok());
    ASSERT_TRUE(runner_->export_kv(b, l, 0, b.length, DType::kF32, kb.data(), vb.data()).ok());
    EXPECT_EQ(ka, kb) << "layer " << l;
    EXPECT_EQ(va, vb) << "layer " << l;
  }
  ASSERT_TRUE(engine_
                  ->run_on_engine_thread([&] {
                    runner_->release(a);
                    runner_->release(b);
                  })
                  .ok());
}

// prompt_logprobs: position p holds log_softmax(logits after tokens [0, p))[token p], the same numbers a fresh
// prefill of that prefix gives, with the top alternatives and the prompt token's rank.
TEST_F(EngineChoices, PromptLogprobsEqualAFreshPrefillOfEachPrefix) {
  start(64, {.max_batch_tokens = 8});  // several chunks
  GenerationRequest r = request("Once upon a time, there was a little girl named Lily", 2);
  r.prompt_logprobs = 3;
  r.n = 2;
  // The same prompt once before: a prefix-cache hit must not stand in for rows whose logits are needed.
  run(request("Once upon a time, there was a little girl named Lily", 1));
  std::map<int, Choice> out = run(r);
  const std::vector<TokenId>& prompt = r.prompt;
  for (int c = 0; c < 2; ++c) ASSERT_EQ(out[c].prompt_logprobs.size(), prompt.size() - 1) << "choice " << c;
  auto fresh = ModelRunner::create(*device_, model_.config, model_.weights, RunnerOptions{}).value();
  for (size_t p = 1; p < prompt.size(); ++p) {
    SequenceKv seq;
    std::vector<float> logits;
    ASSERT_TRUE(fresh->prefill(seq, std::span(prompt).first(p), logits).ok());
    fresh->release(seq);
    double mx = logits[0], sum = 0;
    for (float v : logits) mx = std::max<double>(mx, v);
    for (float v : logits) sum += std::exp(v - mx);
    const double want = logits[static_cast<size_t>(prompt[p])] - mx - std::log(sum);
    const TokenLogprobs& got = out[0].prompt_logprobs[p - 1];
    EXPECT_EQ(got.token, prompt[p]);
    EXPECT_NEAR(got.logprob, want, 1e-4) << "position " << p;
    ASSERT_EQ(got.top.size(), 3u);
    int rank = 1;
    for (float v : logits) rank += v > logits[static_cast<size_t>(prompt[p])] ? 1 : 0;
    EXPECT_EQ(got.rank, rank) << "position " << p;
    EXPECT_EQ(out[1].prompt_logprobs[p - 1].logprob, got.logprob) << "every choice carries the prompt's";
  }
}

TEST_F(EngineChoices, MinTokensMasksStopTokensAndLogitBiasSteers) {
  start(64);
  const TokenId eos = model_.tokenizer->eos_id();
  GenerationRequest r = request("Once upon a time", 20);
  r.ignore_eos = false;
  r.sampling.logit_bias = {{eos, 100.0f}};
  Choice at_once = run(r)[0];
  EXPECT_EQ(at_once.finish, FinishReason::kStop);
  EXPECT_EQ(at_once.tokens.size(), 0u) << "EOS is the first token and ends the request";
  r.sampling.min_tokens = 5;
  Choice held = run(r)[0];
  EXPECT_EQ(held.finish, FinishReason::kStop);
  EXPECT_EQ(held.tokens.size(), 5u) << "five tokens before EOS may be chosen";
  for (TokenId t : held.tokens) EXPECT_NE(t, eos);
  // A stop token id is masked the same way.
  GenerationRequest s = request("Once upon a time", 20);
  s.sampling.logit_bias = {{300, 100.0f}};
  s.stop_token_ids = {300};
  s.sampling.min_tokens = 3;
  Choice stopped = run(s)[0];
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_EQ(stopped.tokens.size(), 3u);
  // +100 on one token makes greedy choose it every time; -100 on the greedy choice removes it.
  GenerationRequest steer = request("Once upon a time", 6);
  steer.sampling.logit_bias = {{300, 100.0f}};
  EXPECT_EQ(run(steer)[0].tokens, std::vector<TokenId>(6, 300));
  GenerationRequest plain = request("Once upon a time", 1);
  const TokenId greedy = run(plain)[0].tokens.at(0);
  plain.sampling.logit_bias = {{greedy, -100.0f}};
  EXPECT_NE(run(plain)[0].tokens.at(0), greedy);
}

TEST_F(EngineChoices, StopStringsWaitForMinTokens) {
  start(64);
  Choice free_run = run(request("Once upon a time", 30))[0];
  ASSERT_GE(free_run.text.size(), 12u);
  const std::string stop = free_run.text.substr(0, 4);  // in the first tokens' text
  GenerationRequest r = request("Once upon a time", 30);
  r.stop = {stop};
  const size_t early = run(r)[0].text.size();
  EXPECT_EQ(early, 0u) << "without min_tokens the stop string ends it at once";
  r.sampling.min_tokens = 10;
  Choice late = run(r)[0];
  EXPECT_GT(late.tokens.size(), 9u) << "the first occurrence comes before min_tokens and does not stop it";
}

TEST_F(EngineChoices, SeedZeroIsReproducible) {
  start(64);
  GenerationRequest r = request("Once upon a time", 30, 1.0f);
  r.sampling.seed = 0;
  const std::vector<TokenId> a = run(r)[0].tokens, b = run(r)[0].tokens;
  EXPECT_EQ(a, b);
  r.sampling.seed.reset();
  const std::vector<TokenId> c = run(r)[0].tokens, d = run(r)[0].tokens;
  EXPECT_NE(c, d) << "without a seed two runs draw differently (30 tokens at temperature 1)";
}

TEST_F(EngineChoices, BadFieldsAreRejectedAtSubmission) {
  start(64);
  Status st;
  GenerationRequest r = request("x", 3);
  r.n = kMaxChoices + 1;
  run(r, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  r = request("x", 3);
  r.sampling.min_tokens = 4;
  run(r, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  r = request("x", 3);
  r.sampling.logit_bias = {{model_.config.vocab_size, 1.0f}};
  run(r, &st);
  EXPECT_NE(st.message().find("vocabulary"), std::string::npos) << st.message();
  r = request("x", 3);
  r.prompt_logprobs = 21;
  run(r, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::engine
