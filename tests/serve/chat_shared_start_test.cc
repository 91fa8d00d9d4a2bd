// serve::shared_start: how much of a rendered chat prompt another user's conversation with the same system prompt
// renders too (where a hybrid model keeps its recurrent state for the next user). Rendered through real templates
// (llama.cpp's copies of the models' own, models/templates), the fallback families and plain text: the shared part
// holds the whole system prompt, another user's rendering starts with it, and the first user message's text starts
// right after it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "api/openai.h"
#include "serve/chat_format.h"
#include "support/paths.h"

namespace tessera::serve {
namespace {

using json = nlohmann::json;

std::string templates_dir() { return testing::llamacpp_templates_dir(); }

api::ApiRequest chat(const json& messages, bool tools = false) {
  json body = {{"model", "m"}, {"messages", messages}};
  if (tools) {
    body["tools"] = json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather now",
        "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])");
  }
  auto r = api::parse_request(body.dump(), true);
  if (auto* e = std::get_if<api::ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::get<api::ApiRequest>(r);
}

const std::string kSystem = "You are the help desk of a bakery in Lyon. Answer in one sentence, politely.";
const std::string kFirst = "When do you open on Sundays?";

json conversation() {
  return json::array({{{"role", "system"}, {"content", kSystem}},
                      {{"role", "user"}, {"content", kFirst}},
                      {{"role", "assistant"}, {"content", "At eight."}},
                      {{"role", "user"}, {"content", "And on Mondays?"}}});
}
json other_user() {
  return json::array(
      {{{"role", "system"}, {"content", kSystem}}, {{"role", "user"}, {"content", "Do you sell gluten-free bread?"}}});
}

TEST(ChatSharedStart, EndsWhereTheFirstUsersTextBeginsInRealTemplates) {
  const std::string dir = templates_dir();
  int checked = 0;
  for (const char* name :
       {"Qwen3.5-4B.jinja", "Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "Qwen-Qwen2.5-7B-Instruct.jinja", "google-gemma-4-31B-it.jinja", "openai-gpt-oss-120b.jinja"}) {
    const std::string path = dir + "/" + name;
    if (!std::filesystem::exists(path)) continue;
    auto f = make_chat_format(path, {.bos_token = "<bos>", .eos_token = "<eos>"});
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().to_string();
    for (bool tools : {false, true}) {
      const api::ApiRequest a = chat(conversation(), tools), b = chat(other_user(), tools);
      auto ta = f->formatter(a, {}), tb = f->formatter(b, {});
      ASSERT_TRUE(ta.ok() && tb.ok()) << name;
      const size_t n = shared_start(f->formatter, a, ta->text, {});
      SCOPED_TRACE(std::string(name) + (tools ? " with tools" : "") + ", shared: " + ta->text.substr(0, n));
      ASSERT_GT(n, 0u);
      EXPECT_NE(ta->text.substr(0, n).find(kSystem), std::string::npos);
      EXPECT_EQ(tb->text.substr(0, n), ta->text.substr(0, n));
      EXPECT_EQ(ta->text.substr(n, kFirst.size()), kFirst);
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "llama.cpp's templates are not at " << dir << " (scripts/llamacpp.sh)";
}

TEST(ChatSharedStart, FallbackFamiliesPlainTextAndConversationsWithoutAUserMessage) {
  for (const char* family : {"chatml", "llama-3", "llama-2"}) {
    auto f = make_chat_format(family, {});
    ASSERT_TRUE(f.ok()) << family;
    const api::ApiRequest a = chat(conversation());
    auto ta = f->formatter(a, {});
    ASSERT_TRUE(ta.ok()) << family;
    const size_t n = shared_start(f->formatter, a, ta->text, {});
    EXPECT_EQ(ta->text.substr(n, kFirst.size()), kFirst) << family;
    EXPECT_NE(ta->text.substr(0, n).find(kSystem), std::string::npos) << family;
  }
  // Plain text joins the contents: the shared part is the system prompt.
  auto plain = make_chat_format("plain", {});
  ASSERT_TRUE(plain.ok());
  const api::ApiRequest a = chat(conversation());
  auto ta = plain->formatter(a, {});
  ASSERT_TRUE(ta.ok());
  EXPECT_EQ(shared_start(plain->formatter, a, ta->text, {}), kSystem.size());
  // Nothing but system messages: nobody else's conversation is known to part anywhere.
  auto chatml = make_chat_format("chatml", {});
  const api::ApiRequest only = chat(json::array({{{"role", "system"}, {"content", kSystem}}}));
  EXPECT_EQ(shared_start(chatml->formatter, only, chatml->formatter(only, {})->text, {}), 0u);
  // No system prompt: the template's opening of the first message is still shared.
  const api::ApiRequest user_only = chat(json::array({{{"role", "user"}, {"content", kFirst}}}));
  const std::string text = chatml->formatter(user_only, {})->text;
  EXPECT_EQ(text.substr(shared_start(chatml->formatter, user_only, text, {})),
            kFirst + "<|im_end|>\n<|im_start|>assistant\n");
}

// serve::renders_reply_back: whether the next turn renders a reply back as it was generated (then a hybrid model
// keeps the state inside the reply for it). Templates that render the history verbatim do; Qwen3.5's opens a think
// block in the generation prompt and leaves it out of earlier turns, and gpt-oss's replies start in a channel the
// generation prompt does not open, so neither does; nor does a request that continues its final message.
TEST(ChatRendersReplyBack, TemplatesThatRenderTheHistoryVerbatimDoAndThinkBlocksDoNot) {
  const std::string dir = templates_dir();
  int checked = 0;
  const std::vector<std::pair<const char*, bool>> templates = {{"Qwen3.5-4B.jinja", false},
                                                               {"Qwen-Qwen3-0.6B.jinja", true},
                                                               {"meta-llama-Llama-3.1-8B-Instruct.jinja", true},
                                                               {"Qwen-Qwen2.5-7B-Instruct.jinja", true},
                                                               {"openai-gpt-oss-120b.jinja", false}};
  for (const auto& [name, back] : templates) {
    const std::string path = dir + "/" + name;
    if (!std::filesystem::exists(path)) continue;
    auto f = make_chat_format(path, {.bos_token = "<bos>", .eos_token = "<eos>"});
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().to_string();
    const api::ApiRequest a = chat(conversation());
    auto ta = f->formatter(a, {});
    ASSERT_TRUE(ta.ok()) << name;
    EXPECT_EQ(renders_reply_back(f->formatter, a, ta->text, {}), back) << name;
    ++checked;
  }
  // Llama 2 puts a space between "[/INST]" and an earlier reply that its generation prompt does not end with (the
  // reply's first token carries it, but the text alone cannot say so): not claimed.
  for (const auto& [family, back] :
       std::vector<std::pair<const char*, bool>>{{"chatml", true}, {"llama-3", true}, {"llama-2", false}}) {
    auto f = make_chat_format(family, {});
    ASSERT_TRUE(f.ok()) << family;
    const api::ApiRequest a = chat(conversation());
    EXPECT_EQ(renders_reply_back(f->formatter, a, f->formatter(a, {})->text, {}), back) << family;
  }
  // A request continuing its final message, or asking for no generation prompt, is not a reply.
  auto chatml = make_chat_format("chatml", {});
  api::ApiRequest cont = chat(conversation());
  cont.add_generation_prompt = false;
  EXPECT_FALSE(renders_reply_back(chatml->formatter, cont, chatml->formatter(cont, {})->text, {}));
  if (checked == 0) GTEST_SKIP() << "llama.cpp's templates are not at " << dir << " (scripts/llamacpp.sh)";
}

}  // namespace
}  // namespace tessera::serve
