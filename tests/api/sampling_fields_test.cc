// The sampling, batching and reasoning fields of a request as parse_request reads them (OpenAI's and vLLM's
// definitions): n, seed (0 a seed like any other, null none), logit_bias, repetition_penalty, min_tokens,
// prompt_logprobs and echo with logprobs, a list of prompts, chat_template_kwargs and reasoning_effort; and the
// sampling object a decode node sends its prefill node, read back to the same values.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/openai.h"
#include "api/pd_messages.h"
#include "api/sampling.h"

namespace tessera::api {
namespace {

std::variant<ApiRequest, ApiError> parse(const std::string& extra, bool chat) {
  const std::string head =
      chat ? R"({"model":"m","messages":[{"role":"user","content":"x"}])" : R"({"model":"m","prompt":"x")";
  return parse_request(head + (extra.empty() ? "" : "," + extra) + "}", chat);
}
ApiRequest ok(const std::string& extra, bool chat = false) {
  auto r = parse(extra, chat);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << extra << ": " << e->message;
  return std::holds_alternative<ApiRequest>(r) ? std::get<ApiRequest>(r) : ApiRequest{};
}
std::string refused(const std::string& extra, bool chat = false) {
  auto r = parse(extra, chat);
  if (auto* e = std::get_if<ApiError>(&r)) {
    EXPECT_EQ(e->status, 400);
    return e->param;
  }
  return "(accepted)";
}

TEST(SamplingFields, SeedZeroIsASeedAndNullIsNone) {
  EXPECT_FALSE(ok("").generation.sampling.seed.has_value());
  EXPECT_FALSE(ok(R"("seed":null)").generation.sampling.seed.has_value());
  ASSERT_TRUE(ok(R"("seed":0)").generation.sampling.seed.has_value());
  EXPECT_EQ(*ok(R"("seed":0)").generation.sampling.seed, 0u);
  EXPECT_EQ(*ok(R"("seed":-1)", true).generation.sampling.seed, UINT64_MAX);
  EXPECT_EQ(refused(R"("seed":1.5)"), "seed");
  EXPECT_EQ(refused(R"("seed":"7")"), "seed");
}

TEST(SamplingFields, NUpToSixteen) {
  for (bool chat : {false, true}) {
    EXPECT_EQ(ok(R"("n":4)", chat).n, 4);
    EXPECT_EQ(ok(R"("n":16)", chat).n, 16);
    EXPECT_EQ(refused(R"("n":17)", chat), "n");
    EXPECT_EQ(refused(R"("n":0)", chat), "n");
    EXPECT_EQ(refused(R"("n":"2")", chat), "n");
  }
  EXPECT_EQ(refused(R"("best_of":3)"), "best_of");
}

TEST(SamplingFields, LogitBiasAsOpenAiDefinesIt) {
  const ApiRequest r = ok(R"("logit_bias":{"50256":-100,"7":2.5,"300":100})", true);
  const std::vector<std::pair<int32_t, float>> want = {{7, 2.5f}, {300, 100.0f}, {50256, -100.0f}};
  EXPECT_EQ(r.generation.sampling.logit_bias, want);
  EXPECT_EQ(refused(R"("logit_bias":{"7":100.5})"), "logit_bias");
  EXPECT_EQ(refused(R"("logit_bias":{"7":-101})"), "logit_bias");
  EXPECT_EQ(refused(R"("logit_bias":{"x":1})"), "logit_bias");
  EXPECT_EQ(refused(R"("logit_bias":{"-3":1})"), "logit_bias");
  EXPECT_EQ(refused(R"("logit_bias":{"3a":1})"), "logit_bias");
  EXPECT_EQ(refused(R"("logit_bias":{"3":"1"})"), "logit_bias");
  EXPECT_EQ(refused(R"("logit_bias":[[3,1]])"), "logit_bias");
  EXPECT_EQ(refused(R"("logit_bias":{"03":1,"3":2})"), "logit_bias");  // the same token twice
  EXPECT_TRUE(ok(R"("logit_bias":{})").generation.sampling.logit_bias.empty());
}

TEST(SamplingFields, RepetitionPenaltyMinTokensPromptLogprobs) {
  EXPECT_FLOAT_EQ(ok(R"("repetition_penalty":1.3)").generation.sampling.repetition_penalty, 1.3f);
  EXPECT_FLOAT_EQ(ok("").generation.sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(refused(R"("repetition_penalty":0)"), "repetition_penalty");
  EXPECT_EQ(refused(R"("repetition_penalty":-1)"), "repetition_penalty");
  EXPECT_EQ(refused(R"("repetition_penalty":11)"), "repetition_penalty");
  EXPECT_EQ(ok(R"("min_tokens":5)", true).generation.sampling.min_tokens, 5);
  EXPECT_EQ(refused(R"("min_tokens":-1)"), "min_tokens");
  EXPECT_EQ(ok(R"("prompt_logprobs":2)").generation.prompt_logprobs, 2);
  EXPECT_EQ(ok(R"("prompt_logprobs":0)", true).generation.prompt_logprobs, 0);
  EXPECT_EQ(ok("").generation.prompt_logprobs, -1);
  EXPECT_EQ(refused(R"("prompt_logprobs":21)"), "prompt_logprobs");
  EXPECT_EQ(refused(R"("prompt_logprobs":1,"stream":true)"), "prompt_logprobs");
}

TEST(SamplingFields, EchoWithNoNewTokensScoresThePrompt) {
  const ApiRequest r = ok(R"("echo":true,"logprobs":2,"max_tokens":0)");
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.max_tokens, 0);
  EXPECT_EQ(refused(R"("max_tokens":0)"), "max_tokens");  // 0 only with echo
  EXPECT_EQ(refused(R"("max_tokens":0)", true), "max_tokens");
  EXPECT_EQ(ok(R"("echo":true,"logprobs":1,"stream":true)").generation.logprobs, 1);  // streamed in the echo chunk
}

TEST(SamplingFields, AListOfPrompts) {
  auto prompts = [](const std::string& p) {
    return std::get<ApiRequest>(parse_request(R"({"model":"m","prompt":)" + p + "}", false)).prompts;
  };
  ASSERT_EQ(prompts(R"("one")").size(), 1u);
  auto two = prompts(R"(["one","two"])");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].text, "two");
  EXPECT_FALSE(two[1].is_tokens);
  auto ids = prompts(R"([[1,2,3],[4,5]])");
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_TRUE(ids[0].is_tokens);
  EXPECT_EQ(ids[1].tokens, (std::vector<int32_t>{4, 5}));
  auto one_ids = prompts(R"([1,2,3])");
  ASSERT_EQ(one_ids.size(), 1u);
  EXPECT_EQ(one_ids[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  auto mixed = prompts(R"(["a",[7,8]])");
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_TRUE(mixed[1].is_tokens);
  // The first prompt stays where single-prompt readers (the router's routing) look.
  const ApiRequest r = std::get<ApiRequest>(parse_request(R"({"model":"m","prompt":["first","second"]})", false));
  EXPECT_EQ(r.prompt, "first");
  for (const char* bad : {"[]", "[[]]", R"([1,"a"])", R"([["a"]])", "[{}]", "[-1]", "[[1],[-2]]", "7"}) {
    auto e = parse_request(std::string(R"({"model":"m","prompt":)") + bad + "}", false);
    ASSERT_TRUE(std::holds_alternative<ApiError>(e)) << bad;
    EXPECT_EQ(std::get<ApiError>(e).param, "prompt") << bad;
  }
  std::string many = "[";
  for (size_t i = 0; i <= kMaxPromptsPerRequest; ++i) many += std::string(i ? "," : "") + "\"p\"";
  auto e = parse_request(R"({"model":"m","prompt":)" + many + "]}", false);
  EXPECT_TRUE(std::holds_alternative<ApiError>(e));
}

TEST(SamplingFields, ChatTemplateKwargsAndReasoningEffort) {
  const ApiRequest r = ok(R"("chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"low")", true);
  EXPECT_EQ(nlohmann::json::parse(r.chat_template_kwargs_json), nlohmann::json({{"enable_thinking", false}}));
  EXPECT_EQ(r.reasoning_effort, "low");
  EXPECT_EQ(ok(R"("chat_template_kwargs":{})", true).chat_template_kwargs_json, "");
  EXPECT_EQ(refused(R"("chat_template_kwargs":[1])", true), "chat_template_kwargs");
  EXPECT_EQ(refused(R"("chat_template_kwargs":{"messages":[]})", true), "chat_template_kwargs");
  EXPECT_EQ(refused(R"("chat_template_kwargs":{"add_generation_prompt":false})", true), "chat_template_kwargs");
  EXPECT_EQ(refused(R"("reasoning_effort":"extreme")", true), "reasoning_effort");
}

TEST(SamplingFields, ThePrefillNodeReadsWhatTheDecodeNodeSends) {
  SamplingParams s;
  s.temperature = 0.7f;
  s.seed = 0;
  s.repetition_penalty = 1.25f;
  s.logit_bias = {{3, -100.0f}, {9, 4.5f}};
  s.min_tokens = 2;
  auto back = sampling_from_json(sampling_to_json(s));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_TRUE(back->seed.has_value());
  EXPECT_EQ(*back->seed, 0u);
  EXPECT_FLOAT_EQ(back->repetition_penalty, 1.25f);
  EXPECT_EQ(back->logit_bias, s.logit_bias);
  EXPECT_EQ(back->min_tokens, 2);
  SamplingParams none;
  EXPECT_FALSE(sampling_from_json(sampling_to_json(none))->seed.has_value());
  // A peer cannot ask for what a client may not.
  for (const char* bad :
       {R"({"logit_bias":[[3,101]]})", R"({"logit_bias":[[9,1],[3,1]]})", R"({"logit_bias":[[-1,1]]})",
        R"({"logit_bias":[3]})", R"({"repetition_penalty":0})", R"({"min_tokens":-2})"}) {
    EXPECT_FALSE(sampling_from_json(nlohmann::json::parse(bad)).ok()) << bad;
  }
  PrefillCall call;
  call.prompt = {1, 2, 3};
  call.n = 4;
  call.stop_token_ids = {7};
  call.ignore_eos = true;
  call.sampling = s;
  auto read = parse_prefill_call(prefill_call_body(call), 100, 100);
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(read->n, 4);
  EXPECT_EQ(read->stop_token_ids, std::vector<int32_t>{7});
  EXPECT_TRUE(read->ignore_eos);
  EXPECT_EQ(read->sampling.logit_bias, s.logit_bias);
  PrefillReply reply;
  reply.first_token = 5;
  reply.choice_tokens = {6, 7, 8};
  reply.bytes = 64;
  auto got = parse_prefill_reply(prefill_reply_body(reply), 64, 100, 4);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->choice_tokens, reply.choice_tokens);
  EXPECT_FALSE(parse_prefill_reply(prefill_reply_body(reply), 64, 100, 3).ok()) << "one token too many";
  reply.choice_tokens = {6, 700};
  EXPECT_FALSE(parse_prefill_reply(prefill_reply_body(reply), 64, 100, 3).ok()) << "not a token of this model";
}

}  // namespace
}  // namespace tessera::api
