// The same synthetic model written as llama2.c, GGUF and safetensors loads to identical weights and gives
// identical logits for a fixed prompt (ref backend); a qwen2 model likewise across GGUF and safetensors,
// in f32 and in f16/bf16 (which the runner widens to f32 on a backend without half-precision matmuls).
#include <gtest/gtest.h>

#include <cstring>

#include "base/mapped_file.h"
#include "engine/model_runner.h"
#include "model/loader.h"
#include "model/model_writer.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

std::vector<float> logits_for(const LoadedModel& m, const std::vector<TokenId>& prompt) {
  auto device = ops::open_device("ref");
  EXPECT_TRUE(device.ok());
  engine::RunnerOptions o;
  o.max_batch_tokens = 64;
  auto runner = engine::ModelRunner::create(**device, m.config, m.weights, o);
  EXPECT_TRUE(runner.ok()) << runner.status().to_string();
  if (!runner.ok()) return {};
  engine::SequenceKv seq;
  std::vector<float> logits;
  EXPECT_TRUE((*runner)->prefill(seq, prompt, logits).ok());
  return logits;
}

void expect_same_weights(const ModelWeights& a, const ModelWeights& b, const std::string& what) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size()) << what;
  for (const WeightTensor& t : a.tensors()) {
    const WeightTensor* u = b.find(t.name);
    ASSERT_NE(u, nullptr) << what << ": " << t.name;
    EXPECT_EQ(u->dtype, t.dtype) << what << ": " << t.name;
    EXPECT_EQ(u->shape, t.shape) << what << ": " << t.name;
    ASSERT_EQ(u->bytes, t.bytes) << what << ": " << t.name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.bytes), 0) << what << ": " << t.name;
  }
}

TEST(FormatEquivalence, LlamaInThreeFormatsGivesIdenticalLogits) {
  std::string dir = testing::scratch_dir();
  ModelConfig cfg = *synth_shape("tiny");
  SynthModel m = synthesize_weights(cfg, 7);
  auto tok = synthesize_tokenizer(cfg.vocab_size, 7);
  ASSERT_TRUE(write_file_atomic(dir + "/tok.bin", tok->serialize()).ok());
  ModelWriteOptions o;
  o.tokenizer = tok.get();
  ASSERT_TRUE(write_model("llama2c", dir + "/m.bin", cfg, m.weights, o).ok());
  ASSERT_TRUE(write_model("gguf", dir + "/m.gguf", cfg, m.weights, o).ok());
  ASSERT_TRUE(write_model("safetensors", dir + "/hf", cfg, m.weights, o).ok());

  auto l2c = load_model(dir + "/m.bin", dir + "/tok.bin");
  auto gguf = load_model(dir + "/m.gguf");  // tokenizer embedded
  auto hf = load_model(dir + "/hf", dir + "/tok.bin");
  ASSERT_TRUE(l2c.ok()) << l2c.status().to_string();
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ(gguf->format, "gguf");
  EXPECT_EQ(hf->format, "safetensors");
  expect_same_weights(m.weights, l2c->weights, "llama2c");
  expect_same_weights(m.weights, gguf->weights, "gguf");
  expect_same_weights(m.weights, hf->weights, "safetensors");

  std::string text = "The quick brown fox jumps over the lazy dog.";
  std::vector<TokenId> prompt = l2c->tokenizer->encode(text, true);
  EXPECT_EQ(gguf->tokenizer->encode(text, true), prompt);
  std::vector<float> a = logits_for(*l2c, prompt), b = logits_for(*gguf, prompt), c = logits_for(*hf, prompt);
  ASSERT_EQ(a.size(), static_cast<size_t>(cfg.vocab_size));
  EXPECT_EQ(a, b) << "llama2c vs gguf";
  EXPECT_EQ(a, c) << "llama2c vs safetensors";
}

