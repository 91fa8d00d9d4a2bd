// The forward pass is checked end to end against llama2.c's published output in tests/e2e; here, the
// properties that make batching and paging safe: how tokens are grouped never changes the numbers.
#include "engine/model_runner.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "model/synth.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/registry.h"

namespace tessera::engine {
namespace {

class Runner : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = ops::open_device("ref");
    ASSERT_TRUE(d.ok());
    device_ = std::move(d).value();
    auto c = model::synth_shape("tiny");
    c->n_layers = 2;
    c->max_seq_len = 64;
    model_ = model::synthesize_weights(*c, 11);
  }
  std::unique_ptr<ModelRunner> make(int max_batch_tokens, int block_tokens = 4, int num_blocks = 0) {
    RunnerOptions o;
    o.max_batch_tokens = max_batch_tokens;
    o.kv.block_tokens = block_tokens;
    o.kv.num_blocks = num_blocks;
    o.max_sequences = 4;
    auto r = ModelRunner::create(*device_, model_.config, model_.weights, o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(r).value();
  }
  std::unique_ptr<ops::Device> device_;
  model::SynthModel model_;
  std::vector<TokenId> prompt_ = {1, 300, 42, 7, 511, 260, 99, 100, 101, 5, 17};
};

TEST_F(Runner, ChunkedPrefillEqualsOneShotEqualsTokenByToken) {
  std::vector<float> one_shot, chunked, stepwise;
  auto r1 = make(64);
  SequenceKv s1;
  ASSERT_TRUE(r1->prefill(s1, prompt_, one_shot).ok());
  EXPECT_EQ(s1.length, static_cast<int32_t>(prompt_.size()));

  auto r2 = make(3);  // chunks of 3 tokens
  SequenceKv s2;
  ASSERT_TRUE(r2->prefill(s2, prompt_, chunked).ok());
  EXPECT_EQ(one_shot, chunked);

  auto r3 = make(8);
  SequenceKv s3;
  ASSERT_TRUE(r3->prefill(s3, std::span(prompt_).first(1), stepwise).ok());
  for (size_t i = 1; i < prompt_.size(); ++i) {
    SequenceKv* seqs[] = {&s3};
    ASSERT_TRUE(r3->decode(seqs, std::span(prompt_).subspan(i, 1), stepwise).ok());
  }
  EXPECT_EQ(one_shot, stepwise);
}

TEST_F(Runner, BatchedDecodeEqualsSeparateDecodes) {
  auto r = make(16);
  SequenceKv a, b, a2, b2;
  std::vector<float> la, lb, batch, sep_a, sep_b;
  ASSERT_TRUE(r->prefill(a, std::span(prompt_).first(5), la).ok());
  ASSERT_TRUE(r->prefill(b, std::span(prompt_).first(9), lb).ok());
  ASSERT_TRUE(r->prefill(a2, std::span(prompt_).first(5), la).ok());
  ASSERT_TRUE(r->prefill(b2, std::span(prompt_).first(9), lb).ok());
  SequenceKv* both[] = {&a, &b};
  std::vector<TokenId> next = {33, 44};
  ASSERT_TRUE(r->decode(both, next, batch).ok());
  SequenceKv* only_a[] = {&a2};
  SequenceKv* only_b[] = {&b2};
  ASSERT_TRUE(r->decode(only_a, std::span(next).first(1), sep_a).ok());
  ASSERT_TRUE(r->decode(only_b, std::span(next).subspan(1, 1), sep_b).ok());
  const size_t v = static_cast<size_t>(model_.config.vocab_size);
  EXPECT_EQ(std::vector<float>(batch.begin(), batch.begin() + v), sep_a);
  EXPECT_EQ(std::vector<float>(batch.begin() + v, batch.end()), sep_b);
  EXPECT_EQ(a.length, 6);
  EXPECT_EQ(b.length, 10);
}

TEST_F(Runner, MixedStepOfPrefillChunksAndDecodesEqualsSeparateCalls) {
  auto r = make(32);
  std::vector<float> l;
  // Reference: each sequence on its own.
  SequenceKv ra, rb, rc;
  std::vector<float> want_a, want_b, want_c;
  ASSERT_TRUE(r->prefill(ra, std::span(prompt_).first(6), l).ok());
  SequenceKv* only_a[] = {&ra};
  TokenId t = 77;
  ASSERT_TRUE(r->decode(only_a, std::span(&t, 1), want_a).ok());
  ASSERT_TRUE(r->prefill(rb, prompt_, want_b).ok());
  ASSERT_TRUE(r->prefill(rc, std::span(prompt_).first(3), l).ok());
  ASSERT_TRUE(r->prefill(rc, std::span(prompt_).subspan(3, 5), want_c).ok());

  // The same work as one step: a prefill chunk listed before a decode, and a continued prefill.
  SequenceKv a, b, c;
  ASSERT_TRUE(r->prefill(a, std::span(prompt_).first(6), l).ok());
  ASSERT_TRUE(r->prefill(c, std::span(prompt_).first(3), l).ok());
  Segment segs[] = {{&b, prompt_, true}, {&a, std::span(&t, 1), true}, {&c, std::span(prompt_).subspan(3, 5), true}};
  std::vector<float> got;
  ASSERT_TRUE(r->step(segs, got).ok());
  const size_t v = static_cast<size_t>(model_.config.vocab_size);
  ASSERT_EQ(got.size(), 3 * v);
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + v), want_b);
  EXPECT_EQ(std::vector<float>(got.begin() + v, got.begin() + 2 * v), want_a);
  EXPECT_EQ(std::vector<float>(got.begin() + 2 * v, got.end()), want_c);
  EXPECT_EQ(a.length, 7);
  EXPECT_EQ(b.length, static_cast<int32_t>(prompt_.size()));
  EXPECT_EQ(c.length, 8);
}

