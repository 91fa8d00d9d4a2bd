// Registers the built-in tool-call parsers. Detection tries them in this order: the more specific formats first
// (harmony and Mistral's markers, Qwen3-Coder's XML inside <tool_call>), then Hermes' <tool_call>, then the Llama
// forms (a template asking for pythonic calls, then Llama 3's JSON).
#include "serve/tool_parsers/builtin.h"

#include "base/check.h"

namespace tessera::serve {

void register_builtin_tool_parsers(Registry<ToolParserPlugin>& registry) {
  const struct {
    const char* name;
    const char* description;
    ToolParserPlugin (*plugin)();
  } kBuiltin[] = {
      {"openai", "gpt-oss harmony: commentary messages to functions.NAME", openai_tool_parser},
      {"mistral", "Mistral [TOOL_CALLS]: a JSON array, or NAME[CALL_ID]id[ARGS]{...}", mistral_tool_parser},
      {"qwen3_coder", "Qwen3-Coder XML: <tool_call><function=NAME><parameter=P>value</parameter>...",
       qwen3_coder_tool_parser},
      {"hermes", "Hermes / Qwen: <tool_call>{\"name\", \"arguments\"}</tool_call>", hermes_tool_parser},
      {"pythonic", "pythonic: [f(a=1), g(b='x')]", pythonic_tool_parser},
      {"llama3_json", "Llama 3.x JSON: {\"name\", \"parameters\"}, after an optional <|python_tag|>",
       llama3_json_tool_parser},
  };
  for (const auto& b : kBuiltin) {
    const Status s = registry.add(b.name, b.plugin(), b.description);
    TS_CHECK_MSG(s.ok(), s.message().c_str());
  }
}

}  // namespace tessera::serve
