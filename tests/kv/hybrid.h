// What the hybrid-model KV connector tests share (host_state_test, pool_state_test): the test-size Qwen3.5-pattern
// model of support/hybrid_model.h, engines over it with a small cache, state
// checkpoints and the connectors a test gives them, and a greedy request's tokens, logprobs and cached positions.
// The reference is the same model served without prefix reuse (every prompt computed from position 0): greedy
// tokens equal and the chosen tokens' logprobs within 1e-4.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_connector.h"
#include "engine/model_runner.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/hybrid_model.h"

namespace tessera::kv {

inline std::vector<model::TokenId> tokens(int n, int from) { return testing::token_run(n, from); }

class HybridKvTest : public testing::HybridModelTest {
 protected:
  static constexpr const char* kIdentity = "synth qwen3.5 seed 5";

  struct Served {
    std::unique_ptr<engine::ModelRunner> runner;
    std::unique_ptr<engine::Engine> engine;
    ~Served() {
      if (engine) engine->stop();
    }
  };
  // A cache of `blocks` blocks of 4 positions (a prompt of 41 and its 12 tokens take 14), `checkpoints` state
  // checkpoints, and `connectors`, started. checkpoints 0 and no connector: the reference (no prefix reuse).
  std::unique_ptr<Served> make_engine(int checkpoints, int blocks,
                                      const std::vector<std::shared_ptr<engine::KvConnector>>& connectors) {
    auto n = std::make_unique<Served>();
    engine::RunnerOptions ro;
    ro.max_batch_tokens = 16;
    ro.max_sequences = 2;
    ro.kv.block_tokens = 4;
    ro.kv.num_blocks = blocks;
    ro.kv.state_checkpoints = checkpoints;
    n->runner = std::move(engine::ModelRunner::create(*device_, model_->config, model_->weights, ro).value());
    engine::EngineOptions eo;
    eo.scheduler.max_batch_tokens = 16;
    eo.scheduler.max_running = 2;
    n->engine = std::make_unique<engine::Engine>(*n->runner, *tokenizer_, eo);
    for (const auto& c : connectors) {
      Status added = n->engine->add_connector(c);
      EXPECT_TRUE(added.ok()) << added.to_string();
    }
    n->engine->start();
    return n;
  }

  static engine::KvTierStats tier(const engine::KvConnector& c, const std::string& name) {
    for (const engine::KvTierStats& t : c.stats().tiers)
      if (t.tier == name) return t;
    ADD_FAILURE() << "no tier " << name;
    return {};
  }
  // The reference answer of each prompt.
  std::vector<Out> reference(const std::vector<std::vector<model::TokenId>>& prompts) {
    auto ref = make_engine(0, 24, {});
    std::vector<Out> want;
    for (const auto& p : prompts) want.push_back(ask(*ref->engine, p));
    for (const Out& o : want) EXPECT_TRUE(o.ok && o.tokens.size() == 12);
    return want;
  }
  // Asks `engine` for `prompt` (with `hint`), expecting `want`, then for three prompts that push its blocks out of the
  // device cache.
  static void ask_and_evict(engine::Engine& e, const std::vector<model::TokenId>& prompt, const Out& want,
                            int hint = 0) {
    expect_same(ask(e, prompt, hint), want, "the first time");
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(ask(e, tokens(41, 10 + 50 * i)).ok);
    EXPECT_GT(e.stats().prefix.evictions, 0u);
  }

  const std::vector<model::TokenId> a_ = tokens(41, 300);  // its checkpoint at 40: the last boundary before token 41
};

}  // namespace tessera::kv
