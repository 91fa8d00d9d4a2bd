// tool_choice "required" or a named function, enforced by a grammar built from the tools' parameter schemas, in
// vLLM's way (independent of the model's own tool-call format): for a named function the reply is the call's
// arguments, a JSON object following that function's `parameters`; for "required" it is a JSON array of calls
// {"name": ..., "parameters": {...}}, each naming one of the tools with parameters following its schema, one call
// or more (exactly one when parallel_tool_calls is false). The node turns the finished reply into `tool_calls`.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "api/openai.h"
#include "api/structured_output.h"
#include "base/status.h"
#include "serve/tool_calls.h"

namespace tessera::serve {

// Whether the request forces a tool call.
bool forces_tool_call(const api::ApiRequest& r);

// The JSON schema that forces it (field "tool_choice"); InvalidArgument for tools that cannot be read.
Result<api::StructuredOutput> forced_tool_output(const api::ApiRequest& r);

// The calls in a finished reply; nullopt when the text is not such a document (cut short by max_tokens).
std::optional<std::vector<ToolCall>> forced_tool_calls(std::string_view text, const api::ApiRequest& r);

}  // namespace tessera::serve