TEST_F(Runner, RunningOutOfBlocksIsAnErrorNotACrash) {
  auto r = make(16, /*block_tokens=*/4, /*num_blocks=*/2);
  SequenceKv s;
  std::vector<float> logits;
  Status st = r->prefill(s, prompt_, logits);  // 11 tokens need 3 blocks
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.length, 0);
  EXPECT_TRUE(s.blocks.empty());
  EXPECT_TRUE(r->prefill(s, std::span(prompt_).first(8), logits).ok());
}

TEST_F(Runner, ContextLimitIsEnforced) {
  auto r = make(64);
  SequenceKv s;
  std::vector<float> logits;
  std::vector<TokenId> too_long(65, 5);
  Status st = r->prefill(s, too_long, logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("context"), std::string::npos);
}

TEST_F(Runner, OutOfVocabularyTokenIsAnError) {
  auto r = make(64);
  SequenceKv s;
  std::vector<float> logits;
  std::vector<TokenId> bad = {1, 512};
  EXPECT_EQ(r->prefill(s, bad, logits).code(), StatusCode::kOutOfRange);
}

// Gemma's final logit softcap: every logit the runner hands back is cap * tanh(raw / cap) of the logit the same
// weights give without it (std::tanh the reference), within (-cap, cap), on the device, eagerly and in the decode
// graphs. A cap far below the random model's logits makes a missing, doubled or inverted cap plain.
TEST(RunnerSoftcap, LogitsAreCapTimesTanhOfTheUncappedLogits) {
  auto c = model::synth_shape("tiny");
  ASSERT_TRUE(c.ok());
  c->n_layers = 2;
  c->max_seq_len = 64;
  model::SynthModel raw_model = model::synthesize_weights(*c, 11);
  model::ModelConfig capped = raw_model.config;
  constexpr float kCap = 0.05f;
  capped.final_softcap = kCap;
  const std::vector<TokenId> prompt = {1, 300, 42, 7, 511, 260, 99};
  for (const char* backend : {"ref", "cpu"}) {
    for (bool graph : {false, true}) {
      if (graph && std::string(backend) == "ref") continue;
      SCOPED_TRACE(fmt::format("{}{}", backend, graph ? " graph" : ""));
      auto d = ops::open_device(backend);
      ASSERT_TRUE(d.ok());
      RunnerOptions o;
      o.max_batch_tokens = 16;
      o.max_sequences = 2;
      o.graph = graph;
      auto plain = ModelRunner::create(**d, raw_model.config, raw_model.weights, o);
      auto cap = ModelRunner::create(**d, capped, raw_model.weights, o);
      ASSERT_TRUE(plain.ok() && cap.ok());
      std::vector<float> want, got;
      SequenceKv s1, s2;
      ASSERT_TRUE((*plain)->prefill(s1, prompt, want).ok());
      ASSERT_TRUE((*cap)->prefill(s2, prompt, got).ok());
      for (TokenId next : {TokenId{33}, TokenId{44}}) {
        std::vector<float> w, g;
        SequenceKv* a[] = {&s1};
        SequenceKv* b[] = {&s2};
        ASSERT_TRUE((*plain)->decode(a, std::span(&next, 1), w).ok());
        ASSERT_TRUE((*cap)->decode(b, std::span(&next, 1), g).ok());
        want.insert(want.end(), w.begin(), w.end());
        got.insert(got.end(), g.begin(), g.end());
      }
      ASSERT_EQ(got.size(), want.size());
      float largest = 0.0f;
      for (size_t i = 0; i < want.size(); ++i) {
        largest = std::max(largest, std::fabs(want[i]));
        ASSERT_LE(std::fabs(got[i]), kCap) << i;
        ASSERT_NEAR(got[i], kCap * std::tanh(want[i] / kCap), 1e-6f) << i << ": raw " << want[i];
      }
      EXPECT_GT(largest, 4.0f * kCap) << "the cap should bend most logits";
    }
  }
}

