// The gemma4 synth shapes (model/synth_gemma4.h): the published layer layout, --layers / --dim resizing, the
// GGUF keys and tensor shapes llama.cpp's gemma4 loader reads, and the synthetic gemma4 vocabulary through
// Tessera's tokenizer. llama.cpp loading these files is checked in tests/llamacpp/gemma4_test.cc.
#include "model/synth_gemma4.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/mapped_file.h"
#include "model/formats/gguf/gguf_file.h"
#include "model/loader.h"
#include "model/tokenizer/gguf_vocab.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

TEST(SynthGemma4, PublishedShapesHaveTheirLayerLayout) {
  auto e2b = gemma4_shape("gemma4-e2b", false);
  ASSERT_TRUE(e2b.ok()) << e2b.status().to_string();
  EXPECT_EQ(e2b->n_layers, 35);
  EXPECT_TRUE(e2b->is_sliding(0) && e2b->is_sliding(3));
  EXPECT_FALSE(e2b->is_sliding(4));  // 4 sliding, then 1 full
  EXPECT_TRUE(e2b->has_kv(14));
  EXPECT_FALSE(e2b->has_kv(15));  // the last 20 reuse KV
  EXPECT_EQ(e2b->ffn_width(14), 6144);
  EXPECT_EQ(e2b->ffn_width(15), 12288);  // double-wide where KV is shared
  auto moe = gemma4_shape("gemma4-26b-a4b", false);
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(moe->n_experts, 128);
  EXPECT_FALSE(moe->is_sliding(5));
  EXPECT_EQ(moe->ffn_width(29), 2112);
  EXPECT_FALSE(gemma4_shape("gemma4-9b", false).ok());
}

TEST(SynthGemma4, ResizingKeepsThePatternAndOneFullPeriodOfOwnKv) {
  auto s = gemma4_shape("gemma4-e2b", false);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(resize_gemma4_shape(*s, 7, 0, 0, -1).ok());
  EXPECT_EQ(s->shared_kv_layers, 2);  // round(20 * 7 / 35) = 4, but layers 0-4 keep their KV
  auto two = gemma4_shape("gemma4-e2b", false);
  ASSERT_TRUE(resize_gemma4_shape(*two, 2, 0, 0, -1).ok());
  EXPECT_EQ(two->shared_kv_layers, 0);
  auto d = gemma4_shape("gemma4-e2b", true);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(resize_gemma4_shape(*d, 0, 100, 0, -1).ok());  // not a multiple of the head size 32
  EXPECT_FALSE(resize_gemma4_shape(*d, 0, 0, 0, 0).ok());     // gemma4 layers slide
  ASSERT_TRUE(resize_gemma4_shape(*d, 0, 256, 512, -1).ok());
  EXPECT_EQ(d->n_heads, 8);
}

