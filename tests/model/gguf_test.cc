// GGUF v3: container round trips, model round trips in every tensor type, embedded tokenizers, and bad
// files (wrong magic, version, counts, truncation) that must be clean errors.
#include "model/formats/gguf/gguf_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/mapped_file.h"
#include "base/quant.h"
#include "model/formats/gguf/gguf_model.h"
#include "model/synth.h"
#include "model/weight_export.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

ModelConfig small_llama() {
  ModelConfig c = *synth_shape("tiny");
  c.n_layers = 2;
  return c;
}

ModelConfig small_qwen() {
  ModelConfig c = *synth_shape("qwen2.5-0.5b");
  c.n_layers = 2;
  c.dim = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.hidden_dim = 96;
  c.vocab_size = 512;
  c.max_seq_len = 128;
  return c;
}

TEST(GgufFile, MetadataOfEveryKindRoundTrips) {
  std::string path = testing::scratch_dir() + "/m.gguf";
  std::vector<float> data(64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  GgufTensor t;
  t.name = "x";
  t.ne = {32, 2};
  t.dtype = DType::kF32;
  t.bytes = data.size() * 4;
  t.data = reinterpret_cast<const uint8_t*>(data.data());
  std::vector<std::pair<std::string, GgufValue>> kv = {
      {"a.u32", GgufValue::u32(4000000000u)},
      {"a.i32", GgufValue::i32(-7)},
      {"a.f32", GgufValue::f32(1.5f)},
      {"a.bool", GgufValue::boolean(true)},
      {"a.str", GgufValue::str("héllo")},
      {"a.strs", GgufValue::string_array({"", "b", "\xE2\x96\x81x"})},
      {"a.f32s", GgufValue::f32_array({-1.0f, 2.5f})},
      {"a.i32s", GgufValue::i32_array({3, -4})},
  };
  ASSERT_TRUE(write_gguf(path, kv, {t}).ok());
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok());
  auto c = parse_gguf((*file)->bytes(), path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->version, 3u);
  ASSERT_EQ(c->keys.size(), kv.size());
  EXPECT_EQ(*c->get_int("a.u32"), 4000000000);
  EXPECT_EQ(*c->get_int("a.i32"), -7);
  EXPECT_EQ(*c->get_float("a.f32"), 1.5);
  EXPECT_EQ(*c->get_int("a.bool"), 1);
  EXPECT_EQ(*c->get_string("a.str"), "héllo");
  EXPECT_EQ(c->find("a.strs")->strings, (std::vector<std::string>{"", "b", "\xE2\x96\x81x"}));
  EXPECT_EQ(c->find("a.f32s")->floats, (std::vector<double>{-1.0, 2.5}));
  EXPECT_EQ(c->find("a.i32s")->ints, (std::vector<int64_t>{3, -4}));
  EXPECT_EQ(c->get_int("a.str").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->get_int("missing").status().code(), StatusCode::kNotFound);
  ASSERT_EQ(c->tensors.size(), 1u);
  EXPECT_EQ(c->tensors[0].shape(), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(c->tensors[0].offset % 32, 0u);
  EXPECT_EQ(std::memcmp(c->tensors[0].data, data.data(), t.bytes), 0);
}

TEST(GgufModel, LlamaRoundTripsBitExactWithItsTokenizer) {
  ModelConfig cfg = small_llama();
  SynthModel m = synthesize_weights(cfg, 3);
  auto tok = synthesize_tokenizer(cfg.vocab_size, 3);
  auto vocab = tok->to_vocab();
  ASSERT_TRUE(vocab.ok());
  std::string path = testing::scratch_dir() + "/llama.gguf";
  ASSERT_TRUE(write_gguf_model(path, cfg, m.weights, &*vocab, {}).ok());
  auto g = load_gguf_model(path);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->config.arch, "llama");
  EXPECT_EQ(g->config.dim, cfg.dim);
  EXPECT_EQ(g->config.n_kv_heads, cfg.n_kv_heads);
  EXPECT_EQ(g->config.rope_layout, RopeLayout::kInterleaved);
  EXPECT_TRUE(g->config.tied_embeddings);
  ASSERT_EQ(g->weights.tensors().size(), m.weights.tensors().size());
  for (const WeightTensor& t : m.weights.tensors()) {
    const WeightTensor* r = g->weights.find(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    EXPECT_EQ(r->shape, t.shape) << t.name;
    ASSERT_EQ(r->bytes, t.bytes);
    EXPECT_EQ(std::memcmp(r->data, t.data, t.bytes), 0) << t.name;
  }
  ASSERT_NE(g->tokenizer, nullptr);
  EXPECT_EQ(g->tokenizer->kind(), "sentencepiece-bpe");
  for (std::string s : {"", "Hello world", "  two  spaces", "tab\there", "naïve café ☃ 😀", "<0x41>"}) {
    EXPECT_EQ(g->tokenizer->encode(s, true), tok->encode(s, true)) << s;
    auto ids = g->tokenizer->encode(s, true);
    EXPECT_EQ(g->tokenizer->decode(ids), tok->decode(ids)) << s;
  }
}

TEST(GgufModel, ASmallerTokenizerIsPaddedToTheEmbedding) {
  ModelConfig cfg = small_llama();
  SynthModel m = synthesize_weights(cfg, 3);
  auto tok = synthesize_tokenizer(300, 3);  // the model has 512 embedding rows
  auto vocab = tok->to_vocab();
  std::string path = testing::scratch_dir() + "/pad.gguf";
  ASSERT_TRUE(write_gguf_model(path, cfg, m.weights, &*vocab, {}).ok());
  auto g = load_gguf_model(path);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->tokenizer->vocab_size(), 512);
  EXPECT_EQ(g->vocab->tokens[400], "[PAD400]");
  EXPECT_EQ(g->vocab->types[400], kTokenUnused);
  EXPECT_EQ(g->tokenizer->encode("a padded vocabulary", true), tok->encode("a padded vocabulary", true));
}

