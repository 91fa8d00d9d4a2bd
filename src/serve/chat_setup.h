// What a node answers chat completions with, chosen once at start: the prompt format (--chat-template; else the
// model's own Jinja template; else, when that does not parse, its family's fallback with a warning; else none,
// and /v1/chat/completions says so), and the reasoning and tool-call parsers (the flags, else detected from the
// template the format renders).
//
// Thread-safety: pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "serve/chat_format.h"
#include "serve/reasoning.h"

namespace tessera::serve {

struct ChatSetupFlags {
  std::string chat_template;     // --chat-template; empty: the model's own
  std::string reasoning_parser;  // --reasoning-parser; empty: detected
  std::string tool_call_parser;  // --tool-call-parser; empty: detected
  model::jinja::RenderLimits limits;
};

struct ChatSetup {
  ChatFormatter formatter;  // null: the model has no usable template (completions only)
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  std::string tool_parser = "none";
  std::vector<std::string> info, warnings;  // for the node's log
};

// InvalidArgument for a --chat-template that cannot be used or an unknown parser name.
Result<ChatSetup> choose_chat_setup(const ChatSetupFlags& flags, const model::ModelChatInfo& model);

}  // namespace tessera::serve
