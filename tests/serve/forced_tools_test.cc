// tool_choice "required" / a named function (serve/forced_tools.h): the schema that forces the call is built from
// the tools' parameter schemas (references moved along), and a finished reply becomes tool calls; a reply cut
// short is none.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/openai.h"
#include "serve/forced_tools.h"

namespace tessera::serve {
namespace {

api::ApiRequest chat(const std::string& extra) {
  auto r =
      api::parse_request(std::string(R"({"model":"m","messages":[{"role":"user","content":"x"}],)") +
                             R"("tools":[{"type":"function","function":{"name":"add","parameters":{"type":"object",)"
                             R"("properties":{"a":{"type":"integer"},"b":{"$ref":"#/$defs/n"}},"required":["a","b"],)"
                             R"("$defs":{"n":{"type":"integer"}}}}},{"type":"function","function":{"name":"now"}}],)" +
                             extra + "}",
                         true);
  EXPECT_TRUE(std::holds_alternative<api::ApiRequest>(r));
  return std::get<api::ApiRequest>(r);
}

TEST(ForcedTools, ANamedFunctionIsItsParameters) {
  api::ApiRequest r = chat(R"("tool_choice":{"type":"function","function":{"name":"add"}})");
  ASSERT_TRUE(forces_tool_call(r));
  auto s = forced_tool_output(r);
  ASSERT_TRUE(s.ok());
  auto schema = nlohmann::json::parse(s->spec);
  EXPECT_EQ(schema["required"], nlohmann::json::array({"a", "b"}));
  EXPECT_EQ(schema["properties"]["b"]["$ref"], "#/$defs/n");
  auto calls = forced_tool_calls(R"({"a": 1, "b": 2})", r);
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].name, "add");
  EXPECT_EQ(nlohmann::json::parse((*calls)[0].arguments)["b"], 2);
  EXPECT_FALSE(forced_tool_calls(R"({"a": 1, "b)", r).has_value());
}

TEST(ForcedTools, RequiredIsAnArrayOfCallsOfAnyTool) {
  api::ApiRequest r = chat(R"("tool_choice":"required")");
  auto s = forced_tool_output(r);
  ASSERT_TRUE(s.ok());
  auto schema = nlohmann::json::parse(s->spec);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_FALSE(schema.contains("maxItems"));
  const auto& add = schema["items"]["anyOf"][0];
  EXPECT_EQ(add["properties"]["name"]["const"], "add");
  // The reference now points into the larger document.
  EXPECT_EQ(add["properties"]["parameters"]["properties"]["b"]["$ref"],
            "#/items/anyOf/0/properties/parameters/$defs/n");
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["parameters"], nlohmann::json({{"type", "object"}}));
  auto calls =
      forced_tool_calls(R"([{"name": "now", "parameters": {}}, {"name": "add", "parameters": {"a": 1, "b": 2}}])", r);
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[1].name, "add");
  EXPECT_FALSE(forced_tool_calls("[", r).has_value());
  api::ApiRequest one = chat(R"("tool_choice":"required","parallel_tool_calls":false)");
  EXPECT_EQ(nlohmann::json::parse(forced_tool_output(one)->spec)["maxItems"], 1);
  EXPECT_FALSE(forces_tool_call(chat(R"("tool_choice":"auto")")));
}

}  // namespace
}  // namespace tessera::serve
