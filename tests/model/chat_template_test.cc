// Chat templates: the three families render as their published templates do, are recognised from real
// tokenizer_config.json templates, and anything else is a clear error.
#include "model/chat_template.h"

#include <gtest/gtest.h>

namespace tessera::model {
namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "You are terse."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "2+2?"}};

TEST(ChatTemplate, Chatml) {
  auto s = render_chat(ChatTemplate::kChatml, kChat, true);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s,
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3) {
  auto s = render_chat(ChatTemplate::kLlama3, kChat, true);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s,
            "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2) {
  auto s = render_chat(ChatTemplate::kLlama2, kChat, true);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] 2+2? [/INST]");
  std::vector<ChatMessage> bad = {{"user", "a"}, {"user", "b"}};
  EXPECT_EQ(render_chat(ChatTemplate::kLlama2, bad, true).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, BadRolesAndEmptyChats) {
  std::vector<ChatMessage> tool = {{"tool", "x"}};
  EXPECT_EQ(render_chat(ChatTemplate::kChatml, tool, true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(render_chat(ChatTemplate::kChatml, {}, true).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, ChosenFromTheModelOrByName) {
  // Fragments of the templates real models ship (Qwen, Llama-3, Llama-2).
  EXPECT_EQ(*choose_chat_template("", "{{- '<|im_start|>' + message.role + '\\n' }}"), ChatTemplate::kChatml);
  EXPECT_EQ(*choose_chat_template("", "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"),
            ChatTemplate::kLlama3);
  EXPECT_EQ(*choose_chat_template("", "{{ bos_token + '[INST] ' + content + ' [/INST]' }}"), ChatTemplate::kLlama2);
  EXPECT_EQ(*choose_chat_template("llama-3", "{{ '<|im_start|>' }}"), ChatTemplate::kLlama3);
  auto none = choose_chat_template("", "{{ '### Human: ' + content }}");
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("--chat-template"), std::string::npos);
  EXPECT_NE(none.status().message().find("chatml"), std::string::npos);
  EXPECT_EQ(choose_chat_template("", "").status().code(), StatusCode::kFailedPrecondition);
  auto bad = choose_chat_template("vicuna", "");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("llama-2, llama-3, chatml"), std::string::npos);
}

}  // namespace
}  // namespace tessera::model