// RunnerOptions::deterministic: the last token's logits of one prompt, on every cpu kernel build this processor runs
// and on ref (the backends whose DeviceInfo::batch_invariant says so; the others must refuse the option: vulkan on
// lavapipe gave other bits for a chunked or partly decoded prompt, 2026-12-08), must have the same bits whether the
// prompt runs in one step, in chunks of 96, or partly decoded token by token before a chunk reads the blocks those
// decodes filled (a prefix hit on a previous reply), past two decode ranges (700 positions, kDecodeRange 512), with
// heads of 64 grouped two to a kv head (llama), heads of 256 with sliding layers whose windows the cache keeps alone
// (gemma3), and a hybrid model's attention layers (qwen3.5). Without the option the vector builds' prefill kernels sum
// in another order than their decode ones (the printed counts; the same bits there would make the option pointless, not
// wrong).
TEST(RunnerDeterministic, APromptHasTheSameBitsHoweverItsRowsWereComputed) {
  struct Shape {
    const char* name;
    int head_dim, sliding_window;
  };
  std::vector<std::pair<std::string, std::unique_ptr<ops::Device>>> devices;
  for (ops::cpu::Isa isa : ops::cpu::runnable_isas()) {
    auto backend = ops::cpu::create_backend(isa);
    ASSERT_TRUE(backend.ok());
    auto device = (*backend)->open_device_with(0, ops::DeviceOptions{2, ""});
    ASSERT_TRUE(device.ok());
    devices.emplace_back(fmt::format("cpu({})", ops::cpu::isa_name(isa)), std::move(device).value());
  }
  ops::register_builtin_backends();
  for (const char* name : {"ref", "opencl", "vulkan", "cuda"}) {
    auto device = ops::open_device(name);
    if (!device.ok()) continue;
    if ((*device)->info().batch_invariant) {
      devices.emplace_back(name, std::move(device).value());
      continue;
    }
    // A backend that does not claim it refuses the option rather than giving other bits silently.
    auto c = model::synth_shape_small("llama3.2-1b");
    ASSERT_TRUE(c.ok());
    const model::SynthModel m = model::synthesize_weights(*c, 5);
    RunnerOptions o;
    o.deterministic = true;
    auto r = ModelRunner::create(**device, m.config, m.weights, o);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << name << ": " << r.status().to_string();
  }
  for (const Shape& sh : {Shape{"llama3.2-1b", 64, 0}, Shape{"gemma3-1b", 256, 64}, Shape{"qwen3.5-0.8b", 256, 0}}) {
    auto c = model::synth_shape_small(sh.name);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    c->head_dim = sh.head_dim;
    c->n_heads = 2 * c->n_kv_heads;
    c->max_seq_len = 1024;
    c->n_layers = 4;  // qwen3.5: linear, attention, linear, attention (decoded rows' K/V reach the second)
    if (c->sliding_window > 0) c->sliding_window = sh.sliding_window;
    if (c->attn_scale > 0.0f) c->attn_scale = 1.0f / std::sqrt(static_cast<float>(c->head_dim));
    ASSERT_TRUE(c->validate().ok()) << sh.name << ": " << c->validate().to_string();
    const model::SynthModel m = model::synthesize_weights(*c, 5);
    std::vector<TokenId> prompt(700);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(3 + (i * 131 + i / 7) % 500);
    for (auto& [device_name, device] : devices) {
      if (device_name == "ref" && sh.head_dim != 64) continue;  // ref's scalar loops: the first shape only (time)
      const std::string what = fmt::format("{}, {}", sh.name, device_name);
      auto last_logits = [&](bool deterministic, int chunk, size_t decoded_from, size_t decoded_to) {
        RunnerOptions o;
        o.max_batch_tokens = chunk;
        o.kv.block_tokens = 16;
        o.kv.window_kv = sh.sliding_window > 0;
        o.deterministic = deterministic;
        auto r = ModelRunner::create(*device, m.config, m.weights, o);
        EXPECT_TRUE(r.ok()) << what << ": " << r.status().to_string();
        std::vector<float> logits;
        if (!r.ok()) return logits;
        SequenceKv s;
        const std::span<const TokenId> all(prompt);
        EXPECT_TRUE((*r)->prefill(s, all.first(decoded_from), logits).ok()) << what;
        for (size_t i = decoded_from; i < decoded_to; ++i) {
          SequenceKv* seqs[] = {&s};
          EXPECT_TRUE((*r)->decode(seqs, all.subspan(i, 1), logits).ok()) << what;
        }
        if (decoded_to < prompt.size()) EXPECT_TRUE((*r)->prefill(s, all.subspan(decoded_to), logits).ok()) << what;
        return logits;
      };
      const std::vector<float> whole = last_logits(true, 1024, prompt.size(), prompt.size());
      ASSERT_EQ(whole.size(), static_cast<size_t>(c->vocab_size)) << what;
      EXPECT_EQ(last_logits(true, 96, prompt.size(), prompt.size()), whole) << what << ": in chunks of 96";
      EXPECT_EQ(last_logits(true, 1024, 300, 500), whole) << what << ": 200 positions decoded, then a chunk on them";
      EXPECT_EQ(last_logits(true, 1024, 600, 700), whole) << what << ": the last 100 decoded";
      const std::vector<float> plain = last_logits(false, 1024, prompt.size(), prompt.size());
      const std::vector<float> reused = last_logits(false, 1024, 300, 500);
      size_t differ = 0;
      for (size_t i = 0; i < plain.size() && i < reused.size(); ++i) differ += plain[i] != reused[i];
      std::printf("[ deterministic ] %s without the option: %zu of %zu logits differ after decoded blocks\n",
                  what.c_str(), differ, plain.size());
    }
  }
}

}  // namespace
}  // namespace tessera::engine
