// Tool calls in generated text -> OpenAI `tool_calls`, for the two formats chat models write them in:
//  - Hermes / Qwen2.5 / Qwen3: `<tool_call>{"name": "f", "arguments": {...}}</tool_call>`, one block per
//    call, after optional content (the last block may be cut off by the end of generation);
//  - Llama 3.x JSON: the whole reply is `{"name": "f", "parameters": {...}}` (or "arguments"), optionally
//    after `<|python_tag|>`, several calls separated by ';'.
// Text that is not a well-formed call stays content: a model that writes a broken call gets its text
// back rather than a made-up call. Pure functions, so the rules are unit-tested without a model.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/chat_template_renderer.h"

namespace tessera::serve {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI sends arguments as a string)
};

struct ParsedReply {
  std::string content;  // the text outside the calls (all of it when there are none)
  std::vector<ToolCall> calls;
};

ParsedReply parse_tool_calls(std::string_view text, model::ToolCallFormat format);

// Streaming: how many leading bytes of `text` (everything generated so far) can go to the client as
// content now, because they cannot be part of a tool call however the text continues.
size_t releasable_content(std::string_view text, model::ToolCallFormat format);

}  // namespace tessera::serve
