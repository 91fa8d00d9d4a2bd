#include "api/openai.h"

#include <gtest/gtest.h>

#include "serve/chat_format.h"

namespace tessera::serve {
namespace {

using namespace tessera::api;  // the parser under test; ChatFormat below is serve's

ApiRequest ok(std::string_view body, bool chat = false) {
  auto r = parse_request(body, chat);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::get<ApiRequest>(r);
}

ApiError err(std::string_view body, bool chat = false) {
  auto r = parse_request(body, chat);
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << "accepted: " << body;
    return {};
  }
  return std::get<ApiError>(r);
}

TEST(OpenAiParse, CompletionFieldsMapToTheEngine) {
  ApiRequest r = ok(R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,
                       "min_p":0.05,"seed":3,"stop":["\n","END"],"presence_penalty":0.5,"frequency_penalty":-1,
                       "logprobs":2,"stream":true,"stream_options":{"include_usage":true},"echo":true,"user":"u"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.generation.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.generation.sampling.top_p, 0.9f);
  EXPECT_EQ(r.generation.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.generation.sampling.min_p, 0.05f);
  EXPECT_EQ(r.generation.sampling.seed, 3u);
  EXPECT_EQ(r.generation.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_FLOAT_EQ(r.generation.sampling.frequency_penalty, -1.0f);
  EXPECT_EQ(r.generation.logprobs, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.echo);
}

TEST(OpenAiParse, DefaultsAreOpenAIs) {
  ApiRequest r = ok(R"({"model":"m","prompt":"hi"})");
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_FLOAT_EQ(r.generation.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.generation.sampling.top_p, 1.0f);
  EXPECT_EQ(r.generation.logprobs, -1);
  EXPECT_FALSE(r.stream);
}

TEST(OpenAiParse, TokenPromptsAndSingleElementLists) {
  EXPECT_EQ(ok(R"({"model":"m","prompt":[1,2,3]})").prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ok(R"({"model":"m","prompt":["only"]})").prompt, "only");
  EXPECT_EQ(ok(R"({"model":"m","prompt":["a","b"]})").prompts.size(), 2u);  // a list: one choice per prompt
  EXPECT_EQ(err(R"({"model":"m","prompt":[1,"x"]})").param, "prompt");
}

TEST(OpenAiParse, ChatMessagesAndContentParts) {
  ApiRequest r = ok(R"({"model":"m","messages":[{"role":"system","content":"be brief"},
                         {"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}],
                         "max_completion_tokens":5,"logprobs":true,"top_logprobs":3})",
                    true);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "hello");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.generation.logprobs, 3);
  EXPECT_EQ(err(R"({"model":"m","messages":[]})", true).param, "messages");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", true).param, "messages");
  EXPECT_NE(
      err(R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})", true).message.find("text"),
      std::string::npos);
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{}]})", true).param, "tools");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})", true).param,
            "top_logprobs");
}

TEST(OpenAiParse, RejectsWhatItCannotHonour) {
  EXPECT_EQ(err("not json").message, "the request body is not valid JSON");
  EXPECT_EQ(err("[1,2]").message, "the request body must be a JSON object");
  EXPECT_EQ(err(R"({"prompt":"x"})").param, "model");
  EXPECT_EQ(err(R"({"model":"m"})").param, "prompt");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","max_tokens":"ten"})").param, "max_tokens");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","max_tokens":-1})").param, "max_tokens");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","max_tokens":1.5})").param, "max_tokens");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","temperature":3})").param, "temperature");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","top_p":0})").param, "top_p");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","n":17})").param, "n");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","stop":[""]})").param, "stop");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","stop":7})").param, "stop");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","stream":"yes"})").param, "stream");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})").param, "stream_options");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","logprobs":21})").param, "logprobs");
  EXPECT_EQ(err(R"({"model":"m","prompt":"x","suffix":"y"})").param, "suffix");
}

TEST(OpenAiParse, ErrorBodyHasOpenAIsShape) {
  std::string body = error_body({404, "no such model", "invalid_request_error", "model", "model_not_found"});
  EXPECT_EQ(
      body,
      R"({"error":{"code":"model_not_found","message":"no such model","param":"model","type":"invalid_request_error"}})");
}

TEST(ChatFormat, PlainJoinsContents) {
  auto req = [](std::string body) { return std::get<ApiRequest>(parse_request(body, true)); };
  ApiRequest r = req(
      R"({"model":"m","messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"Tell a story."}]})");
  auto plain = make_chat_format("plain", {});
  ASSERT_TRUE(plain.ok());
  auto s = plain->formatter(r, {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->text, "Be kind.\n\nTell a story.");
  auto chatml = make_chat_format("chatml", {});
  ASSERT_TRUE(chatml.ok());
  r = req(R"({"model":"m","messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"Hi"}]})");
  auto c = chatml->formatter(r, {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->text, "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  auto bad = make_chat_format("nope", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("plain"), std::string::npos);
}

}  // namespace
}  // namespace tessera::serve
