#include "serve/chat_format.h"

#include <fmt/format.h>

namespace tessera::serve {

std::vector<std::string> chat_format_names() { return {"plain"}; }

Result<std::string> format_chat(const std::vector<ChatMessage>& messages, const std::string& name) {
  if (name == "plain") {
    std::string out;
    for (const ChatMessage& m : messages) {
      if (m.content.empty()) continue;
      if (!out.empty()) out += "\n\n";
      out += m.content;
    }
    if (out.empty()) return invalid_argument("the messages contain no text");
    return out;
  }
  return invalid_argument(
      fmt::format("unknown chat template '{}'; known templates: {}", name, fmt::join(chat_format_names(), ", ")));
}

}  // namespace tessera::serve
