// A step's tokens are drawn on the device's host threads (ops::Stream::for_each_on_host; the cpu backend's operator
// threads): each sequence's draw must be exactly the one it makes when it runs alone, whatever thread made it and
// whatever other rows the step held. stories260K on the cpu backend with two threads, requests that exercise every
// per-sequence state a draw reads (seeded random streams, top-p, top-k, min-p, penalties over the sequence's own
// counts, logit bias, logprobs, a grammar, n > 1) submitted together, each checked against its run alone.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "grammar/compiler.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::engine {
namespace {

// The cpu stream spreads host items over its threads and runs each exactly once.
TEST(HostItems, CpuStreamRunsEachItemOnceAcrossItsThreads) {
  auto device = ops::open_device("cpu", 0, ops::DeviceOptions{.threads = 2});
  ASSERT_TRUE(device.ok()) << device.status().to_string();
  std::unique_ptr<ops::Stream> stream = (*device)->create_stream();
  for (int64_t n : {0, 1, 2, 64}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::mutex mu;
    std::set<std::thread::id> threads;
    struct Ctx {
      std::vector<std::atomic<int>>* hits;
      std::mutex* mu;
      std::set<std::thread::id>* threads;
    } ctx{&hits, &mu, &threads};
    stream->for_each_on_host(
        n,
        [](void* p, int64_t i) {
          auto& c = *static_cast<Ctx*>(p);
          (*c.hits)[static_cast<size_t>(i)].fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(1));  // long enough for the worker to claim some
          std::lock_guard lock(*c.mu);
          c.threads->insert(std::this_thread::get_id());
        },
        &ctx);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "item " << i << " of " << n;
    }
    if (n == 64) {
      EXPECT_EQ(threads.size(), 2u) << "64 items of 1 ms each all ran on one thread";
    }
  }
}

struct Collected {
  std::vector<TokenId> tokens;
  std::vector<TokenLogprobs> logprobs;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  Status error;
};

class ParallelDraws : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto m = model::load_model(testing::stories260k_dir());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    device_ = std::move(ops::open_device("cpu", 0, ops::DeviceOptions{.threads = 2}).value());
    RunnerOptions ro;
    ro.max_batch_tokens = 512;
    ro.kv.block_tokens = 16;
    ro.kv.num_blocks = 512;
    runner_ = std::move(ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    // Requests submitted together are scheduled together (the engine gathers arrivals before its first step).
    EngineOptions eo{{.max_batch_tokens = 512, .max_running = 32}};
    eo.admission_window = std::chrono::seconds(2);
    eo.admission_gap = std::chrono::milliseconds(200);
    engine_ = std::make_unique<Engine>(*runner_, *model_.tokenizer, eo);
    engine_->start();
  }
  // Every choice of every request, by request then choice index, once all have ended.
  std::vector<std::map<int, Collected>> run(const std::vector<GenerationRequest>& rs) {
    struct State {
      std::mutex mu;
      std::vector<std::map<int, Collected>> out;
      int left = 0;
      std::promise<void> done;
    };
    auto st = std::make_shared<State>();
    st->out.resize(rs.size());
    for (const GenerationRequest& r : rs) st->left += r.n;
    for (size_t k = 0; k < rs.size(); ++k) {
      auto id = engine_->submit(rs[k], [st, k](const RequestOutput& o) {
        std::lock_guard lock(st->mu);
        Collected& c = st->out[k][o.index];
        c.tokens.insert(c.tokens.end(), o.tokens.begin(), o.tokens.end());
        c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
        c.text += o.text;
        if (o.finish != FinishReason::kNone) {
          c.finish = o.finish;
          c.error = o.error;
          if (--st->left == 0) st->done.set_value();
        }
      });
      EXPECT_TRUE(id.ok()) << id.status().to_string();
    }
    EXPECT_EQ(st->done.get_future().wait_for(std::chrono::seconds(120)), std::future_status::ready);
    std::lock_guard lock(st->mu);
    return st->out;
  }

  model::LoadedModel model_;
  std::unique_ptr<ops::Device> device_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Engine> engine_;
};