TEST(GgufModel, EveryTensorTypeStoresWhatQuantHProduces) {
  ModelConfig cfg = small_llama();
  cfg.hidden_dim = 192;  // rows divisible by 32 so every matrix can be block-quantised
  SynthModel m = synthesize_weights(cfg, 5);
  for (DType d : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    std::string path = testing::scratch_dir() + "/q.gguf";
    GgufWriteOptions o;
    o.matrix_dtype = d;
    std::vector<std::string> notes;
    o.notes = &notes;
    ASSERT_TRUE(write_gguf_model(path, cfg, m.weights, nullptr, o).ok());
    EXPECT_TRUE(notes.empty());
    auto g = load_gguf_model(path);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    for (const WeightTensor& t : m.weights.tensors()) {
      const WeightTensor* r = g->weights.find(t.name);
      ASSERT_NE(r, nullptr);
      DType want = t.shape.size() == 2 ? d : DType::kF32;
      EXPECT_EQ(r->dtype, want) << t.name;
      std::vector<uint8_t> expect(dtype_bytes(want, static_cast<size_t>(t.numel())));
      ASSERT_TRUE(
          quantize({reinterpret_cast<const float*>(t.data), static_cast<size_t>(t.numel())}, want, expect.data()).ok());
      ASSERT_EQ(r->bytes, expect.size());
      EXPECT_EQ(std::memcmp(r->data, expect.data(), expect.size()), 0) << t.name << " " << dtype_name(d);
    }
  }
}

TEST(GgufModel, Qwen2KeepsBiasesAndRotateHalf) {
  ModelConfig cfg = small_qwen();
  SynthModel m = synthesize_weights(cfg, 9);
  std::string path = testing::scratch_dir() + "/qwen.gguf";
  ASSERT_TRUE(write_gguf_model(path, cfg, m.weights, nullptr, {}).ok());
  auto g = load_gguf_model(path);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->config.arch, "qwen2");
  EXPECT_EQ(g->config.rope_layout, RopeLayout::kHalf);
  EXPECT_EQ(g->config.rope_theta, 1000000.0f);
  EXPECT_EQ(g->config.norm_eps, 1e-6f);
  EXPECT_EQ(g->config.head_dim, 16);
  const WeightTensor* b = g->weights.find("blk.1.attn_k.bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(std::memcmp(b->data, m.weights.find("blk.1.attn_k.bias")->data, b->bytes), 0);
}

