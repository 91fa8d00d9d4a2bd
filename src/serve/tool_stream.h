// The tool-call side of a chat choice: which parser reads the reply (serve/tool_parsers/tool_parser.h), and the
// OpenAI shapes its events take, as stream deltas and in a whole message.
//
// Streamed, a call goes out as OpenAI streams one: a first delta with `index`, `id`, `type: "function"` and
// `function.name` (arguments ""), then `function.arguments` in pieces as they are generated; content around the
// calls as `content` deltas.
//
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/openai.h"
#include "base/status.h"
#include "serve/tool_parsers/tool_parser.h"

namespace tessera::serve {

// The parser for a chat request's reply: the node's parser (`parser_name`, "none" for none) when the request has
// tools and tool_choice is not "none"; when tool_choice forces a call (serve/forced_tools.h), that parser if the
// grammar writes the family's own syntax (`family_syntax`), the JSON-form parser otherwise. Null when the reply is
// not read for calls. InvalidArgument for unreadable tools.
Result<std::unique_ptr<ToolParser>> make_reply_parser(const api::ApiRequest& r, const std::string& parser_name,
                                                      bool family_syntax = false);

// Stream deltas (the `delta` objects of chat.completion.chunk) for parser events, in order.
std::vector<nlohmann::json> tool_deltas(const std::vector<ToolEvent>& events);
// A message's `tool_calls`.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls);

}  // namespace tessera::serve
