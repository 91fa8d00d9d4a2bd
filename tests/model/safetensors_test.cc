// safetensors + config.json: round trips (single file and shards), HF naming, and bad headers / configs
// that must be clean errors.
#include "model/formats/safetensors/safetensors_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/formats/safetensors/hf_model.h"
#include "model/synth.h"
#include "support/paths.h"

namespace tessera::model {
namespace {
namespace fs = std::filesystem;

std::string st_file(const std::string& header, size_t data_bytes, uint64_t declared_len = 0) {
  std::string b(8, '\0');
  uint64_t n = declared_len != 0 ? declared_len : header.size();
  std::memcpy(b.data(), &n, 8);
  return b + header + std::string(data_bytes, '\0');
}

Status parse(const std::string& bytes) {
  return parse_safetensors({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "x.safetensors").status();
}

TEST(Safetensors, WrittenFileParsesBack) {
  std::string path = testing::scratch_dir() + "/a.safetensors";
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {0x3C00, 0x4000};
  std::vector<SafetensorsTensor> ts = {
      {"a", DType::kF32, {2, 3}, reinterpret_cast<const uint8_t*>(a.data()), 24},
      {"b \"quoted\"", DType::kF16, {2}, reinterpret_cast<const uint8_t*>(b.data()), 4},
      {"c", DType::kBF16, {2}, reinterpret_cast<const uint8_t*>(b.data()), 4},
  };
  ASSERT_TRUE(write_safetensors(path, ts, {{"format", "pt"}}).ok());
  auto f = MappedFile::open(path);
  ASSERT_TRUE(f.ok());
  uint64_t hn;
  std::memcpy(&hn, (*f)->data(), 8);
  EXPECT_EQ(hn % 8, 0u);
  auto c = parse_safetensors((*f)->bytes(), path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->tensors.size(), 3u);
  EXPECT_EQ(c->metadata.at("format"), "pt");
  EXPECT_EQ(c->tensors[0].name, "a");
  EXPECT_EQ(c->tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(c->tensors[0].data, a.data(), 24), 0);
  EXPECT_EQ(c->tensors[1].name, "b \"quoted\"");
  EXPECT_EQ(c->tensors[1].dtype, DType::kF16);
  EXPECT_EQ(c->tensors[2].dtype, DType::kBF16);
}

TEST(Safetensors, HeaderLengthBeyondTheFile) {
  Status s = parse(st_file("{}", 0, 1000));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("beyond the end"), std::string::npos) << s.message();
  EXPECT_EQ(parse(st_file("{}", 0, ~uint64_t{1})).code(), StatusCode::kInvalidArgument);  // 2^64 - 2
  EXPECT_EQ(parse("abc").code(), StatusCode::kInvalidArgument);
}

TEST(Safetensors, OffsetsOutOfRange) {
  Status s = parse(st_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the data section"), std::string::npos) << s.message();
  s = parse(st_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 16));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = parse(st_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 16));
  EXPECT_NE(s.message().find("span 12 bytes"), std::string::npos) << s.message();
  s = parse(st_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 16));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = parse(st_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 16));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = parse(st_file(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 16));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  s = parse(st_file(R"({"w":{"dtype":"F32"}})", 16));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = parse(st_file(R"({"w":)", 16));
  EXPECT_NE(s.message().find("not a JSON object"), std::string::npos) << s.message();
}

TEST(HfConfig, UnsupportedArchitectureIsAClearError) {
  auto r = parse_hf_config(R"({"architectures":["Qwen2MoeForCausalLM"],"hidden_size":64})", "config.json");
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("Qwen2MoeForCausalLM"), std::string::npos);
  EXPECT_NE(r.status().message().find("LlamaForCausalLM"), std::string::npos);
  r = parse_hf_config(R"({"hidden_size":64})", "config.json");
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  r = parse_hf_config("not json", "config.json");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  r = parse_hf_config(R"({"architectures":["LlamaForCausalLM"],"hidden_size":"64"})", "config.json");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(HfConfig, Qwen2FieldsAreRead) {
  auto r = parse_hf_config(R"({"architectures":["Qwen2ForCausalLM"],"hidden_size":896,"intermediate_size":4864,
      "num_hidden_layers":24,"num_attention_heads":14,"num_key_value_heads":2,"vocab_size":151936,
      "max_position_embeddings":32768,"rope_theta":1000000.0,"rms_norm_eps":1e-06,"tie_word_embeddings":true})",
                           "config.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->arch, "qwen2");
  EXPECT_EQ(r->head_dim, 64);
  EXPECT_EQ(r->n_kv_heads, 2);
  EXPECT_EQ(r->rope_theta, 1e6f);
  EXPECT_EQ(r->norm_eps, 1e-6f);
  EXPECT_TRUE(r->tied_embeddings);
  EXPECT_EQ(r->rope_layout, RopeLayout::kHalf);
  EXPECT_EQ(r->parameter_count(), 494032768);  // Qwen2.5-0.5B's published parameter count
}

