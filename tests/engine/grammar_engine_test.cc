// Structured output in the engine, with real batching: concurrent requests under different grammars, sampled at
// temperature 1 while prompts are prefilled in chunks and sequences are preempted for lack of KV blocks; every
// output that ends "stop" is a complete sentence of its grammar, one cut by max_tokens ends "length" (never
// claimed complete); a resumed stream's earlier output is read by the grammar first.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "grammar/stack.h"
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
};

class GrammarEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto m = model::load_model(testing::stories260k_dir());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    device_ = std::move(ops::open_device("ref").value());
  }
  // `burst`: the engine gathers arrivals before its first step (EngineOptions::admission_window), so that requests
  // submitted together are scheduled together whatever the machine's load.
  void start(int num_blocks, SchedulerOptions so, bool burst = false) {
    RunnerOptions ro;
    ro.max_batch_tokens = so.max_batch_tokens;
    ro.kv.block_tokens = 16;
    ro.kv.num_blocks = num_blocks;
    runner_ = std::move(ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    EngineOptions eo{so};
    if (burst) {
      eo.admission_window = std::chrono::seconds(2);
      eo.admission_gap = std::chrono::milliseconds(200);
    }
    engine_ = std::make_unique<Engine>(*runner_, *model_.tokenizer, eo);
    engine_->start();
  }
  std::future<Collected> submit(GenerationRequest r, Status* submit_status = nullptr) {
    auto done = std::make_shared<std::promise<Collected>>();
    auto acc = std::make_shared<Collected>();
    auto id = engine_->submit(std::move(r), [done, acc](const RequestOutput& o) {
      acc->text += o.text;
      acc->tokens.insert(acc->tokens.end(), o.tokens.begin(), o.tokens.end());
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
  std::shared_ptr<const grammar::CompiledGrammar> compile(grammar::SpecKind kind, const std::string& text) {
    auto g = engine_->grammars().compile({kind, text, ""});
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    return g.ok() ? *g : nullptr;
  }
  GenerationRequest request(const std::string& prompt, std::shared_ptr<const grammar::CompiledGrammar> g,
                            int max_tokens, uint64_t seed) {
    GenerationRequest r;
    r.prompt = model_.tokenizer->encode(prompt, true);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.max_tokens = max_tokens;
    r.grammar = std::move(g);
    return r;
  }

  // Tokens spelling `text` one character each (what decode_piece gives after an ordinary token).
  std::vector<TokenId> spell(const std::string& text) {
    std::vector<TokenId> out;
    for (char ch : text) {
      for (TokenId t = 0; t < model_.tokenizer->vocab_size(); ++t) {
        if (model_.tokenizer->decode_piece(model_.tokenizer->eos_id(), t) == std::string(1, ch)) {
          out.push_back(t);
          break;
        }
      }
    }
    EXPECT_EQ(out.size(), text.size());
    return out;
  }

  model::LoadedModel model_;
  std::unique_ptr<ops::Device> device_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Engine> engine_;
};

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pet": {"enum": ["cat", "dog", "fish"]}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
    "maxItems": 3}}, "required": ["name", "age", "pet"], "additionalProperties": false})";

TEST_F(GrammarEngineTest, ConcurrentGrammarsUnderChunkedPrefillAndPreemption) {
  // 8-token steps: every prompt is prefilled in chunks; 14 blocks of 16 for 12 sequences: preemptions.
  start(14, SchedulerOptions{.max_batch_tokens = 8, .max_running = 12}, /*burst=*/true);
  struct Kind {
    grammar::SpecKind kind;
    std::string text;
  };
  const std::vector<Kind> kinds = {
      {grammar::SpecKind::kJsonSchema, kSchema},
      {grammar::SpecKind::kRegex, R"([A-Z][a-z]{1,6}, \d{1,3}(\.\d)?!)"},
      {grammar::SpecKind::kChoice, R"(["sunny", "rainy", "cloudy with a chance"])"},
      {grammar::SpecKind::kGbnf, "root ::= item (\", \" item){0,3}\nitem ::= [a-z]{1,5}\n"}};
  const std::vector<std::string> prompts = {"Once upon a time there was a little girl named Lily who loved to",
                                            "The cat sat", "Tom had a big red ball and he wanted to play with",
                                            "One day"};
  std::vector<std::future<Collected>> futures;
  std::vector<std::shared_ptr<const grammar::CompiledGrammar>> used;
  // Compiled first, submitted together and gathered into the first step: compiling between submissions let the
  // first requests finish before the last arrived on a loaded machine, and then nothing was preempted.
  for (int i = 0; i < 12; ++i) {
    const Kind& k = kinds[static_cast<size_t>(i) % kinds.size()];
    auto g = compile(k.kind, k.text);
    ASSERT_NE(g, nullptr);
    used.push_back(g);
  }
  for (int i = 0; i < 12; ++i) {
    futures.push_back(submit(request(prompts[static_cast<size_t>(i) % prompts.size()], used[static_cast<size_t>(i)],
                                     160, 100 + static_cast<uint64_t>(i))));
  }
  int complete = 0;
  for (size_t i = 0; i < futures.size(); ++i) {
    Collected c = futures[i].get();
    ASSERT_NE(c.finish, FinishReason::kError) << c.error.to_string();
    if (c.finish == FinishReason::kStop) {
      EXPECT_TRUE(grammar::accepts(used[i]->grammar(), c.text)) << i << ": '" << c.text << "'";
      ++complete;
    } else {
      EXPECT_EQ(c.finish, FinishReason::kLength);
      grammar::Matcher m(used[i]);
      EXPECT_TRUE(m.accept_bytes(c.text)) << "not even a prefix: '" << c.text << "'";
      EXPECT_FALSE(m.can_end()) << "a complete output must not end 'length': '" << c.text << "'";
    }
  }
  EXPECT_GE(complete, 9);
  EXPECT_GT(engine_->stats().preemptions, 0u);
}

