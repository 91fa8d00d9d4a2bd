// /tokenize and /detokenize bodies (serve/tokenize_api.h) against the model's own tokenizer: the ids are
// what encode() gives (and what chat completions feeds the engine for messages), the text round-trips, and
// every malformed or unsupported body is an OpenAI-shaped error naming the field.
#include "serve/tokenize_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/tokenizer/load_tokenizer.h"
#include "support/paths.h"

namespace tessera::serve {
namespace {

using json = nlohmann::json;

class TokenizeApi : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto t = model::load_tokenizer(testing::stories260k_dir() + "/tok512.bin");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tok_ = std::move(*t);
    chat_ = [](const api::ApiRequest& r, const std::function<bool()>&) -> Result<ChatPrompt> {
      std::string s;
      for (const api::ChatMessage& x : r.messages) s += x.role + ": " + x.content + "\n";
      if (r.continue_final_message) s += "(continued)";
      return ChatPrompt{.text = s + (r.add_generation_prompt ? "assistant:" : "")};
    };
  }
  json ok_tokenize(const std::string& body) {
    TokenizeReply r = tokenize_request(body, *tok_, chat_, {"stories"}, 256);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  }
  void expect_error(const TokenizeReply& r, int status, const std::string& needle) {
    EXPECT_EQ(r.status, status) << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  }
  std::unique_ptr<model::Tokenizer> tok_;
  ChatFormatter chat_;
};

TEST_F(TokenizeApi, PromptIdsAreTheTokenizersWithAndWithoutSpecialTokens) {
  const std::string text = "Once upon a time, there was a cat.";
  json j = ok_tokenize(json{{"model", "stories"}, {"prompt", text}}.dump());
  std::vector<model::TokenId> want = tok_->encode(text, true);
  ASSERT_EQ(want.front(), 1);
  EXPECT_EQ(j["tokens"].get<std::vector<model::TokenId>>(), want);
  EXPECT_EQ(j["count"].get<size_t>(), want.size());
  EXPECT_EQ(j["max_model_len"].get<int>(), 256);
  EXPECT_TRUE(j["token_strs"].is_null());
  j = ok_tokenize(json{{"prompt", text}, {"add_special_tokens", false}}.dump());  // model is optional
  EXPECT_EQ(j["tokens"].get<std::vector<model::TokenId>>(), tok_->encode(text, false));
}

TEST_F(TokenizeApi, MessagesAreRenderedWithTheChatTemplateAsChatCompletionsDoes) {
  json body = {{"model", "stories"},
               {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}}};
  // vLLM's default for messages, add_special_tokens false: the ids chat completions feeds the engine, with the
  // template's BOS (this template leaves BOS to the tokenizer, as a template writing BOS does) and no other.
  const std::vector<model::TokenId> chat_ids = tok_->encode("system: Be brief.\nuser: Hi\nassistant:", true);
  ASSERT_EQ(chat_ids.front(), tok_->bos_id());
  json j = ok_tokenize(body.dump());
  EXPECT_EQ(j["tokens"].get<std::vector<model::TokenId>>(), chat_ids);
  body["add_special_tokens"] = false;
  EXPECT_EQ(ok_tokenize(body.dump())["tokens"].get<std::vector<model::TokenId>>(), chat_ids);
  // True adds the tokenizer's BOS on top of the template's, as vLLM does.
  body["add_special_tokens"] = true;
  std::vector<model::TokenId> doubled = chat_ids;
  doubled.insert(doubled.begin(), tok_->bos_id());
  EXPECT_EQ(ok_tokenize(body.dump())["tokens"].get<std::vector<model::TokenId>>(), doubled);
  body.erase("add_special_tokens");
  // add_generation_prompt and continue_final_message reach the template, as on /v1/chat/completions.
  body["add_generation_prompt"] = false;
  EXPECT_EQ(ok_tokenize(body.dump())["tokens"].get<std::vector<model::TokenId>>(),
            tok_->encode("system: Be brief.\nuser: Hi\n", true));
  body["continue_final_message"] = true;
  EXPECT_EQ(ok_tokenize(body.dump())["tokens"].get<std::vector<model::TokenId>>(),
            tok_->encode("system: Be brief.\nuser: Hi\n(continued)", true));
  body["add_generation_prompt"] = true;
  expect_error(tokenize_request(body.dump(), *tok_, chat_, {"stories"}, 256), 400, "cannot both be true");
  // Bad messages are refused by the same rules as /v1/chat/completions.
  expect_error(tokenize_request(R"({"messages":[{"role":"wizard","content":"x"}]})", *tok_, chat_, {"stories"}, 256),
               400, "role");
  expect_error(tokenize_request(R"({"messages":[{"role":"user","content":"x"}]})", *tok_, nullptr, {"stories"}, 256),
               400, "no chat template");
  expect_error(tokenize_request(R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":"no"})", *tok_,
                                chat_, {"stories"}, 256),
               400, "add_generation_prompt");
}

