#include "model/synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/mapped_file.h"
#include "model/llama2c/llama2c_checkpoint.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

TEST(Synth, NamedShapesMatchTheirModels) {
  auto s15 = synth_shape("stories15M");
  ASSERT_TRUE(s15.ok());
  EXPECT_EQ(s15->dim, 288);
  EXPECT_EQ(s15->hidden_dim, 768);
  EXPECT_EQ(s15->n_layers, 6);
  EXPECT_EQ(s15->n_heads, 6);
  EXPECT_EQ(s15->vocab_size, 32000);
  EXPECT_EQ(s15->max_seq_len, 256);
  EXPECT_NEAR(s15->parameter_count() / 1e6, 15.2, 0.1);
  auto s110 = synth_shape("stories110M");
  ASSERT_TRUE(s110.ok());
  EXPECT_EQ(s110->dim, 768);
  EXPECT_EQ(s110->hidden_dim, 2048);
  EXPECT_EQ(s110->n_layers, 12);
  EXPECT_EQ(s110->max_seq_len, 1024);
  EXPECT_NEAR(s110->parameter_count() / 1e6, 110.0, 1.0);
  auto bad = synth_shape("gpt5");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stories15M"), std::string::npos);  // lists the known shapes
}

TEST(Synth, SameSeedSameBytesOtherSeedOtherBytes) {
  auto c = synth_shape("tiny");
  ASSERT_TRUE(c.ok());
  std::string dir = testing::scratch_dir();
  for (auto [name, seed] : {std::pair{"a", 1}, {"b", 1}, {"c", 2}}) {
    SynthModel m = synthesize_weights(*c, seed);
    ASSERT_TRUE(write_llama2c_checkpoint(dir + "/" + name + ".bin", m.config, m.weights).ok());
  }
  EXPECT_EQ(*read_file(dir + "/a.bin"), *read_file(dir + "/b.bin"));
  EXPECT_NE(*read_file(dir + "/a.bin"), *read_file(dir + "/c.bin"));
}

TEST(Synth, WeightsHaveTheStatedDistribution) {
  auto c = synth_shape("tiny");
  SynthModel m = synthesize_weights(*c, 5);
  const WeightTensor* w = m.weights.find("blk.0.ffn_gate.weight");
  ASSERT_NE(w, nullptr);
  const auto* f = reinterpret_cast<const float*>(w->data);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < w->numel(); ++i) {
    sum += f[i];
    sq += f[i] * f[i];
  }
  double mean = sum / w->numel(), sd = std::sqrt(sq / w->numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.02, 0.002);
  const auto* norm = reinterpret_cast<const float*>(m.weights.find("output_norm.weight")->data);
  EXPECT_NEAR(norm[0], 1.0, 0.1);
}

TEST(Synth, TokenizerHasSpecialsBytesAndUniquePieces) {
  auto tok = synthesize_tokenizer(32000, 7);
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->piece(1), "\n<s>\n");
  EXPECT_EQ(tok->piece(3 + 0x41), "<0x41>");
  std::string text = "The quick brown fox jumps over the lazy dog.";
  std::vector<TokenId> ids = tok->encode(text, true);
  EXPECT_EQ(tok->decode(ids), text);
  for (TokenId id : ids) EXPECT_FALSE(id >= 3 && id < 259) << "printable ASCII needs no byte fallback";
}

}  // namespace
}  // namespace tessera::model
