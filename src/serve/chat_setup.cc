#include "serve/chat_setup.h"

#include <fmt/format.h>

#include "model/chat_template.h"
#include "serve/tool_parsers/tool_parser.h"

namespace tessera::serve {

Result<ChatSetup> choose_chat_setup(const ChatSetupFlags& flags, const model::ModelChatInfo& model) {
  ChatSetup s;
  std::string template_source;  // what the parsers are detected from
  if (!flags.chat_template.empty()) {
    TS_ASSIGN_OR_RETURN(ChatFormat format, make_chat_format(flags.chat_template, model, flags.limits));
    s.formatter = std::move(format.formatter);
    template_source = format.source;
    s.info.push_back(fmt::format("chat template: {}", format.description));
  } else if (!model.chat_template.empty()) {
    auto format = make_chat_format("", model, flags.limits);
    if (!format.ok()) {
      auto family = model::detect_chat_template(model.chat_template);
      s.warnings.push_back(fmt::format("{}; {}", format.status().message(),
                                       family
                                           ? fmt::format("using the '{}' fallback", model::chat_template_name(*family))
                                           : std::string("chat completions are off (use --chat-template)")));
      if (family) format = make_chat_format(model::chat_template_name(*family), model, flags.limits);
    }
    if (format.ok()) {
      s.formatter = std::move(format->formatter);
      template_source = format->source;
      s.info.push_back(fmt::format("chat template: {}", format->description));
    }
  }
  TS_ASSIGN_OR_RETURN(s.reasoning, choose_reasoning_format(flags.reasoning_parser, template_source));
  if (s.reasoning != ReasoningFormat::kNone)
    s.info.push_back(fmt::format("reasoning parser: {}{}", reasoning_format_name(s.reasoning),
                                 flags.reasoning_parser.empty() ? " (detected from the chat template)" : ""));
  TS_ASSIGN_OR_RETURN(s.tool_parser, choose_tool_parser(flags.tool_call_parser, template_source));
  if (s.tool_parser != "none")
    s.info.push_back(fmt::format("tool-call parser: {}{}", s.tool_parser,
                                 flags.tool_call_parser.empty() ? " (detected from the chat template)" : ""));
  return s;
}

}  // namespace tessera::serve