TEST_F(TokenizeApi, AnyServedNameIsAcceptedAndOthersAre404) {
  const std::vector<std::string> names = {"stories", "tiny-llama", "org/tiny"};
  EXPECT_EQ(tokenize_request(R"({"model":"org/tiny","prompt":"x"})", *tok_, chat_, names, 256).status, 200);
  EXPECT_EQ(detokenize_request(R"({"model":"tiny-llama","tokens":[1]})", *tok_, names).status, 200);
  expect_error(tokenize_request(R"({"model":"other","prompt":"x"})", *tok_, chat_, names, 256), 404,
               "'other' does not exist");
}

TEST_F(TokenizeApi, DetokenizeRoundTripsAndSkipsSpecialTokensOnRequest) {
  const std::string text = "Lily saw a big dog.";
  std::vector<model::TokenId> ids = tok_->encode(text, true);
  ids.push_back(2);  // EOS
  TokenizeReply r = detokenize_request(json{{"model", "stories"}, {"tokens", ids}}.dump(), *tok_, {"stories"});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["prompt"], "<s>" + text + "</s>");
  r = detokenize_request(json{{"tokens", ids}, {"skip_special_tokens", true}}.dump(), *tok_, {"stories"});
  EXPECT_EQ(json::parse(r.body)["prompt"], text);
}

TEST_F(TokenizeApi, BadBodiesAreErrorsNamingTheField) {
  auto tk = [&](const std::string& b) { return tokenize_request(b, *tok_, chat_, {"stories"}, 256); };
  auto dt = [&](const std::string& b) { return detokenize_request(b, *tok_, {"stories"}); };
  expect_error(tk("{not json"), 400, "not valid JSON");
  expect_error(tk("[1]"), 400, "JSON object");
  expect_error(tk(R"({"model":"other","prompt":"x"})"), 404, "'other' does not exist");
  expect_error(tk(R"({"model":7,"prompt":"x"})"), 400, "'model'");
  expect_error(tk(R"({})"), 400, "exactly one of");
  expect_error(tk(R"({"prompt":"x","messages":[{"role":"user","content":"y"}]})"), 400, "exactly one of");
  expect_error(tk(R"({"prompt":5})"), 400, "'prompt' must be a string");
  expect_error(tk(R"({"prompt":"x","add_special_tokens":"yes"})"), 400, "'add_special_tokens' must be a boolean");
  expect_error(tk(R"({"prompt":"x","return_token_strs":true})"), 400, "return_token_strs");
  expect_error(dt(R"({"tokens":"1 2"})"), 400, "'tokens'");
  expect_error(dt(R"({"tokens":[1,"a"]})"), 400, "'tokens'");
  expect_error(dt(R"({"tokens":[1,512]})"), 400, "outside the vocabulary of 512");
  expect_error(dt(R"({"tokens":[-1]})"), 400, "outside the vocabulary");
  expect_error(dt(R"({"tokens":[1],"skip_special_tokens":1})"), 400, "skip_special_tokens");
  expect_error(dt(R"({"model":"other","tokens":[1]})"), 404, "does not exist");
}

}  // namespace
}  // namespace tessera::serve
