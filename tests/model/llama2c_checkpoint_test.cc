#include "model/llama2c/llama2c_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/mapped_file.h"
#include "model/synth.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

std::string write_bytes(const std::string& path, const std::string& bytes) {
  EXPECT_TRUE(write_file_atomic(path, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}).ok());
  return path;
}

TEST(Llama2cCheckpoint, LoadsStories260K) {
  TS_REQUIRE_STORIES260K();
  auto ckpt = load_llama2c_checkpoint(testing::stories260k_dir() + "/stories260K.bin");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  const ModelConfig& c = ckpt->config;
  // SOURCE.md: dim=64 hidden_dim=172 n_layers=5 n_heads=8 n_kv_heads=4 vocab_size=512 (shared) seq_len=512.
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(ckpt->weights.find("output.weight"), nullptr);
  const WeightTensor* wq = ckpt->weights.find("blk.4.attn_q.weight");
  ASSERT_NE(wq, nullptr);
  EXPECT_EQ(wq->shape, (std::vector<int64_t>{64, 64}));
  // 260032 weights + 4096 freq_cis floats = the 264128 floats of SOURCE.md.
  int64_t total = 0;
  for (const WeightTensor& t : ckpt->weights.tensors()) total += t.numel();
  EXPECT_EQ(total + 512 * 8, 264128);
}

class CorruptCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::scratch_dir();
    auto config = synth_shape("tiny");
    ASSERT_TRUE(config.ok());
    config->n_layers = 1;
    config->max_seq_len = 16;
    SynthModel m = synthesize_weights(*config, 3);
    good_ = dir_ + "/good.bin";
    ASSERT_TRUE(write_llama2c_checkpoint(good_, m.config, m.weights).ok());
    bytes_ = *read_file(good_);
  }
  Status load(const std::string& bytes) {
    return load_llama2c_checkpoint(write_bytes(dir_ + "/bad.bin", bytes)).status();
  }
  std::string dir_, good_, bytes_;
};

TEST_F(CorruptCheckpoint, GoodFileLoads) {
  EXPECT_TRUE(load_llama2c_checkpoint(good_).ok());
  EXPECT_TRUE(looks_like_llama2c_checkpoint(good_));
}

TEST_F(CorruptCheckpoint, TruncatedFileIsRejected) {
  Status s = load(bytes_.substr(0, bytes_.size() - 100));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
}

TEST_F(CorruptCheckpoint, TrailingBytesAreRejected) {
  Status s = load(bytes_ + "extra");
  EXPECT_NE(s.message().find("describes"), std::string::npos) << s.message();
}

TEST_F(CorruptCheckpoint, ShortHeaderIsRejected) {
  Status s = load(bytes_.substr(0, 10));
  EXPECT_NE(s.message().find("header"), std::string::npos) << s.message();
}

TEST_F(CorruptCheckpoint, AbsurdHeaderValuesAreRejected) {
  for (int field = 0; field < 7; ++field) {
    for (int32_t value : {0, -7, 1 << 30, INT32_MIN}) {
      if (field == 5 && value == -7) continue;  // a negative vocab_size is legal: separate classifier
      std::string b = bytes_;
      std::memcpy(b.data() + 4 * field, &value, 4);
      Status s = load(b);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "field " << field << " = " << value;
    }
  }
  std::string b = bytes_;
  int32_t heads = 7;  // dim 64 is not a multiple of 7
  std::memcpy(b.data() + 12, &heads, 4);
  EXPECT_NE(load(b).message().find("multiple"), std::string::npos);
}

TEST_F(CorruptCheckpoint, NonFiniteWeightsAreRejected) {
  std::string b = bytes_;
  float nan = std::nanf("");
  std::memcpy(b.data() + 28 + 4 * 100, &nan, 4);
  Status s = load(b);
  EXPECT_NE(s.message().find("non-finite"), std::string::npos) << s.message();
}

TEST_F(CorruptCheckpoint, RandomBytesAreRejectedWithoutCrashing) {
  uint64_t x = 12345;
  for (int trial = 0; trial < 200; ++trial) {
    std::string b(28 + (trial % 13) * 64, '\0');
    for (char& c : b) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      c = static_cast<char>(x >> 56);
    }
    EXPECT_FALSE(load(b).ok());
  }
}

TEST(Llama2cCheckpoint, SeparateClassifierRoundTrips) {
  auto config = synth_shape("tiny");
  ASSERT_TRUE(config.ok());
  config->n_layers = 2;
  config->tied_embeddings = false;
  SynthModel m = synthesize_weights(*config, 9);
  std::string path = testing::scratch_dir() + "/untied.bin";
  ASSERT_TRUE(write_llama2c_checkpoint(path, m.config, m.weights).ok());
  auto back = load_llama2c_checkpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_FALSE(back->config.tied_embeddings);
  const WeightTensor* a = m.weights.find("output.weight");
  const WeightTensor* b = back->weights.find("output.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(std::memcmp(a->data, b->data, a->bytes), 0);
  for (const WeightTensor& t : m.weights.tensors()) {
    const WeightTensor* u = back->weights.find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(std::memcmp(t.data, u->data, t.bytes), 0) << t.name;
  }
}

}  // namespace
}  // namespace tessera::model