TEST(SynthGemma4, WritesTheKeysAndTensorsLlamaCppReads) {
  auto s = gemma4_shape("gemma4-26b-a4b", true);
  ASSERT_TRUE(s.ok());
  const std::string path = testing::scratch_dir() + "/moe.gguf";
  ASSERT_TRUE(write_gemma4_gguf(*s, 3, {}, path).ok());
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok());
  auto c = parse_gguf((*file)->bytes(), path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(*c->get_string("general.architecture"), "gemma4");
  const GgufValue* swa = c->find("gemma4.attention.sliding_window_pattern");
  ASSERT_NE(swa, nullptr);
  EXPECT_EQ(swa->elem_type, GgufType::kBool);
  EXPECT_EQ(swa->ints, (std::vector<int64_t>{1, 1, 1, 1, 1, 0}));
  const GgufValue* kvh = c->find("gemma4.attention.head_count_kv");
  ASSERT_NE(kvh, nullptr);
  EXPECT_EQ(kvh->ints, (std::vector<int64_t>{2, 2, 2, 2, 2, 1}));
  EXPECT_EQ(*c->get_int("gemma4.attention.key_length"), 64);
  EXPECT_EQ(*c->get_int("gemma4.attention.key_length_swa"), 32);
  EXPECT_EQ(*c->get_int("gemma4.expert_count"), 8);
  auto tensor = [&](const std::string& name) -> const GgufTensor* {
    for (const GgufTensor& t : c->tensors)
      if (t.name == name) return &t;
    return nullptr;
  };
  ASSERT_NE(tensor("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(tensor("blk.0.attn_q.weight")->ne, (std::vector<int64_t>{64, 2 * 32}));
  EXPECT_EQ(tensor("blk.5.attn_q.weight")->ne, (std::vector<int64_t>{64, 2 * 64}));
  EXPECT_NE(tensor("blk.0.attn_v.weight"), nullptr);
  EXPECT_EQ(tensor("blk.5.attn_v.weight"), nullptr);  // full layers: V is K
  EXPECT_EQ(tensor("blk.1.ffn_gate_up_exps.weight")->ne, (std::vector<int64_t>{64, 2 * 128, 8}));
  EXPECT_EQ(tensor("blk.1.ffn_gate_inp.weight")->dtype, DType::kF32);
  const GgufTensor* freqs = tensor("rope_freqs.weight");
  ASSERT_NE(freqs, nullptr);
  ASSERT_EQ(freqs->ne, (std::vector<int64_t>{32}));
  std::vector<float> f(32);
  std::memcpy(f.data(), freqs->data, sizeof(float) * f.size());
  EXPECT_EQ(f[7], 1.0f);  // 64 * 0.25 / 2 = 8 rotated pairs
  EXPECT_EQ(f[8], 1e30f);

  // Tessera reads its vocabulary and its mixture-of-experts layout as llama.cpp's gemma4 loader does.
  auto tok = load_gguf_tokenizer(path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string text = "Hi there,\n\n  caf\xC3\xA9!";
  std::vector<TokenId> ids = (*tok)->encode(text, true);
  ASSERT_GT(ids.size(), 2u);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ((*tok)->decode(ids), text);
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& cfg = m->config;
  EXPECT_TRUE(cfg.has_moe_layers());
  EXPECT_EQ(cfg.moe.n_experts, 8);
  EXPECT_EQ(cfg.moe.n_experts_used, 2);
  EXPECT_EQ(cfg.moe.expert_hidden_dim, 128);
  EXPECT_EQ(cfg.moe.gating, ExpertGating::kSoftmax);
  EXPECT_TRUE(cfg.moe.normalize_weights);
  EXPECT_TRUE(cfg.moe.dense_beside_experts);
  EXPECT_EQ(cfg.hidden_dim, 128);  // the dense MLP beside the experts
  EXPECT_EQ(cfg.n_kv_heads, 2);
  EXPECT_EQ(cfg.layer_kv_heads, (std::vector<int>{2, 2, 2, 2, 2, 1}));
  EXPECT_EQ(cfg.layer_kv_dim(0), 2 * 32);
  EXPECT_EQ(cfg.layer_kv_dim(5), 1 * 64);
  EXPECT_FALSE(cfg.uniform_kv());
}

// The dense variant loads: its per-layer geometry as llama.cpp's gemma4 loader reads it.
TEST(SynthGemma4, DenseFileLoadsWithItsPerLayerGeometry) {
  auto s = gemma4_shape("gemma4-e2b", true);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(resize_gemma4_shape(*s, 10, 0, 0, -1).ok());
  const std::string path = testing::scratch_dir() + "/e2b.gguf";
  ASSERT_TRUE(write_gemma4_gguf(*s, 3, {}, path).ok());
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, "gemma4");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.head_dim_sliding, 32);
  EXPECT_EQ(c.sliding_pattern, 5);
  EXPECT_EQ(c.layer_head_dim(0), 32);
  EXPECT_EQ(c.layer_head_dim(4), 64);
  EXPECT_EQ(c.shared_kv_layers, 5);
  EXPECT_FALSE(c.uniform_kv());
  EXPECT_EQ(c.kv_source_layer(4), 4);
  EXPECT_EQ(c.kv_source_layer(5), 3);  // sliding: the last sliding layer with its own KV
  EXPECT_EQ(c.kv_source_layer(9), 4);  // full: the last full one
  EXPECT_EQ(c.layer_hidden_dim(4), 128);
  EXPECT_EQ(c.layer_hidden_dim(5), 256);  // double-wide where KV is shared
  EXPECT_EQ(c.per_layer_dim, 16);
  EXPECT_TRUE(c.v_norm && c.qk_norm && c.post_norms && c.layer_output_scale);
  EXPECT_EQ(c.attn_scale, 1.0f);
  EXPECT_EQ(c.final_softcap, 30.0f);
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_theta_sliding, 1e4f);
}

TEST(SynthGemma4, VocabularyMergesReachEveryPiece) {
  Vocab v = synthesize_gemma4_vocab(600, 5);
  ASSERT_EQ(v.tokens.size(), 600u);
  ASSERT_TRUE(v.validate().ok());
  auto tok = make_tokenizer(v);
  ASSERT_TRUE(tok.ok());
  int whole = 0;
  for (size_t i = 6 + 256 + 95; i < v.tokens.size(); ++i) {
    std::string text;
    for (size_t k = 0; k < v.tokens[i].size();) {  // U+2581 back to a space
      if (v.tokens[i].compare(k, 3, "\xE2\x96\x81") == 0) {
        text += ' ';
        k += 3;
      } else {
        text += v.tokens[i][k++];
      }
    }
    std::vector<TokenId> ids = (*tok)->tokenize(text, {.add_special = false, .parse_special = false});
    whole += ids == std::vector<TokenId>{static_cast<TokenId>(i)} ? 1 : 0;
    EXPECT_EQ((*tok)->decode(ids), text);
  }
  // A piece made by a later merge may lose to an earlier merge across its halves' boundary, as in any BPE;
  // most pieces are reached whole.
  EXPECT_GT(whole, 150);
}

}  // namespace
}  // namespace tessera::model
