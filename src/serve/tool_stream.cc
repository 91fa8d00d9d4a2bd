#include "serve/tool_stream.h"

#include <optional>

#include "serve/forced_tools.h"

namespace tessera::serve {

using json = nlohmann::json;

Result<std::unique_ptr<ToolParser>> make_reply_parser(const api::ApiRequest& r, const std::string& parser_name,
                                                      bool family_syntax) {
  if (!r.chat || r.tools_json.empty() || r.tool_choice == "none") return std::unique_ptr<ToolParser>();
  TS_ASSIGN_OR_RETURN(ToolParserContext context, ToolParserContext::from_tools_json(r.tools_json));
  std::optional<ToolParserPlugin> plugin;
  if (!parser_name.empty() && parser_name != "none") {
    TS_ASSIGN_OR_RETURN(auto entry, tool_parsers().find(parser_name));
    plugin = std::move(entry.factory);
    context.id_chars = plugin->id_chars;
  }
  if (forces_tool_call(r) && !(family_syntax && plugin))
    return make_forced_json_parser(std::move(context), r.tool_choice == "function" ? r.tool_choice_function : "");
  if (!plugin) return std::unique_ptr<ToolParser>();
  return plugin->create(std::move(context));
}

std::vector<json> tool_deltas(const std::vector<ToolEvent>& events) {
  std::vector<json> out;
  for (const ToolEvent& e : events) {
    switch (e.kind) {
      case ToolEvent::Kind::kContent:
      case ToolEvent::Kind::kCallBroken:
        if (!e.text.empty()) out.push_back({{"content", e.text}});
        break;
      case ToolEvent::Kind::kCallStart:
        out.push_back({{"tool_calls", json::array({{{"index", e.index},
                                                    {"id", e.id},
                                                    {"type", "function"},
                                                    {"function", {{"name", e.text}, {"arguments", ""}}}}})}});
        break;
      case ToolEvent::Kind::kArguments:
        out.push_back({{"tool_calls", json::array({{{"index", e.index}, {"function", {{"arguments", e.text}}}}})}});
        break;
      case ToolEvent::Kind::kCallEnd:
        break;
    }
  }
  return out;
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

}  // namespace tessera::serve