// config.json's torch_dtype names the type the matrices are stored in, not that of the norms (kept f32).
TEST(HfModel, TorchDtypeNamesTheMatricesType) {
  ModelConfig cfg = *synth_shape("tiny");
  cfg.n_layers = 2;
  SynthModel m = synthesize_weights(cfg, 4);
  for (auto [dtype, name] :
       {std::pair{DType::kBF16, "bfloat16"}, std::pair{DType::kF16, "float16"}, std::pair{DType::kF32, "float32"}}) {
    const std::string dir = testing::scratch_dir() + "/dtype-" + name;
    HfWriteOptions o;
    o.dtype = dtype;
    ASSERT_TRUE(write_hf_model(dir, cfg, m.weights, o).ok());
    auto text = MappedFile::open(dir + "/config.json");
    ASSERT_TRUE(text.ok());
    const auto j = nlohmann::json::parse(
        std::string_view(reinterpret_cast<const char*>((*text)->bytes().data()), (*text)->bytes().size()));
    EXPECT_EQ(j.at("torch_dtype"), name);
  }
}

TEST(HfModel, ShardedAndSingleFilesLoadTheSameBytes) {
  ModelConfig cfg = *synth_shape("tiny");
  cfg.n_layers = 2;
  cfg.tied_embeddings = false;
  SynthModel m = synthesize_weights(cfg, 4);
  std::string one = testing::scratch_dir() + "/one", many = testing::scratch_dir() + "/many";
  ASSERT_TRUE(write_hf_model(one, cfg, m.weights, {}).ok());
  HfWriteOptions o;
  o.max_shard_bytes = 100000;
  ASSERT_TRUE(write_hf_model(many, cfg, m.weights, o).ok());
  EXPECT_TRUE(fs::exists(many + "/model.safetensors.index.json"));
  int shards = 0;
  for (const auto& e : fs::directory_iterator(many)) shards += e.path().extension() == ".safetensors";
  EXPECT_GE(shards, 2);
  auto a = load_hf_model(one);
  auto b = load_hf_model(many);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_FALSE(a->config.tied_embeddings);
  for (const WeightTensor& t : m.weights.tensors()) {
    const WeightTensor* x = a->weights.find(t.name);
    const WeightTensor* y = b->weights.find(t.name);
    ASSERT_TRUE(x && y) << t.name;
    // Llama Q/K are permuted to HF's layout on disk and back at load: the bytes are the original ones.
    EXPECT_EQ(std::memcmp(x->data, t.data, t.bytes), 0) << t.name;
    EXPECT_EQ(std::memcmp(y->data, t.data, t.bytes), 0) << t.name;
  }
  // On disk the Q rows really are in HF's rotate-half order.
  auto f = MappedFile::open(one + "/model.safetensors");
  auto c = parse_safetensors((*f)->bytes(), "one");
  for (const SafetensorsTensor& t : c->tensors) {
    if (t.name != "model.layers.0.self_attn.q_proj.weight") continue;
    const WeightTensor* q = m.weights.find("blk.0.attn_q.weight");
    size_t row = static_cast<size_t>(cfg.dim) * 4;
    // Row 1 of head 0 in HF order is interleaved row 2 (pair 1, first element).
    EXPECT_EQ(std::memcmp(t.data + row, q->data + 2 * row, row), 0);
  }
}

TEST(HfModel, MissingWeightsAndBadIndexAreErrors) {
  std::string dir = testing::scratch_dir();
  std::string cfg = R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,
      "num_hidden_layers":1,"num_attention_heads":4,"vocab_size":32})";
  ASSERT_TRUE(write_file_atomic(dir + "/config.json", {reinterpret_cast<const uint8_t*>(cfg.data()), cfg.size()}).ok());
  auto r = load_hf_model(dir);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  std::string idx = R"({"weight_map":{"x":"../../etc/passwd"}})";
  ASSERT_TRUE(write_file_atomic(dir + "/model.safetensors.index.json",
                                {reinterpret_cast<const uint8_t*>(idx.data()), idx.size()})
                  .ok());
  r = load_hf_model(dir);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("plain file name"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessera::model
