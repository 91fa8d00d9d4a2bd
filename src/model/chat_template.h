// Chat templates: OpenAI-style messages -> the prompt text a model was trained on.
//
// Three families, by name: "llama-2" ([INST] ... [/INST] with a <<SYS>> block), "llama-3"
// (<|start_header_id|>role<|end_header_id|> ... <|eot_id|>) and "chatml" (<|im_start|>role ... <|im_end|>,
// Qwen). A model's tokenizer_config.json or GGUF `tokenizer.chat_template` (Jinja) is recognised by the
// family's markers; `--chat-template NAME` overrides it. Tessera does not run Jinja: a template that is none
// of these is an error telling the user to pick a family.
//
// The rendered text does not start with the BOS token: the tokenizer adds it (encode(text, add_bos=true)).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::model {

enum class ChatTemplate : uint8_t { kLlama2, kLlama3, kChatml };

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

std::vector<std::string> chat_template_names();
std::string_view chat_template_name(ChatTemplate t);
// InvalidArgument listing the known names.
Result<ChatTemplate> chat_template_from_name(std::string_view name);
// The family a Jinja template belongs to; nullopt when none matches.
std::optional<ChatTemplate> detect_chat_template(std::string_view jinja);
// `override_name` when given, else the family of `jinja`; FailedPrecondition when neither decides.
Result<ChatTemplate> choose_chat_template(std::string_view override_name, std::string_view jinja);

// InvalidArgument for an unknown role, an empty conversation, or (llama-2) turns that do not alternate
// user/assistant after an optional system message.
Result<std::string> render_chat(ChatTemplate t, std::span<const ChatMessage> messages, bool add_generation_prompt);

}  // namespace tessera::model
