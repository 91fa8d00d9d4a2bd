#include "model/chat_template_renderer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/jinja/template.h"
#include "model/loader.h"
#include "model/tokenizer/vocab.h"

namespace tessera::model {
namespace {

using Json = nlohmann::ordered_json;

// Whether a template's source names `name` as a whole identifier: a variable it never names, it never reads
// (Jinja has no way to look a variable up by a computed name).
bool names_variable(std::string_view source, std::string_view name) {
  const auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  if (name.empty() || !std::all_of(name.begin(), name.end(), ident)) return false;
  for (size_t at = source.find(name); at != std::string_view::npos; at = source.find(name, at + 1)) {
    const bool left = at == 0 || !ident(source[at - 1]);
    const bool right = at + name.size() == source.size() || !ident(source[at + name.size()]);
    if (left && right) return true;
  }
  return false;
}

// The text continue_final_message continues: the last message's content (a string: the API joins text parts).
Result<std::string> final_message_text(const Json& messages) {
  if (messages.empty()) return invalid_argument("continue_final_message needs at least one message");
  const Json& last = messages.back();
  const Json* content = last.is_object() && last.contains("content") ? &last["content"] : nullptr;
  if (content == nullptr || !content->is_string() || content->get<std::string>().empty())
    return invalid_argument("continue_final_message: the last message has no text to continue");
  return content->get<std::string>();
}

// Cuts the rendered prompt right after the final message's text, dropping what the template wrote after it (its
// end-of-turn markers), as transformers does: the last place the text (without its outer whitespace) appears;
// the text's own trailing whitespace is kept where the template kept it.
Status cut_after_final_text(std::string& rendered, const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  const size_t last = text.find_last_not_of(" \t\r\n");
  if (first == std::string::npos)
    return invalid_argument("continue_final_message: the last message has no text to continue");
  const std::string stripped = text.substr(first, last - first + 1);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos)
    return invalid_argument(
        "continue_final_message: the chat template does not write the last message's text into the prompt");
  const std::string lstripped = text.substr(first);
  const bool kept_spacing = rendered.compare(at, lstripped.size(), lstripped) == 0;
  rendered.resize(at + (kept_spacing ? lstripped.size() : stripped.size()));
  return ok_status();
}

// Messages for a fallback family: text content only.
Result<std::vector<ChatMessage>> plain_messages(const Json& messages) {
  std::vector<ChatMessage> out;
  for (const Json& m : messages) {
    ChatMessage c;
    c.role = m.value("role", "");
    if (c.role == "developer") c.role = "system";
    if (m.contains("tool_calls") && !m["tool_calls"].is_null())
      return invalid_argument(
          "tool calls in messages need a Jinja chat template (the model's own, or --chat-template FILE)");
    const Json& content = m.contains("content") ? m["content"] : Json();
    if (content.is_string()) {
      c.content = content.get<std::string>();
    } else if (content.is_array()) {
      for (const Json& p : content)
        if (p.is_object() && p.contains("text") && p["text"].is_string()) c.content += p["text"].get<std::string>();
    }
    out.push_back(std::move(c));
  }
  return out;
}

Result<std::shared_ptr<const jinja::Template>> compile(std::string_view source, std::string_view what) {
  auto t = jinja::Template::parse(source);
  if (!t.ok()) return invalid_argument(fmt::format("{} does not parse: {}", what, t.status().message()));
  return std::make_shared<const jinja::Template>(std::move(*t));
}

// A --chat-template file: a Jinja file, or a JSON file with "chat_template" (tokenizer_config.json).
Result<std::string> template_from_file(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  if (!text.empty() && text[0] == '{' && text.find("{{") == std::string::npos && text.find("{%") == std::string::npos)
    return invalid_argument(fmt::format("{} is neither a Jinja template nor JSON with a chat_template", path));
  if (!text.empty() && text[0] == '{') {
    Json j = Json::parse(text, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("chat_template")) {
      const Json& t = j["chat_template"];
      if (t.is_string()) return t.get<std::string>();
      if (t.is_array())
        for (const Json& e : t)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
            return e["template"].get<std::string>();
      return invalid_argument(fmt::format("{}: chat_template has no default template", path));
    }
  }
  return text;
}

}  // namespace

ModelChatInfo model_chat_info(const LoadedModel& m) {
  ModelChatInfo info;
  info.chat_template = m.chat_template;
  info.tool_use_template = m.chat_template_tool_use;
  if (m.tokenizer) {
    auto vocab = m.tokenizer->to_vocab();
    if (vocab.ok()) {
      auto text = [&](TokenId id) {
        return id >= 0 && static_cast<size_t>(id) < vocab->tokens.size() ? vocab->tokens[static_cast<size_t>(id)]
                                                                         : std::string();
      };
      info.bos_token = text(m.tokenizer->bos_id());
      info.eos_token = text(m.tokenizer->eos_id());
    }
  }
  return info;
}

