// Forced tool calls in a family's own syntax: the grammar a family plug-in writes (ToolParserPlugin::forced_grammar)
// so that, under tool_choice "required" or a named function, the model writes its calls the way it was trained to
// and the family's parser reads them as it reads free-form calls. Families whose call markers are special tokens
// (Mistral's [TOOL_CALLS], harmony's <|channel|>) have none: a byte grammar cannot write a special token (the
// grammar engine masks over the text tokens), so their forced calls use the JSON form of serve/forced_tools.h.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/ast.h"
#include "serve/tool_parsers/tool_parser.h"

namespace tessera::serve {

// The JSON grammar of a tool's parameters (any object when it has none) merged into `ast` under `prefix`; the name
// of its root rule there. InvalidArgument naming the schema's fault.
Result<std::string> parameters_rule(grammar::Ast& ast, const nlohmann::ordered_json& parameters,
                                    std::string_view prefix);
// `s` as a JSON string literal (quotes and escapes), as the call's name is written.
std::string json_quoted(std::string_view s);
// The grammar `root ::= call ("\n" call)*` (no repetition when not parallel) over `calls` (one alternative per
// tool), written as GBNF.
std::string forced_calls_gbnf(grammar::Ast ast, std::vector<grammar::Expr> calls, bool parallel,
                              std::string_view separator);

}  // namespace tessera::serve