TEST(GgufModel, WritingAnInterleavedModelAsQwen2PermutesQandK) {
  // The same weights declared interleaved and written as qwen2 (rotate-half) must come back permuted, and
  // permuting back gives the original bytes.
  ModelConfig cfg = small_qwen();
  cfg.rope_layout = RopeLayout::kInterleaved;
  SynthModel m = synthesize_weights(cfg, 2);
  std::string path = testing::scratch_dir() + "/p.gguf";
  ASSERT_TRUE(write_gguf_model(path, cfg, m.weights, nullptr, {}).ok());
  auto g = load_gguf_model(path);
  ASSERT_TRUE(g.ok());
  const WeightTensor* orig = m.weights.find("blk.0.attn_q.weight");
  const WeightTensor* got = g->weights.find("blk.0.attn_q.weight");
  EXPECT_NE(std::memcmp(orig->data, got->data, orig->bytes), 0);
  auto ex = export_weights(g->config, g->weights, RopeLayout::kInterleaved, std::nullopt, {DType::kF32});
  ASSERT_TRUE(ex.ok());
  for (const WeightTensor& t : ex->tensors) {
    const WeightTensor* o = m.weights.find(t.name);
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(std::memcmp(o->data, t.data, t.bytes), 0) << t.name;
  }
}

class GgufBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig cfg = small_llama();
    cfg.n_layers = 1;
    SynthModel m = synthesize_weights(cfg, 1);
    auto vocab = synthesize_tokenizer(cfg.vocab_size, 1)->to_vocab();
    path_ = testing::scratch_dir() + "/good.gguf";
    ASSERT_TRUE(write_gguf_model(path_, cfg, m.weights, &*vocab, {}).ok());
    good_ = *read_file(path_);
  }
  Status parse(const std::string& bytes) {
    auto r = parse_gguf_model({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "bad.gguf", nullptr);
    return r.status();
  }
  std::string path_, good_;
};

TEST_F(GgufBadInput, TheGoodFileParses) { EXPECT_TRUE(parse(good_).ok()) << parse(good_).to_string(); }

TEST_F(GgufBadInput, WrongMagic) {
  std::string b = good_;
  b[0] = 'X';
  Status s = parse(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("wrong magic"), std::string::npos) << s.message();
}

TEST_F(GgufBadInput, WrongVersion) {
  std::string b = good_;
  uint32_t v = 4;
  std::memcpy(b.data() + 4, &v, 4);
  Status s = parse(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("version 4"), std::string::npos) << s.message();
}

TEST_F(GgufBadInput, TensorCountLargerThanTheFile) {
  for (uint64_t n : {uint64_t{1} << 40, ~uint64_t{0}, uint64_t{100000}}) {
    std::string b = good_;
    std::memcpy(b.data() + 8, &n, 8);
    Status s = parse(b);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << n;
    EXPECT_FALSE(s.ok());
  }
  // A count one too high: the parser runs out of tensor infos and says where.
  std::string b = good_;
  uint64_t n;
  std::memcpy(&n, b.data() + 8, 8);
  ++n;
  std::memcpy(b.data() + 8, &n, 8);
  EXPECT_EQ(parse(b).code(), StatusCode::kInvalidArgument);
}

TEST_F(GgufBadInput, MetadataCountLargerThanTheFile) {
  std::string b = good_;
  uint64_t n = uint64_t{1} << 50;
  std::memcpy(b.data() + 16, &n, 8);
  Status s = parse(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("metadata count"), std::string::npos) << s.message();
}

TEST_F(GgufBadInput, TruncatedDataNamesTheTensor) {
  std::string b = good_.substr(0, good_.size() - 100);
  Status s = parse(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("output_norm.weight"), std::string::npos) << s.message();
}

TEST_F(GgufBadInput, EveryPrefixIsACleanError) {
  // Cutting the file anywhere in the header or data must give an error, never a crash or an accepted file.
  for (size_t n = 0; n < good_.size(); n += (n < 20000 ? 1 : 997)) {
    Status s = parse(good_.substr(0, n));
    ASSERT_FALSE(s.ok()) << "prefix " << n << " accepted";
  }
}

