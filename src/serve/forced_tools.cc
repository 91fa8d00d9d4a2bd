#include "serve/forced_tools.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace tessera::serve {
namespace {

using ojson = nlohmann::ordered_json;

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// A function's parameters schema (absent: any object).
ojson parameters_of(const ojson& tool) {
  const ojson& f = tool["function"];
  if (f.contains("parameters") && f["parameters"].is_object()) return f["parameters"];
  return {{"type", "object"}};
}

// Local references inside a schema moved to `base` (a JSON pointer) point into it again.
void rebase_refs(ojson& s, const std::string& base) {
  if (s.is_object()) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "$ref" && it.value().is_string()) {
        const std::string ref = it.value().get<std::string>();
        if (!ref.empty() && ref[0] == '#') it.value() = "#" + base + ref.substr(1);
      } else {
        rebase_refs(it.value(), base);
      }
    }
  } else if (s.is_array()) {
    for (ojson& x : s) rebase_refs(x, base);
  }
}

}  // namespace

bool forces_tool_call(const api::ApiRequest& r) {
  return r.chat && (r.tool_choice == "required" || r.tool_choice == "function") && !r.tools_json.empty();
}

namespace {

Result<api::StructuredOutput> json_form(const api::ApiRequest& r) {
  const ojson tools = ojson::parse(r.tools_json, nullptr, false);
  if (!tools.is_array() || tools.empty()) return invalid_argument("tool_choice needs 'tools'");
  api::StructuredOutput out;
  out.kind = api::StructuredOutput::Kind::kJsonSchema;
  out.field = "tool_choice";
  if (r.tool_choice == "function") {
    for (const ojson& t : tools) {
      if (t["function"]["name"] == r.tool_choice_function) {
        out.spec = dump(parameters_of(t));
        return out;
      }
    }
    return invalid_argument(
        fmt::format("tool_choice names function '{}', which is not among 'tools'", r.tool_choice_function));
  }
  ojson branches = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    ojson params = parameters_of(tools[i]);
    rebase_refs(params, fmt::format("/items/anyOf/{}/properties/parameters", i));
    branches.push_back({{"type", "object"},
                        {"properties", {{"name", {{"const", tools[i]["function"]["name"]}}}, {"parameters", params}}},
                        {"required", {"name", "parameters"}},
                        {"additionalProperties", false}});
  }
  ojson schema = {{"type", "array"}, {"items", {{"anyOf", branches}}}, {"minItems", 1}};
  if (!r.parallel_tool_calls) schema["maxItems"] = 1;
  out.spec = dump(schema);
  return out;
}

}  // namespace

Result<ForcedOutput> forced_tool_output(const api::ApiRequest& r, std::string_view parser_name) {
  ForcedOutput out;
  if (!parser_name.empty() && parser_name != "none") {
    TS_ASSIGN_OR_RETURN(auto plugin, tool_parsers().find(parser_name));
    if (plugin.factory.forced_grammar) {
      TS_ASSIGN_OR_RETURN(ToolParserContext context, ToolParserContext::from_tools_json(r.tools_json));
      std::vector<ToolSpec> tools;
      for (ToolSpec& t : context.tools)
        if (r.tool_choice != "function" || t.name == r.tool_choice_function) tools.push_back(std::move(t));
      if (tools.empty())
        return invalid_argument(
            fmt::format("tool_choice names function '{}', which is not among 'tools'", r.tool_choice_function));
      auto gbnf = plugin.factory.forced_grammar(tools, r.parallel_tool_calls);
      if (gbnf.ok()) {
        out.output.kind = api::StructuredOutput::Kind::kGrammar;
        out.output.field = "tool_choice";
        out.output.spec = std::move(*gbnf);
        out.family_syntax = true;
        return out;
      }
      if (gbnf.status().code() != StatusCode::kFailedPrecondition) return gbnf.status();
      // The family's syntax cannot express these tools: the JSON form.
    }
  }
  TS_ASSIGN_OR_RETURN(out.output, json_form(r));
  return out;
}

}  // namespace tessera::serve
