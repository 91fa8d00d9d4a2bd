// The engine with real concurrency: results must equal one-at-a-time generation, whatever the batching,
// chunking, preemption or prefix caching did.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "engine/generator.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::engine {
namespace {

struct Collected {
  std::string text;
  std::vector<TokenId> tokens;
  FinishReason finish = FinishReason::kNone;
  Status error;
  int outputs = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  std::vector<TokenLogprobs> logprobs;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto m = model::load_model(testing::stories260k_dir());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    device_ = std::move(ops::open_device("ref").value());
  }
  void start(int num_blocks, SchedulerOptions so, int block_tokens = 16) {
    RunnerOptions ro;
    ro.max_batch_tokens = so.max_batch_tokens;
    ro.kv.block_tokens = block_tokens;
    ro.kv.num_blocks = num_blocks;
    runner_ = std::move(ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    engine_ = std::make_unique<Engine>(*runner_, *model_.tokenizer, EngineOptions{so});
    engine_->start();
  }
  // Submits and returns a future of everything the callback saw.
  std::future<Collected> submit(GenerationRequest r, Status* submit_status = nullptr) {
    return submit_to(*engine_, std::move(r), submit_status);
  }
  static std::future<Collected> submit_to(Engine& engine, GenerationRequest r, Status* submit_status = nullptr) {
    auto done = std::make_shared<std::promise<Collected>>();
    auto acc = std::make_shared<Collected>();
    auto id = engine.submit(std::move(r), [done, acc](const RequestOutput& o) {
      acc->text += o.text;
      acc->tokens.insert(acc->tokens.end(), o.tokens.begin(), o.tokens.end());
      acc->logprobs.insert(acc->logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      acc->outputs++;
      acc->completion_tokens = o.completion_tokens;
      acc->cached_tokens = o.cached_tokens;
      if (o.finish != FinishReason::kNone) {
        acc->finish = o.finish;
        acc->error = o.error;
        done->set_value(*acc);
      }
    });
    if (submit_status) *submit_status = id.status();
    if (!id.ok()) done->set_value(Collected{});
    return done->get_future();
  }
  GenerationRequest greedy(const std::string& prompt, int max_tokens) {
    GenerationRequest r;
    r.prompt = model_.tokenizer->encode(prompt, true);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    return r;
  }
  // The single-sequence path of `tessera generate`, for comparison.
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

  model::LoadedModel model_;
  std::unique_ptr<ops::Device> device_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Engine> engine_;
  const std::vector<std::string> prompts_ = {
      "Once upon a time", "Lily went to the park",      "The cat sat", "Tom had a big red ball and",
      "One day",          "She was very happy because", "The sun",     "A little dog named Max"};
};

TEST_F(EngineTest, ConcurrentGreedyRequestsMatchSingleSequenceGeneration) {
  start(256, {.max_batch_tokens = 64, .max_running = 8});
  std::vector<std::future<Collected>> futures;
  for (const std::string& p : prompts_) futures.push_back(submit(greedy(p, 48)));
  for (size_t i = 0; i < prompts_.size(); ++i) {
    Collected c = futures[i].get();
    EXPECT_EQ(c.text, reference(prompts_[i], 48)) << prompts_[i];
    EXPECT_TRUE(c.finish == FinishReason::kLength || c.finish == FinishReason::kStop);
    EXPECT_GT(c.outputs, 1) << "tokens should stream, not arrive at the end";
  }
  EngineStats s = engine_->stats();
  EXPECT_EQ(s.kv_blocks_used, 0) << "every block returns to the pool";
  EXPECT_EQ(s.running, 0);
}

TEST_F(EngineTest, PreemptionUnderMemoryPressureDoesNotChangeResults) {
  // 16 blocks of 4 tokens: room for any one sequence (prompt + 40 tokens), far too few for 8 at once.
  start(16, {.max_batch_tokens = 16, .max_running = 8}, 4);
  std::vector<std::future<Collected>> futures;
  for (const std::string& p : prompts_) futures.push_back(submit(greedy(p, 40)));
  for (size_t i = 0; i < prompts_.size(); ++i) {
    Collected c = futures[i].get();
    EXPECT_EQ(c.text, reference(prompts_[i], 40)) << prompts_[i] << " finish " << finish_reason_name(c.finish)
                                                  << " tokens " << c.completion_tokens << " " << c.error.to_string();
  }
  EngineStats s = engine_->stats();
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

// The model's end-of-generation list (EngineOptions::end_of_generation) replaces EOS/BOS, and a special
// token that does not end generation is spelled in the text only when skip_special_tokens is false.
TEST_F(EngineTest, EndOfGenerationListAndSkipSpecialTokens) {
  start(256, {.max_batch_tokens = 64, .max_running = 4});
  Collected free_run = submit(greedy("Once upon a time", 24)).get();
  ASSERT_GE(free_run.tokens.size(), 4u);
  const TokenId third = free_run.tokens[2];
  engine_->stop();
  engine_ = std::make_unique<Engine>(*runner_, *model_.tokenizer,
                                     EngineOptions{{.max_batch_tokens = 64, .max_running = 4}, {third}});
  engine_->start();
  Collected stopped = submit(greedy("Once upon a time", 24)).get();
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_EQ(stopped.tokens, std::vector<TokenId>(free_run.tokens.begin(), free_run.tokens.begin() + 2));

  // Only EOS ends generation: stories260K's stories then run on past BOS, which delimits them.
  engine_->stop();
  const TokenId bos = model_.tokenizer->bos_id();
  engine_ =
      std::make_unique<Engine>(*runner_, *model_.tokenizer,
                               EngineOptions{{.max_batch_tokens = 64, .max_running = 4}, {model_.tokenizer->eos_id()}});
  engine_->start();
  GenerationRequest spelled = greedy("Once upon a time", 400);
  spelled.skip_special_tokens = false;
  Collected with = submit(spelled).get();
  Collected without = submit(greedy("Once upon a time", 400)).get();
  ASSERT_EQ(with.tokens, without.tokens);
  ASSERT_NE(std::find(with.tokens.begin(), with.tokens.end(), bos), with.tokens.end())
      << "the story should reach a BOS within 400 tokens";
  EXPECT_NE(with.text.find("<s>"), std::string::npos) << with.text;
  EXPECT_EQ(without.text.find("<s>"), std::string::npos) << without.text;
}

TEST_F(EngineTest, StopStringsTruncateAndFinishWithStop) {
  start(64, {});
  std::string full = reference("Once upon a time", 60);
  size_t cut = full.find("Lily");
  ASSERT_NE(cut, std::string::npos) << full;
  GenerationRequest r = greedy("Once upon a time", 60);
  r.stop = {"Lily", "zzz-never"};
  Collected c = submit(r).get();
  EXPECT_EQ(c.finish, FinishReason::kStop);
  EXPECT_EQ(c.text, full.substr(0, cut));
}

TEST_F(EngineTest, MaxTokensAndStopTokenIds) {
  start(64, {});
  Collected c = submit(greedy("Once upon a time", 5)).get();
  EXPECT_EQ(c.finish, FinishReason::kLength);
  EXPECT_EQ(c.completion_tokens, 5);
  EXPECT_EQ(c.tokens.size(), 5u);
  GenerationRequest r = greedy("Once upon a time", 50);
  r.stop_token_ids = {c.tokens[2]};
  Collected d = submit(r).get();
  EXPECT_EQ(d.finish, FinishReason::kStop);
  EXPECT_EQ(d.tokens.size(), 2u);
}

TEST_F(EngineTest, LogprobsAreNormalisedAndRankTheChosenTokenFirstWhenGreedy) {
  start(64, {});
  GenerationRequest r = greedy("The cat", 6);
  r.logprobs = 3;
  Collected c = submit(r).get();
  ASSERT_EQ(c.logprobs.size(), c.tokens.size());
  for (const TokenLogprobs& lp : c.logprobs) {
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].first, lp.token);
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    EXPECT_LE(lp.logprob, 0.0f);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
  }
}

TEST_F(EngineTest, CancelReleasesEverything) {
  start(64, {.max_batch_tokens = 8});
  GenerationRequest r = greedy("Once upon a time", 400);
  r.ignore_eos = true;
  std::atomic<RequestId> id{0};
  auto done = std::make_shared<std::promise<FinishReason>>();
  auto res = engine_->submit(r, [&, done](const RequestOutput& o) {
    if (o.finish != FinishReason::kNone) done->set_value(o.finish);
  });
  ASSERT_TRUE(res.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  engine_->cancel(*res);
  auto f = done->get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), FinishReason::kCancelled);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(engine_->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, SharedPrefixIsServedFromTheCache) {
  start(128, {});
  std::string prefix = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
  Collected first = submit(greedy(prefix + " One day", 4)).get();
  Collected second = submit(greedy(prefix + " Her mom", 4)).get();
  EXPECT_EQ(first.cached_tokens, 0);
  EXPECT_GE(second.cached_tokens, 16);
  EXPECT_GT(engine_->stats().prefix.hit_tokens, 0u);
}

TEST_F(EngineTest, BadRequestsAreRejectedAtSubmission) {
  start(64, {.max_waiting = 1});
  Status st;
  GenerationRequest bad = greedy("x", 0);
  submit(bad, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  GenerationRequest huge;
  huge.prompt.assign(600, 5);
  submit(huge, &st);
  EXPECT_NE(st.message().find("context"), std::string::npos);
  GenerationRequest oov = greedy("x", 3);
  oov.prompt.push_back(99999);
  submit(oov, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  GenerationRequest hot = greedy("x", 3);
  hot.sampling.temperature = -3;
  submit(hot, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

// A full queue is refused at submit(), never after: whoever was told "accepted" (a server that then sent its
// 200) must not see the request fail with "the queue is full". Submitting in a tight loop races the engine
// thread taking requests off its incoming list.
TEST_F(EngineTest, AnAcceptedSubmissionIsNeverRefusedByTheQueueLater) {
  start(64, {.max_running = 1, .max_waiting = 1});
  std::vector<std::future<Collected>> accepted;
  int refused = 0;
  for (int i = 0; i < 400 && accepted.size() < 60; ++i) {
    Status st;
    auto f = submit(greedy("Lily", 2), &st);
    if (st.ok()) {
      accepted.push_back(std::move(f));
    } else {
      EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0) << "the loop never filled the queue: the test proves nothing";
  for (auto& f : accepted) {
    Collected c = f.get();
    EXPECT_NE(c.finish, FinishReason::kError) << c.error.to_string();
  }
}

}  // namespace
}  // namespace tessera::engine