TEST(FormatEquivalence, Qwen2InGgufAndSafetensorsGivesIdenticalLogits) {
  std::string dir = testing::scratch_dir();
  ModelConfig cfg = *synth_shape("qwen2.5-0.5b");
  // Qwen2's structure (biases, GQA, rotate-half, theta 1e6) at a size that keeps the test fast.
  cfg.n_layers = 2;
  cfg.dim = 128;
  cfg.hidden_dim = 256;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  cfg.head_dim = 32;
  cfg.vocab_size = 512;
  cfg.max_seq_len = 256;
  SynthModel m = synthesize_weights(cfg, 11);
  auto tok = synthesize_tokenizer(cfg.vocab_size, 11);
  ASSERT_TRUE(write_file_atomic(dir + "/tok.bin", tok->serialize()).ok());
  std::vector<TokenId> prompt = {1, 200, 300, 17, 42, 99, 7};
  std::vector<float> reference;
  for (std::optional<DType> d :
       {std::optional<DType>(), std::optional<DType>(DType::kF16), std::optional<DType>(DType::kBF16)}) {
    std::string tag = d ? std::string(dtype_name(*d)) : "f32";
    ModelWriteOptions o;
    o.dtype = d;
    ASSERT_TRUE(write_model("gguf", dir + "/" + tag + ".gguf", cfg, m.weights, o).ok());
    ASSERT_TRUE(write_model("safetensors", dir + "/" + tag, cfg, m.weights, o).ok());
    auto g = load_model(dir + "/" + tag + ".gguf", dir + "/tok.bin");
    auto h = load_model(dir + "/" + tag, dir + "/tok.bin");
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    EXPECT_EQ(g->config.rope_layout, RopeLayout::kHalf);
    EXPECT_EQ(h->config.rope_layout, RopeLayout::kHalf);
    expect_same_weights(g->weights, h->weights, tag);
    if (!d) expect_same_weights(m.weights, g->weights, tag);
    std::vector<float> a = logits_for(*g, prompt), b = logits_for(*h, prompt);
    ASSERT_EQ(a.size(), static_cast<size_t>(cfg.vocab_size));
    EXPECT_EQ(a, b) << tag;
    if (!d) {
      reference = a;
    } else {
      // Half-precision weights change the logits a little, never a lot.
      double max_err = 0;
      for (size_t i = 0; i < a.size(); ++i) max_err = std::max(max_err, std::abs(double(a[i]) - reference[i]));
      EXPECT_LT(max_err, 0.05) << tag;
      EXPECT_GT(max_err, 0.0) << tag;
    }
  }
}

TEST(FormatEquivalence, QuantisedGgufRunsOnTheReferenceBackend) {
  std::string dir = testing::scratch_dir();
  ModelConfig cfg = *synth_shape("tiny");
  cfg.hidden_dim = 192;
  SynthModel m = synthesize_weights(cfg, 5);
  auto tok = synthesize_tokenizer(cfg.vocab_size, 5);
  std::vector<TokenId> prompt = {1, 100, 200, 300};
  ModelWriteOptions o;
  o.tokenizer = tok.get();
  ASSERT_TRUE(write_model("gguf", dir + "/f32.gguf", cfg, m.weights, o).ok());
  auto ref = load_model(dir + "/f32.gguf");
  ASSERT_TRUE(ref.ok());
  std::vector<float> want = logits_for(*ref, prompt);
  for (DType d : {DType::kQ8_0, DType::kQ4_0}) {
    o.dtype = d;
    std::string path = dir + "/" + std::string(dtype_name(d)) + ".gguf";
    ASSERT_TRUE(write_model("gguf", path, cfg, m.weights, o).ok());
    auto q = load_model(path);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    EXPECT_EQ(q->weights.find("blk.0.attn_q.weight")->dtype, d);
    std::vector<float> got = logits_for(*q, prompt);
    ASSERT_EQ(got.size(), want.size());
    double max_err = 0;
    for (size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::abs(double(got[i]) - want[i]));
    EXPECT_LT(max_err, d == DType::kQ8_0 ? 0.02 : 0.2) << dtype_name(d);
  }
}

}  // namespace
}  // namespace tessera::model
