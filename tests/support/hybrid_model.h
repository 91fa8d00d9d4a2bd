// A test-size Qwen3.5-pattern model for the tests of hybrid models' state across the cache (engine's state
// checkpoints, the KV connectors' tiers and pool): linear and full attention in turn, seeded random weights and
// tokenizer, on the cpu backend with two threads.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/synth.h"
#include "ops/registry.h"

namespace tessera::testing {

// n token ids from `from` on.
inline std::vector<model::TokenId> token_run(int n, int from) {
  std::vector<model::TokenId> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), from);
  return t;
}

class HybridModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = model::synth_shape_small("qwen3.5-0.8b");  // 6 layers, linear and full attention in turn
    ASSERT_TRUE(c.ok());
    c->max_seq_len = 256;
    model_ = std::make_unique<model::SynthModel>(model::synthesize_weights(*c, 5));
    tokenizer_ = model::synthesize_tokenizer(c->vocab_size, 5);
    device_ = std::move(ops::open_device("cpu", 0, ops::DeviceOptions{2, ""}).value());
  }

  // A greedy request's max_tokens tokens (EOS ignored), the chosen tokens' logprobs and the cached positions it
  // reported.
  struct Out {
    std::vector<model::TokenId> tokens;
    std::vector<float> logprobs;
    int cached = -1;
    bool ok = true;
  };
  static std::future<Out> submit(engine::Engine& e, std::vector<model::TokenId> prompt, int state_hint = 0,
                                 int max_tokens = 12) {
    engine::GenerationRequest r;
    r.prompt = std::move(prompt);
    r.state_hint = state_hint;
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.logprobs = 0;
    auto done = std::make_shared<std::promise<Out>>();
    auto acc = std::make_shared<Out>();
    auto id = e.submit(std::move(r), [done, acc](const engine::RequestOutput& o) {
      acc->tokens.insert(acc->tokens.end(), o.tokens.begin(), o.tokens.end());
      for (const engine::TokenLogprobs& l : o.logprobs) acc->logprobs.push_back(l.logprob);
      acc->cached = std::max(acc->cached, o.cached_tokens);
      if (o.finish == engine::FinishReason::kNone) return;
      acc->ok = o.error.ok();
      done->set_value(*acc);
    });
    if (!id.ok()) done->set_value(Out{.ok = false});
    return done->get_future();
  }
  static Out ask(engine::Engine& e, std::vector<model::TokenId> prompt, int state_hint = 0, int max_tokens = 12) {
    return submit(e, std::move(prompt), state_hint, max_tokens).get();
  }
  // Greedy tokens equal and logprobs within 1e-4 of the reference's.
  static void expect_same(const Out& got, const Out& want, const std::string& what) {
    ASSERT_TRUE(got.ok) << what;
    EXPECT_EQ(got.tokens, want.tokens) << what;
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
    for (size_t i = 0; i < got.logprobs.size(); ++i)
      EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 1e-4) << what << ", token " << i;
  }

  std::unique_ptr<model::SynthModel> model_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<ops::Device> device_;
};

}  // namespace tessera::testing
