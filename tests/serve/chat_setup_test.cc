// What a node answers chat with: --chat-template first, else the model's own template, else (when that does not
// parse) its family's fallback with a warning, else no chat; the parser flags checked by name.
#include "serve/chat_setup.h"

#include <gtest/gtest.h>

namespace tessera::serve {
namespace {

api::ApiRequest hello() {
  auto r = api::parse_request(R"({"model":"m","messages":[{"role":"user","content":"Hello"}]})", true);
  return std::get<api::ApiRequest>(r);
}

TEST(ChatSetup, TheFlagTheModelsTemplateItsFallbackOrNone) {
  model::ModelChatInfo chatml_model{.chat_template =
                                        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                                        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"};
  auto own = choose_chat_setup({}, chatml_model);
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  ASSERT_TRUE(own->formatter);
  auto text = own->formatter(hello(), {});
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(text->text, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(own->warnings.empty());

  auto plain = choose_chat_setup({.chat_template = "plain"}, chatml_model);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->formatter(hello(), {})->text.find("<|im_start|>"), std::string::npos) << "the flag wins";
  EXPECT_EQ(plain->info.front(), "chat template: plain");

  // A template that does not parse, recognisably ChatML: the chatml fallback, with a warning.
  model::ModelChatInfo broken{.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }"};
  auto fallback = choose_chat_setup({}, broken);
  ASSERT_TRUE(fallback.ok()) << fallback.status().to_string();
  ASSERT_TRUE(fallback->formatter);
  ASSERT_EQ(fallback->warnings.size(), 1u);
  EXPECT_NE(fallback->warnings[0].find("'chatml' fallback"), std::string::npos) << fallback->warnings[0];
  EXPECT_NE(fallback->formatter(hello(), {})->text.find("<|im_start|>user"), std::string::npos);

  // Unrecognisable and broken: chat is off, and the warning says how to turn it on.
  auto off = choose_chat_setup({}, {.chat_template = "{% if %}"});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->formatter);
  ASSERT_EQ(off->warnings.size(), 1u);
  EXPECT_NE(off->warnings[0].find("--chat-template"), std::string::npos);
  // No template at all: no chat, nothing to warn about.
  auto none = choose_chat_setup({}, {});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->formatter);
  EXPECT_TRUE(none->warnings.empty());
}

TEST(ChatSetup, ParserFlagsAreCheckedByName) {
  auto hermes = choose_chat_setup({.chat_template = "plain", .tool_call_parser = "hermes"}, {});
  ASSERT_TRUE(hermes.ok()) << hermes.status().to_string();
  EXPECT_EQ(hermes->tool_parser, "hermes");
  auto qwen3 = choose_chat_setup({.chat_template = "plain", .reasoning_parser = "qwen3"}, {});
  ASSERT_TRUE(qwen3.ok());
  EXPECT_EQ(qwen3->reasoning, ReasoningFormat::kQwen3);
  EXPECT_FALSE(choose_chat_setup({.chat_template = "plain", .tool_call_parser = "nope"}, {}).ok());
  EXPECT_FALSE(choose_chat_setup({.chat_template = "plain", .reasoning_parser = "nope"}, {}).ok());
  EXPECT_FALSE(choose_chat_setup({.chat_template = "/no/such/template.jinja"}, {}).ok());
}

}  // namespace
}  // namespace tessera::serve
