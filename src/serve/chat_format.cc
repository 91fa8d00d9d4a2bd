#include "serve/chat_format.h"

#include <fmt/format.h>

#include "model/chat_template.h"

namespace tessera::serve {

std::vector<std::string> chat_format_names() {
  std::vector<std::string> names = {"plain"};
  for (const std::string& n : model::chat_template_names()) names.push_back(n);
  return names;
}

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
  auto family = model::chat_template_from_name(name);
  if (!family.ok()) {
    return invalid_argument(
        fmt::format("unknown chat template '{}'; known templates: {}", name, fmt::join(chat_format_names(), ", ")));
  }
  std::vector<model::ChatMessage> converted;
  converted.reserve(messages.size());
  for (const ChatMessage& m : messages) converted.push_back({m.role == "developer" ? "system" : m.role, m.content});
  return model::render_chat(*family, converted, /*add_generation_prompt=*/true);
}

}  // namespace tessera::serve