Result<ChatTemplateRenderer> ChatTemplateRenderer::choose(std::string_view spec, const ModelChatInfo& model) {
  ChatTemplateRenderer r;
  r.bos_ = model.bos_token;
  r.eos_ = model.eos_token;
  std::string source;
  if (spec.empty()) {
    if (model.chat_template.empty())
      return failed_precondition(
          fmt::format("the model has no chat template; choose one with --chat-template (a file, or one of: {})",
                      fmt::join(chat_template_names(), ", ")));
    source = model.chat_template;
    r.description_ = "the model's chat template";
    if (!model.tool_use_template.empty()) {
      TS_ASSIGN_OR_RETURN(r.jinja_tool_use_, compile(model.tool_use_template, "the model's tool_use chat template"));
      r.tool_use_source_ = model.tool_use_template;
    }
  } else if (auto family = chat_template_from_name(spec); family.ok()) {
    r.family_ = *family;
    r.description_ = fmt::format("{} (named fallback)", spec);
    return r;
  } else if (spec.find("{{") != std::string_view::npos || spec.find("{%") != std::string_view::npos) {
    source = std::string(spec);
    r.description_ = "the --chat-template text";
  } else {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(std::string(spec), ec))
      return not_found(fmt::format("--chat-template '{}' is not a file, a template or a known name ({})", spec,
                                   fmt::join(chat_template_names(), ", ")));
    TS_ASSIGN_OR_RETURN(source, template_from_file(std::string(spec)));
    r.description_ = fmt::format("the template file {}", spec);
  }
  TS_ASSIGN_OR_RETURN(r.jinja_, compile(source, r.description_));
  r.source_ = source;
  r.takes_tools_ = source.find("tools") != std::string::npos || r.jinja_tool_use_ != nullptr;
  return r;
}

Result<RenderedChat> ChatTemplateRenderer::render(std::string_view messages_json, std::string_view tools_json,
                                                  const ChatRenderOptions& options) const {
  Json messages = Json::parse(messages_json, nullptr, false);
  if (messages.is_discarded() || !messages.is_array()) return invalid_argument("messages must be a JSON array");
  const bool add_generation_prompt = options.add_generation_prompt;
  std::string final_text;
  if (options.continue_final_message) {
    if (add_generation_prompt)
      return invalid_argument("continue_final_message and add_generation_prompt cannot both be true");
    TS_ASSIGN_OR_RETURN(final_text, final_message_text(messages));
  }
  Json variables = Json::object();
  if (!options.variables_json.empty()) {
    variables = Json::parse(options.variables_json, nullptr, false);
    if (variables.is_discarded() || !variables.is_object())
      return invalid_argument("template variables must be a JSON object");
  }
  const bool tool_use = !tools_json.empty() && jinja_tool_use_;
  for (const auto& [name, value] : variables.items()) {
    if (family_ || !names_variable(tool_use ? tool_use_source_ : source_, name))
      return invalid_argument(
          fmt::format("{} does not read '{}', so sending it would have no effect", description_, name));
  }
  RenderedChat out;
  if (family_) {
    if (!tools_json.empty())
      return invalid_argument(fmt::format(
          "tools need a Jinja chat template (the model's own, or --chat-template FILE); this server uses {}",
          description_));
    TS_ASSIGN_OR_RETURN(std::vector<ChatMessage> plain, plain_messages(messages));
    TS_ASSIGN_OR_RETURN(out.text, render_chat(*family_, plain, add_generation_prompt));
    out.add_bos = true;  // the families leave BOS to the tokenizer
    if (options.continue_final_message) TS_RETURN_IF_ERROR(cut_after_final_text(out.text, final_text));
    return out;
  }
  Json ctx = Json::object();
  ctx["messages"] = std::move(messages);
  if (!tools_json.empty()) {
    Json tools = Json::parse(tools_json, nullptr, false);
    if (tools.is_discarded() || !tools.is_array()) return invalid_argument("tools must be a JSON array");
    ctx["tools"] = std::move(tools);
  }
  for (auto& [name, value] : variables.items()) ctx[name] = value;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_;
  ctx["eos_token"] = eos_;
  TS_ASSIGN_OR_RETURN(jinja::Value v, jinja::value_from_json(ctx.dump()));
  const jinja::Template& t = tool_use ? *jinja_tool_use_ : *jinja_;
  jinja::RenderOptions render_options;
  render_options.limits = options.limits;
  render_options.cancelled = options.cancelled;
  auto text = t.render(v.obj(), render_options);
  if (!text.ok()) {
    return Status(text.status().code(), fmt::format("{}: {}", description_, text.status().message()));
  }
  out.text = std::move(*text);
  if (options.continue_final_message) TS_RETURN_IF_ERROR(cut_after_final_text(out.text, final_text));
  if (!bos_.empty() && out.text.compare(0, bos_.size(), bos_) == 0) {
    out.text.erase(0, bos_.size());
    out.add_bos = true;
  }
  return out;
}

}  // namespace tessera::model
