#include "serve/chat_format.h"

#include <memory>

#include <fmt/format.h>

namespace tessera::serve {

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
  f.formatter = [shared, limits](const api::ApiRequest& r,
                                 const std::function<bool()>& cancelled) -> Result<ChatPrompt> {
    model::ChatRenderOptions o;
    o.add_generation_prompt = r.add_generation_prompt;
    o.continue_final_message = r.continue_final_message;
    o.limits = limits;
    o.cancelled = cancelled;
    TS_ASSIGN_OR_RETURN(model::RenderedChat rc, shared->render(r.messages_json, r.tools_json, o));
    ChatPrompt p;
    p.text = std::move(rc.text);
    p.add_bos = rc.add_bos;
    if (!r.tools_json.empty() && r.tool_choice != "none") p.tool_calls = shared->tool_call_format();
    return p;
  };
  return f;
}

}  // namespace tessera::serve
