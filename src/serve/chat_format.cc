#include "serve/chat_format.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tessera::serve {
namespace {

// chat_template_kwargs, plus reasoning_effort under its own name (gpt-oss's template reads it).
std::string template_variables(const api::ApiRequest& r) {
  if (r.reasoning_effort.empty()) return r.chat_template_kwargs_json;
  nlohmann::json v = nlohmann::json::parse(r.chat_template_kwargs_json, nullptr, /*allow_exceptions=*/false);
  if (!v.is_object()) v = nlohmann::json::object();  // "" when the request sent none
  v["reasoning_effort"] = r.reasoning_effort;
  return v.dump();
}

}  // namespace

std::vector<std::string> chat_format_names() {
  std::vector<std::string> names = {"plain"};
  for (const std::string& n : model::chat_template_names()) names.push_back(n);
  return names;
}

Result<ChatFormat> make_chat_format(std::string_view spec, const model::ModelChatInfo& info,
                                    const model::jinja::RenderLimits& limits) {
  if (spec == "plain") {
    ChatFormat f;
    f.description = "plain";
    f.formatter = [](const api::ApiRequest& r, const std::function<bool()>&) -> Result<ChatPrompt> {
      if (!r.tools_json.empty())
        return invalid_argument("tools need a chat template; this server joins messages as plain text");
      if (!r.chat_template_kwargs_json.empty() || !r.reasoning_effort.empty())
        return invalid_argument(
            "chat_template_kwargs and reasoning_effort need a chat template; this server joins messages as plain "
            "text");
      if (r.continue_final_message || !r.add_generation_prompt)
        return invalid_argument(
            "add_generation_prompt and continue_final_message need a chat template; this server joins messages as "
            "plain text");
      ChatPrompt p;
      for (const api::ChatMessage& m : r.messages) {
        if (m.content.empty()) continue;
        if (!p.text.empty()) p.text += "\n\n";
        p.text += m.content;
      }
      if (p.text.empty()) return invalid_argument("the messages contain no text");
      return p;
    };
    return f;
  }
  auto renderer = model::ChatTemplateRenderer::choose(spec, info);
  if (!renderer.ok()) {
    if (renderer.status().code() == StatusCode::kNotFound)
      return not_found(
          fmt::format("{}; known names: {}", renderer.status().message(), fmt::join(chat_format_names(), ", ")));
    return renderer.status();
  }
  auto shared = std::make_shared<const model::ChatTemplateRenderer>(std::move(*renderer));
  ChatFormat f;
  f.description = shared->description();
  f.source = shared->source();
  f.formatter = [shared, limits](const api::ApiRequest& r,
                                 const std::function<bool()>& cancelled) -> Result<ChatPrompt> {
    model::ChatRenderOptions o;
    o.add_generation_prompt = r.add_generation_prompt;
    o.continue_final_message = r.continue_final_message;
    o.limits = limits;
    o.cancelled = cancelled;
    o.variables_json = template_variables(r);
    TS_ASSIGN_OR_RETURN(model::RenderedChat rc, shared->render(r.messages_json, r.tools_json, o));
    ChatPrompt p;
    p.text = std::move(rc.text);
    p.add_bos = rc.add_bos;
    return p;
  };
  return f;
}

size_t shared_start(const ChatFormatter& format, const api::ApiRequest& r, std::string_view text,
                    const std::function<bool()>& cancelled) {
  auto is_system = [](std::string_view role) { return role == "system" || role == "developer"; };
  size_t first = 0;
  while (first < r.messages.size() && is_system(r.messages[first].role)) ++first;
  if (first >= r.messages.size()) return 0;
  nlohmann::json messages = nlohmann::json::parse(r.messages_json, nullptr, /*allow_exceptions=*/false);
  if (!messages.is_array() || messages.size() != r.messages.size()) return 0;
  const std::string empty = r.messages[first].content.empty() ? "." : "";  // differs from the message's own text
  api::ApiRequest cut = r;
  cut.messages.resize(first + 1);
  cut.messages[first].content = empty;
  messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first + 1), messages.end());
  messages[first]["content"] = empty;
  cut.messages_json = messages.dump();
  cut.add_generation_prompt = true;  // what every format renders (plain refuses anything else)
  cut.continue_final_message = false;
  auto rendered = format(cut, cancelled);
  if (!rendered.ok()) return 0;
  const std::string_view other = rendered->text;
  return static_cast<size_t>(std::mismatch(text.begin(), text.end(), other.begin(), other.end()).first - text.begin());
}

bool renders_reply_back(const ChatFormatter& format, const api::ApiRequest& r, std::string_view text,
                        const std::function<bool()>& cancelled) {
  if (!r.add_generation_prompt || r.continue_final_message || r.messages.empty()) return false;
  nlohmann::json messages = nlohmann::json::parse(r.messages_json, nullptr, /*allow_exceptions=*/false);
  if (!messages.is_array() || messages.size() != r.messages.size()) return false;
  const std::string reply = "The reply, as generated.";
  api::ApiRequest next = r;
  next.messages.push_back({"assistant", reply});
  next.messages.push_back({"user", "And then?"});
  messages.push_back({{"role", "assistant"}, {"content", reply}});
  messages.push_back({{"role", "user"}, {"content", "And then?"}});
  next.messages_json = messages.dump();
  auto rendered = format(next, cancelled);
  if (!rendered.ok()) return false;
  const std::string_view got = rendered->text;
  return got.starts_with(text) && got.substr(text.size()).starts_with(reply);
}

}  // namespace tessera::serve
