// tool_choice "required" or a named function, enforced by a grammar built from the tools' parameter schemas, in
// vLLM's way (independent of the model's own tool-call format): for a named function the reply is the call's
// arguments, a JSON object following that function's `parameters`; for "required" it is a JSON array of calls
// {"name": ..., "parameters": {...}}, each naming one of the tools with parameters following its schema, one call
// or more (exactly one when parallel_tool_calls is false). The node reads the reply as it streams with
// make_forced_json_parser() (serve/tool_parsers/tool_parser.h).
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "api/openai.h"
#include "api/structured_output.h"
#include "base/status.h"
#include "serve/tool_parsers/tool_parser.h"

namespace tessera::serve {

// Whether the request forces a tool call.
bool forces_tool_call(const api::ApiRequest& r);

// What forces it (field "tool_choice"): the grammar of the calls in the family's own syntax when the node's tool-call
// parser `parser_name` writes one (ToolParserPlugin::forced_grammar: hermes, llama3_json, qwen3_coder), so the model
// writes calls as it was trained to and that parser reads them; otherwise the JSON schema above. InvalidArgument
// for tools that cannot be read.
struct ForcedOutput {
  api::StructuredOutput output;
  bool family_syntax = false;  // the reply is read by the family's parser, else by make_forced_json_parser()
};
Result<ForcedOutput> forced_tool_output(const api::ApiRequest& r, std::string_view parser_name = "none");

}  // namespace tessera::serve