TEST_F(GrammarEngineTest, MaxTokensBeforeTheEndIsLengthNeverAClaimedComplete) {
  start(256, SchedulerOptions{});
  auto g = compile(grammar::SpecKind::kJsonSchema, kSchema);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Collected c = submit(request("Once upon a time", g, 3, seed)).get();
    EXPECT_EQ(c.finish, FinishReason::kLength) << c.text;
    EXPECT_EQ(c.tokens.size(), 3u);
    EXPECT_FALSE(grammar::accepts(g->grammar(), c.text)) << c.text;
  }
}

TEST_F(GrammarEngineTest, GreedyChoiceEndsWithoutSamplingTheEndToken) {
  start(256, SchedulerOptions{});
  auto g = compile(grammar::SpecKind::kChoice, R"(["yes", "no"])");
  GenerationRequest r = request("Lily said", g, 20, 1);
  r.sampling.temperature = 0;
  Collected c = submit(std::move(r)).get();
  EXPECT_EQ(c.finish, FinishReason::kStop);
  EXPECT_TRUE(c.text == "yes" || c.text == "no") << c.text;
  for (TokenId t : c.tokens) EXPECT_NE(t, model_.tokenizer->eos_id());
}

TEST_F(GrammarEngineTest, AResumedStreamIsReadByTheGrammarFirst) {
  start(256, SchedulerOptions{});
  auto g = compile(grammar::SpecKind::kRegex, R"(\[(\d{1,2}, ){3}\d{1,2}\])");
  // The earlier node's output "[12, " goes at the end of the prompt, replayed through the grammar.
  GenerationRequest r = request("Once upon a time", g, 40, 7);
  const std::vector<TokenId> earlier = spell("[12, ");
  r.prompt.insert(r.prompt.end(), earlier.begin(), earlier.end());
  r.grammar_replay = static_cast<int>(earlier.size());
  Collected c = submit(std::move(r)).get();
  EXPECT_EQ(c.finish, FinishReason::kStop);
  EXPECT_TRUE(grammar::accepts(g->grammar(), "[12, " + c.text)) << c.text;
  // An earlier output the grammar cannot read is refused at submission.
  GenerationRequest bad = request("Once upon a time", g, 40, 7);
  const std::vector<TokenId> wrong = spell("{12");
  bad.prompt.insert(bad.prompt.end(), wrong.begin(), wrong.end());
  bad.grammar_replay = static_cast<int>(wrong.size());
  Status st;
  submit(std::move(bad), &st).get();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
}

TEST_F(GrammarEngineTest, EveryChoiceOfNFollowsTheGrammarOnItsOwn) {
  start(256, SchedulerOptions{});
  auto g = compile(grammar::SpecKind::kRegex, R"([a-z]{2,5}-\d{1,3})");
  GenerationRequest r = request("Once upon a time", g, 30, 5);
  r.n = 4;
  auto done = std::make_shared<std::promise<void>>();
  auto texts = std::make_shared<std::vector<std::string>>(4);
  auto finishes = std::make_shared<std::vector<FinishReason>>(4, FinishReason::kNone);
  auto left = std::make_shared<int>(4);
  auto id = engine_->submit(std::move(r), [=](const RequestOutput& o) {
    (*texts)[static_cast<size_t>(o.index)] += o.text;
    if (o.finish != FinishReason::kNone) {
      (*finishes)[static_cast<size_t>(o.index)] = o.finish;
      if (--*left == 0) done->set_value();
    }
  });
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  done->get_future().get();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*finishes)[static_cast<size_t>(i)], FinishReason::kStop) << i;
    EXPECT_TRUE(grammar::accepts(g->grammar(), (*texts)[static_cast<size_t>(i)]))
        << i << ": " << (*texts)[static_cast<size_t>(i)];
  }
}

TEST_F(GrammarEngineTest, ForcedStretchesSkipModelSteps) {
  // The whole text is forced: after the first token (sampled, masked to what starts it) its tokens are appended
  // without model steps, all but the last, which the model still samples.
  const std::string word = "supercalifragilisticexpialidocious was the word of the day";
  for (bool jump : {false, true}) {
    RunnerOptions ro;
    ro.kv.block_tokens = 16;
    ro.kv.num_blocks = 64;
    runner_ = std::move(ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    EngineOptions eo;
    eo.jump_forward = jump;
    engine_ = std::make_unique<Engine>(*runner_, *model_.tokenizer, eo);
    engine_->start();
    auto g = compile(grammar::SpecKind::kChoice, "[\"" + word + "\"]");
    GenerationRequest r = request("Once upon a time", g, 100, 3);
    r.sampling.temperature = 0;
    const uint64_t steps_before = engine_->stats().steps;
    Collected c = submit(std::move(r)).get();
    ASSERT_EQ(c.finish, FinishReason::kStop);
    ASSERT_EQ(c.text, word);
    const uint64_t steps = engine_->stats().steps - steps_before;
    if (jump) {
      // The prompt's step, the first token's, and the few it takes the model to spell the stretch's last token.
      EXPECT_LE(steps, 6u) << c.tokens.size() << " tokens, " << engine_->stats().jump_forward_tokens << " jumped";
      EXPECT_GE(engine_->stats().jump_forward_tokens + steps, c.tokens.size());
    } else {
      EXPECT_EQ(steps, c.tokens.size());
      EXPECT_EQ(engine_->stats().jump_forward_tokens, 0u);
    }
    engine_->stop();
  }
}

}  // namespace
}  // namespace tessera::engine
