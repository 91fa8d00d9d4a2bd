// Issue 17 item 4 on the request side: fields that the server knows but would not honour are 400s naming the
// field (values that ask for nothing pass), skip_special_tokens is read, and a model's generation defaults
// fill the sampling fields a request leaves out.
#include <gtest/gtest.h>

#include "api/openai.h"

namespace tessera::api {
namespace {

std::variant<ApiRequest, ApiError> parse(const std::string& extra, bool chat, const SamplingParams& d = {}) {
  const std::string head =
      chat ? R"({"model":"m","messages":[{"role":"user","content":"x"}])" : R"({"model":"m","prompt":"x")";
  return parse_request(head + (extra.empty() ? "" : "," + extra) + "}", chat, d);
}

std::string refused_param(const std::string& extra, bool chat) {
  auto r = parse(extra, chat);
  if (auto* e = std::get_if<ApiError>(&r)) {
    EXPECT_EQ(e->status, 400);
    return e->param;
  }
  return "(accepted)";
}

TEST(OpenAiFields, NotHonouredFieldsAre400sNamingTheField) {
  for (bool chat : {false, true}) {
    EXPECT_EQ(refused_param(R"("use_beam_search":true)", chat), "use_beam_search");
    EXPECT_EQ(refused_param(R"("include_stop_str_in_output":true)", chat), "include_stop_str_in_output");
    EXPECT_EQ(refused_param(R"("service_tier":"flex")", chat), "service_tier");
    EXPECT_EQ(refused_param(R"("skip_special_tokens":false,"spaces_between_special_tokens":true)", chat),
              "spaces_between_special_tokens");
    // What asks for nothing is accepted.
    for (const char* harmless :
         {R"("logit_bias":{})", R"("response_format":{"type":"text"})", R"("repetition_penalty":1)",
          R"("min_tokens":0)", R"("service_tier":"auto")", R"("spaces_between_special_tokens":true)",
          R"("skip_special_tokens":false,"spaces_between_special_tokens":false)"})
      EXPECT_EQ(refused_param(harmless, chat), "(accepted)") << harmless;
  }
  EXPECT_EQ(refused_param(R"("store":true)", true), "store");
  EXPECT_EQ(refused_param(R"("modalities":["text","audio"])", true), "modalities");
  // vLLM's template fields are honoured (the chat template sees them), with its rule that both cannot be true.
  EXPECT_FALSE(std::get<ApiRequest>(parse(R"("add_generation_prompt":false)", true)).add_generation_prompt);
  const ApiRequest cont =
      std::get<ApiRequest>(parse(R"("add_generation_prompt":false,"continue_final_message":true)", true));
  EXPECT_TRUE(cont.continue_final_message);
  EXPECT_EQ(refused_param(R"("continue_final_message":true)", true), "continue_final_message");
  EXPECT_EQ(refused_param(R"("add_generation_prompt":"no")", true), "add_generation_prompt");
  EXPECT_EQ(refused_param(R"("echo":true)", true), "echo");
  EXPECT_EQ(refused_param(R"("echo":true)", false), "(accepted)");  // completions honour echo
}

TEST(OpenAiFields, SkipSpecialTokensDefaultsToTrueAndFalseIsKept) {
  EXPECT_TRUE(std::get<ApiRequest>(parse("", false)).generation.skip_special_tokens);
  EXPECT_FALSE(std::get<ApiRequest>(parse(R"("skip_special_tokens":false)", true)).generation.skip_special_tokens);
  EXPECT_EQ(std::get<ApiError>(parse(R"("skip_special_tokens":"no")", false)).param, "skip_special_tokens");
}

TEST(OpenAiFields, ReturnTokenIdsIsABooleanOffByDefault) {
  for (bool chat : {false, true}) {
    EXPECT_FALSE(std::get<ApiRequest>(parse("", chat)).return_token_ids);
    EXPECT_TRUE(std::get<ApiRequest>(parse(R"("return_token_ids":true)", chat)).return_token_ids);
    EXPECT_EQ(refused_param(R"("return_token_ids":1)", chat), "return_token_ids");
  }
}

TEST(OpenAiFields, ModelDefaultsFillWhatTheRequestLeavesOut) {
  SamplingParams d;
  d.temperature = 0.6f;
  d.top_p = 0.9f;
  d.top_k = 20;
  d.min_p = 0.05f;
  const SamplingParams got = std::get<ApiRequest>(parse("", false, d)).generation.sampling;
  EXPECT_FLOAT_EQ(got.temperature, 0.6f);
  EXPECT_FLOAT_EQ(got.top_p, 0.9f);
  EXPECT_EQ(got.top_k, 20);
  EXPECT_FLOAT_EQ(got.min_p, 0.05f);
  const SamplingParams own = std::get<ApiRequest>(parse(R"("temperature":0,"top_k":-1)", true, d)).generation.sampling;
  EXPECT_FLOAT_EQ(own.temperature, 0.0f);  // the request's own values win
  EXPECT_EQ(own.top_k, 0);
  EXPECT_FLOAT_EQ(own.top_p, 0.9f);
}

}  // namespace
}  // namespace tessera::api
