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

Result<api::StructuredOutput> forced_tool_output(const api::ApiRequest& r) {
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

std::optional<std::vector<ToolCall>> forced_tool_calls(std::string_view text, const api::ApiRequest& r) {
  const ojson j = ojson::parse(text, nullptr, false);
  std::vector<ToolCall> calls;
  if (r.tool_choice == "function") {
    if (!j.is_object()) return std::nullopt;
    calls.push_back({r.tool_choice_function, dump(j)});
    return calls;
  }
  if (!j.is_array() || j.empty()) return std::nullopt;
  for (const ojson& c : j) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || !c.contains("parameters"))
      return std::nullopt;
    calls.push_back({c["name"].get<std::string>(), dump(c["parameters"])});
  }
  return calls;
}

}  // namespace tessera::serve