const char* kSchema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
    "pet": {"enum": ["cat", "dog", "fish"]}}, "required": ["name", "pet"], "additionalProperties": false})";

TEST_F(ParallelDraws, EachSequenceDrawsInABatchWhatItDrawsAlone) {
  auto g = engine_->grammars().compile({grammar::SpecKind::kJsonSchema, kSchema, ""});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  std::vector<GenerationRequest> rs;
  for (int i = 0; i < 24; ++i) {
    GenerationRequest r;
    r.prompt = model_.tokenizer->encode(
        i % 2 ? "Once upon a time, there was a little girl" : "The little dog ran to the park and", true);
    r.max_tokens = 40;
    r.ignore_eos = true;
    api::SamplingParams& s = r.sampling;
    s.seed = 1000 + static_cast<uint64_t>(i);
    s.temperature = 0.7f + 0.05f * static_cast<float>(i % 7);
    switch (i % 8) {  // each row of the step draws under its own rules
      case 0:
        s.top_p = 0.9f;
        break;
      case 1:
        s.top_k = 20;
        s.top_p = 0.95f;
        break;
      case 2:
        s.min_p = 0.05f;
        break;
      case 3:
        s.repetition_penalty = 1.3f;
        s.frequency_penalty = 0.5f;
        s.presence_penalty = 0.3f;
        break;
      case 4:
        s.logit_bias = {{13, 5.0f}, {29, -100.0f}};
        r.logprobs = 3;
        break;
      case 5:
        r.grammar = *g;
        r.ignore_eos = false;
        break;
      case 6:
        r.n = 2;  // its first row makes the second choice (on the engine thread), later rows draw like the others
        break;
      default:
        s.temperature = 0.0f;  // greedy beside sampled rows
        r.logprobs = 2;
        break;
    }
    rs.push_back(std::move(r));
  }
  const uint64_t steps_before = engine_->stats().steps;
  const std::vector<std::map<int, Collected>> together = run(rs);
  // One step per token and a few for the prompts when they share steps; 24 times that when they do not.
  EXPECT_LT(engine_->stats().steps - steps_before, 80u) << "the requests did not share steps: nothing was tested";
  for (size_t k = 0; k < rs.size(); ++k) {
    const std::vector<std::map<int, Collected>> alone = run({rs[k]});
    ASSERT_EQ(together[k].size(), static_cast<size_t>(rs[k].n));
    for (const auto& [index, want] : alone[0]) {
      const Collected& got = together[k].at(index);
      ASSERT_TRUE(want.error.ok()) << want.error.to_string();
      EXPECT_EQ(got.finish, want.finish) << "request " << k << " choice " << index;
      EXPECT_EQ(got.tokens, want.tokens) << "request " << k << " choice " << index << ": '" << got.text << "' vs '"
                                         << want.text << "'";
      ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << "request " << k;
      for (size_t t = 0; t < got.logprobs.size(); ++t) {
        EXPECT_EQ(got.logprobs[t].token, want.logprobs[t].token);
        EXPECT_NEAR(got.logprobs[t].logprob, want.logprobs[t].logprob, 1e-3f) << "request " << k << " token " << t;
        ASSERT_EQ(got.logprobs[t].top.size(), want.logprobs[t].top.size());
        for (size_t j = 0; j < got.logprobs[t].top.size(); ++j)
          EXPECT_EQ(got.logprobs[t].top[j].first, want.logprobs[t].top[j].first) << "request " << k << " token " << t;
      }
    }
    if (rs[k].grammar) {  // the mask was applied (40 tokens of this model seldom complete the object)
      const std::string& text = together[k].at(0).text;
      EXPECT_EQ(text.substr(0, 1), "{") << text;
    }
  }
}

}  // namespace
}  // namespace tessera::engine
