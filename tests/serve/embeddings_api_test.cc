// /v1/embeddings' request rules (api/embeddings.h), the vector a client gets (truncation, normalisation, base64
// as OpenAI's clients decode it), and which runner a node picks from its flags and model (serve/embeddings_api.h).
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "api/embeddings.h"
#include "serve/embeddings_api.h"

namespace tessera {
namespace {

using api::ApiError;
using api::EmbeddingRequest;
using Json = nlohmann::json;

EmbeddingRequest ok(const std::string& body) {
  auto r = api::parse_embedding_request(body);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << ": " << e->message;
  return std::holds_alternative<EmbeddingRequest>(r) ? std::get<EmbeddingRequest>(r) : EmbeddingRequest{};
}

ApiError bad(const std::string& body) {
  auto r = api::parse_embedding_request(body);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(EmbeddingRequest, TakesEveryInputForm) {
  EmbeddingRequest a = ok(R"({"model": "m", "input": "hello"})");
  ASSERT_EQ(a.inputs.size(), 1u);
  EXPECT_FALSE(a.inputs[0].is_tokens);
  EXPECT_EQ(a.inputs[0].text, "hello");
  EXPECT_FALSE(a.base64);
  EmbeddingRequest b = ok(R"({"model": "m", "input": ["a", "b", "c"], "encoding_format": "base64"})");
  EXPECT_EQ(b.inputs.size(), 3u);
  EXPECT_TRUE(b.base64);
  EmbeddingRequest c = ok(R"({"model": "m", "input": [1, 2, 3], "dimensions": 8})");
  ASSERT_EQ(c.inputs.size(), 1u);
  EXPECT_TRUE(c.inputs[0].is_tokens);
  EXPECT_EQ(c.inputs[0].ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(c.dimensions, 8);
  EmbeddingRequest d = ok(R"({"model": "m", "input": [[1, 2], [3], "text"], "user": "u", "normalize": false})");
  ASSERT_EQ(d.inputs.size(), 3u);
  EXPECT_EQ(d.inputs[1].ids, (std::vector<int64_t>{3}));
  EXPECT_EQ(d.inputs[2].text, "text");
  EXPECT_EQ(d.normalize, false);
  EXPECT_EQ(ok(R"({"model": "m", "input": "x", "embd_normalize": -1})").normalize, false);
  EXPECT_EQ(ok(R"({"model": "m", "input": "x", "embd_normalize": 2})").normalize, true);
}

TEST(EmbeddingRequest, RefusesWhatItCannotServeNamingTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  for (Case c :
       {Case{R"({"input": "x"})", "model"}, Case{R"({"model": "m"})", "input"},
        Case{R"({"model": "m", "input": ""})", "input"}, Case{R"({"model": "m", "input": []})", "input"},
        Case{R"({"model": "m", "input": ["a", ""]})", "input"}, Case{R"({"model": "m", "input": [[1], []]})", "input"},
        Case{R"({"model": "m", "input": [1, "a"]})", "input"}, Case{R"({"model": "m", "input": [1.5]})", "input"},
        Case{R"({"model": "m", "input": 7})", "input"}, Case{R"({"model": "m", "input": [{"a": 1}]})", "input"},
        Case{R"({"model": "m", "input": "x", "encoding_format": "int8"})", "encoding_format"},
        Case{R"({"model": "m", "input": "x", "dimensions": 0})", "dimensions"},
        Case{R"({"model": "m", "input": "x", "dimensions": "8"})", "dimensions"},
        Case{R"({"model": "m", "input": "x", "embd_normalize": 1})", "embd_normalize"},
        Case{R"({"model": "m", "input": "x", "truncate_prompt_tokens": 5})", "truncate_prompt_tokens"},
        Case{R"({"model": "m", "input": "x", "user": 5})", "user"}}) {
    ApiError e = bad(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_EQ(e.type, "invalid_request_error");
  }
  EXPECT_EQ(bad("{not json").status, 400);
  EXPECT_EQ(bad("[1, 2]").status, 400);
  Json many = {{"model", "m"}, {"input", std::vector<std::string>(api::kMaxEmbeddingInputs + 1, "x")}};
  EXPECT_NE(bad(many.dump()).message.find("at most 2048"), std::string::npos);
}

TEST(EmbeddingResponse, ShapesAndEncodesAsOpenAiDoes) {
  // Truncated to 2, then L2-normalised: [3, 4] / 5.
  std::vector<float> v = api::shape_embedding(std::vector<float>{3, 4, 12}, 2, true);
  EXPECT_EQ(v, (std::vector<float>{0.6f, 0.8f}));
  EXPECT_EQ(api::shape_embedding(std::vector<float>{3, 4, 12}, std::nullopt, false), (std::vector<float>{3, 4, 12}));
  EXPECT_EQ(api::shape_embedding(std::vector<float>{0, 0}, std::nullopt, true), (std::vector<float>{0, 0}));
  // Little-endian float32 bytes, standard base64 with padding (Python: base64.b64encode(struct.pack('<2f', 1, -2))).
  EXPECT_EQ(api::base64_f32(std::vector<float>{1.0f, -2.0f}), "AACAPwAAAMA=");
  EXPECT_EQ(api::base64_f32(std::vector<float>{0.5f, 0.25f, -0.125f}), "AAAAPwAAgD4AAAC+");
  Json j = Json::parse(api::embedding_response("m", {{1.0f, -2.0f}, {0.5f}}, 7, false));
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][1]["object"], "embedding");
  EXPECT_EQ(j["data"][0]["embedding"], Json::array({1.0, -2.0}));
  Json b = Json::parse(api::embedding_response("m", {{1.0f, -2.0f}}, 2, true));
  EXPECT_EQ(b["data"][0]["embedding"], "AACAPwAAAMA=");
}

model::ModelConfig config(const std::string& arch) {
  model::ModelConfig c;
  c.arch = arch;
  EXPECT_TRUE(model::apply_arch_features(c).ok());
  c.dim = 64;
  return c;
}

TEST(EmbeddingServing, RunnerFollowsTheModelUnlessTold) {
  model::EmbeddingSpec none, last{model::PoolingType::kLast, true, true, {}}, cls{model::PoolingType::kCls, false};
  // auto: a declared embedding model or an encoder pools; a plain decoder generates.
  auto s = serve::resolve_embedding_serving("auto", "", false, last, config("qwen3"));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->enabled);
  EXPECT_EQ(s->pooling, model::PoolingType::kLast);
  EXPECT_TRUE(s->matryoshka);
  EXPECT_EQ(s->runner(), "pooling");
  s = serve::resolve_embedding_serving("auto", "", false, none, config("qwen3"));
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->enabled);
  EXPECT_EQ(s->runner(), "generate");
  s = serve::resolve_embedding_serving("auto", "", false, cls, config("bert"));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->enabled);
  EXPECT_FALSE(s->normalize);  // sentence-transformers without a Normalize module
  // --pooling overrides; --runner pooling on a model that states none needs it.
  s = serve::resolve_embedding_serving("pooling", "mean", false, cls, config("bert"));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->pooling, model::PoolingType::kMean);
  auto e = serve::resolve_embedding_serving("pooling", "", false, none, config("qwen3"));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--pooling"), std::string::npos);
  s = serve::resolve_embedding_serving("pooling", "last", true, none, config("qwen3"));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->normalize);
  EXPECT_TRUE(s->matryoshka);
  // An encoder cannot generate; a generate runner ignores a declared pooling.
  e = serve::resolve_embedding_serving("generate", "", false, cls, config("bert"));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--runner pooling"), std::string::npos);
  s = serve::resolve_embedding_serving("generate", "", false, last, config("qwen3"));
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->enabled);
  EXPECT_FALSE(serve::resolve_embedding_serving("embed", "", false, last, config("qwen3")).ok());
}

}  // namespace
}  // namespace tessera
