#include "model/chat_template.h"

#include <fmt/format.h>

namespace tessera::model {
namespace {

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\n\r");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\n\r");
  return std::string(s.substr(b, e - b + 1));
}

Status check_roles(std::span<const ChatMessage> messages) {
  if (messages.empty()) return invalid_argument("a chat needs at least one message");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      return invalid_argument(fmt::format("message {} has role '{}'; roles are system, user, assistant", i, r));
  }
  return ok_status();
}

Result<std::string> render_llama2(std::span<const ChatMessage> m, bool add_generation_prompt) {
  std::string system;
  size_t i = 0;
  if (m[0].role == "system") {
    system = trim(m[0].content);
    i = 1;
  }
  std::string out;
  bool first = true;
  for (size_t turn = 0; i < m.size(); ++i, ++turn) {
    const bool want_user = turn % 2 == 0;
    if ((m[i].role == "user") != want_user)
      return invalid_argument(
          fmt::format("llama-2 chats alternate user and assistant after an optional system message; message {} is '{}'",
                      i, m[i].role));
    if (want_user) {
      std::string content = trim(m[i].content);
      if (first && !system.empty()) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
      out += (first ? "" : "<s>") + std::string("[INST] ") + content + " [/INST]";
      first = false;
    } else {
      out += " " + trim(m[i].content) + " </s>";
    }
  }
  (void)add_generation_prompt;  // the prompt already ends with [/INST], where the answer starts
  return out;
}

}  // namespace

std::vector<std::string> chat_template_names() { return {"llama-2", "llama-3", "chatml"}; }

std::string_view chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kLlama2:
      return "llama-2";
    case ChatTemplate::kLlama3:
      return "llama-3";
    case ChatTemplate::kChatml:
      return "chatml";
  }
  return "?";
}

Result<ChatTemplate> chat_template_from_name(std::string_view name) {
  if (name == "llama-2" || name == "llama2") return ChatTemplate::kLlama2;
  if (name == "llama-3" || name == "llama3") return ChatTemplate::kLlama3;
  if (name == "chatml" || name == "qwen") return ChatTemplate::kChatml;
  return invalid_argument(
      fmt::format("unknown chat template '{}'; known: {}", name, fmt::join(chat_template_names(), ", ")));
}

std::optional<ChatTemplate> detect_chat_template(std::string_view j) {
  if (j.find("<|im_start|>") != std::string_view::npos) return ChatTemplate::kChatml;
  if (j.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplate::kLlama3;
  if (j.find("[INST]") != std::string_view::npos && j.find("[/INST]") != std::string_view::npos)
    return ChatTemplate::kLlama2;
  return std::nullopt;
}

Result<ChatTemplate> choose_chat_template(std::string_view override_name, std::string_view jinja) {
  if (!override_name.empty()) return chat_template_from_name(override_name);
  if (jinja.empty())
    return failed_precondition(fmt::format("the model has no chat template; choose one with --chat-template ({})",
                                           fmt::join(chat_template_names(), ", ")));
  if (auto t = detect_chat_template(jinja)) return *t;
  return failed_precondition(
      fmt::format("the model's chat template is not one Tessera knows ({}); choose one with --chat-template",
                  fmt::join(chat_template_names(), ", ")));
}

Result<std::string> render_chat(ChatTemplate t, std::span<const ChatMessage> messages, bool add_generation_prompt) {
  TS_RETURN_IF_ERROR(check_roles(messages));
  std::string out;
  switch (t) {
    case ChatTemplate::kLlama2:
      return render_llama2(messages, add_generation_prompt);
    case ChatTemplate::kLlama3:
      for (const ChatMessage& m : messages)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatTemplate::kChatml:
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
  }
  return internal_error("unknown chat template");
}

}  // namespace tessera::model