TEST_F(GgufBadInput, UnsupportedArchitectureAndTensorType) {
  std::vector<std::pair<std::string, GgufValue>> kv = {{"general.architecture", GgufValue::str("mamba")}};
  std::string path = testing::scratch_dir() + "/mamba.gguf";
  ASSERT_TRUE(write_gguf(path, kv, {}).ok());
  auto r = load_gguf_model(path);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("mamba"), std::string::npos);

  std::string b = good_;
  // The first tensor info's type field: find "token_embd.weight" and patch the type after its dims.
  size_t at = b.find("token_embd.weight");
  ASSERT_NE(at, std::string::npos);
  size_t type_off = at + 17 + 4 + 2 * 8;
  // A ggml type Tessera does not read is named, with the types it does read.
  uint32_t iq2_xxs = 16;
  std::memcpy(b.data() + type_off, &iq2_xxs, 4);
  Status s = parse(b);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.to_string();
  EXPECT_NE(s.message().find("GGUF tensor type 16 (IQ2_XXS) is not supported"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Q4_K=12"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("token_embd.weight"), std::string::npos) << s.message();
  // An id ggml never had is called unknown, not unsupported.
  uint32_t bogus = 99;
  std::memcpy(b.data() + type_off, &bogus, 4);
  s = parse(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("GGUF tensor type 99 is unknown"), std::string::npos) << s.message();
  // A K-quant tensor whose rows are not whole 256-element super-blocks (the tiny shape's rows are 64 long).
  uint32_t q4k = 12;
  std::memcpy(b.data() + type_off, &q4k, 4);
  s = parse(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("q4_k block size 256"), std::string::npos) << s.message();
}

TEST(GgufFile, GgmlTypeIdsAndNames) {
  const std::pair<uint32_t, DType> kIds[] = {
      {0, DType::kF32},   {1, DType::kF16},   {2, DType::kQ4_0},  {3, DType::kQ4_1},  {6, DType::kQ5_0},
      {7, DType::kQ5_1},  {8, DType::kQ8_0},  {10, DType::kQ2_K}, {11, DType::kQ3_K}, {12, DType::kQ4_K},
      {13, DType::kQ5_K}, {14, DType::kQ6_K}, {30, DType::kBF16}};
  for (auto [id, d] : kIds) {
    auto r = dtype_from_ggml_type(id);
    ASSERT_TRUE(r.ok()) << id;
    EXPECT_EQ(*r, d) << id;
    EXPECT_EQ(ggml_type_of(d), id) << dtype_name(d);
  }
  EXPECT_STREQ(ggml_type_name(14), "Q6_K");
  EXPECT_STREQ(ggml_type_name(39), "MXFP4");
  EXPECT_EQ(ggml_type_name(99), nullptr);
}

// Every K-quant and classic type through a GGUF file and back, on a shape whose rows are whole super-blocks.
TEST(GgufModel, KQuantTensorsRoundTrip) {
  ModelConfig cfg = small_llama();
  cfg.dim = 256;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 4;
  cfg.head_dim = 64;
  cfg.hidden_dim = 512;
  SynthModel m = synthesize_weights(cfg, 9);
  for (DType d : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K}) {
    std::string path = testing::scratch_dir() + "/k.gguf";
    GgufWriteOptions o;
    o.matrix_dtype = d;
    ASSERT_TRUE(write_gguf_model(path, cfg, m.weights, nullptr, o).ok());
    auto g = load_gguf_model(path);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    const WeightTensor* r = g->weights.find("blk.1.ffn_down.weight");
    const WeightTensor* t = m.weights.find("blk.1.ffn_down.weight");
    ASSERT_TRUE(r && t);
    EXPECT_EQ(r->dtype, d);
    std::vector<uint8_t> expect(dtype_bytes(d, static_cast<size_t>(t->numel())));
    ASSERT_TRUE(
        quantize({reinterpret_cast<const float*>(t->data), static_cast<size_t>(t->numel())}, d, expect.data()).ok());
    ASSERT_EQ(r->bytes, expect.size());
    EXPECT_EQ(std::memcmp(r->data, expect.data(), expect.size()), 0) << dtype_name(d);
  }
}

TEST_F(GgufBadInput, MissingFileIsNotFound) {
  EXPECT_EQ(load_gguf_model("/nonexistent.gguf").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera::model
