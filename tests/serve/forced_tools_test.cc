// tool_choice "required" / a named function (serve/forced_tools.h): the schema that forces the call is built from
// the tools' parameter schemas (references moved along), and a finished reply becomes tool calls; a reply cut
// short is none.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/openai.h"
#include "grammar/compiler.h"
#include "grammar/stack.h"
#include "serve/forced_tools.h"
#include "serve/tool_stream.h"

namespace tessera::serve {
namespace {

// The calls a finished forced reply becomes (the node's reading of it); none when it is not complete.
std::vector<ToolCall> calls_of(const std::string& text, const api::ApiRequest& r) {
  auto parser = make_reply_parser(r, "none");
  EXPECT_TRUE(parser.ok() && *parser);
  return parse_whole(**parser, text).calls;
}

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
  auto schema = nlohmann::json::parse(s->output.spec);
  EXPECT_EQ(schema["required"], nlohmann::json::array({"a", "b"}));
  EXPECT_EQ(schema["properties"]["b"]["$ref"], "#/$defs/n");
  auto calls = calls_of(R"({"a": 1, "b": 2})", r);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "add");
  EXPECT_EQ(nlohmann::json::parse(calls[0].arguments)["b"], 2);
  EXPECT_TRUE(calls_of(R"({"a": 1, "b)", r).empty());
}

TEST(ForcedTools, RequiredIsAnArrayOfCallsOfAnyTool) {
  api::ApiRequest r = chat(R"("tool_choice":"required")");
  auto s = forced_tool_output(r);
  ASSERT_TRUE(s.ok());
  auto schema = nlohmann::json::parse(s->output.spec);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_FALSE(schema.contains("maxItems"));
  const auto& add = schema["items"]["anyOf"][0];
  EXPECT_EQ(add["properties"]["name"]["const"], "add");
  // The reference now points into the larger document.
  EXPECT_EQ(add["properties"]["parameters"]["properties"]["b"]["$ref"],
            "#/items/anyOf/0/properties/parameters/$defs/n");
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["parameters"], nlohmann::json({{"type", "object"}}));
  auto calls = calls_of(R"([{"name": "now", "parameters": {}}, {"name": "add", "parameters": {"a": 1, "b": 2}}])", r);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].name, "add");
  EXPECT_TRUE(calls_of("[", r).empty());
  api::ApiRequest one = chat(R"("tool_choice":"required","parallel_tool_calls":false)");
  EXPECT_EQ(nlohmann::json::parse(forced_tool_output(one)->output.spec)["maxItems"], 1);
  EXPECT_FALSE(forces_tool_call(chat(R"("tool_choice":"auto")")));
}

// The family's own syntax: the grammar accepts exactly the calls the family's template writes, and the family's
// parser reads what it accepts.
TEST(ForcedTools, FamiliesThatWriteTextGetTheirOwnSyntax) {
  struct Case {
    const char* parser;
    const char* good;
    std::vector<const char*> bad;
  };
  const Case cases[] = {
      {"hermes",
       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n<tool_call>\n"
       "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
       {"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"sub\", \"arguments\": {}}\n</tool_call>",
        "[{\"name\": \"now\", \"parameters\": {}}]"}},
      {"llama3_json",
       "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
       {"{\"name\": \"add\", \"parameters\": {\"a\": \"1\", \"b\": 2}}",
        "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"now\", \"parameters\": {}}"}},
      {"qwen3_coder",
       "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n"
       "</tool_call>",
       {"<tool_call>\n<function=add>\n<parameter=a>\none\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n"
        "</tool_call>",
        "<tool_call>\n<function=add>\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.parser);
    api::ApiRequest r = chat(R"("tool_choice":"required")");
    auto forced = forced_tool_output(r, c.parser);
    ASSERT_TRUE(forced.ok()) << forced.status().to_string();
    EXPECT_TRUE(forced->family_syntax);
    EXPECT_EQ(forced->output.kind, api::StructuredOutput::Kind::kGrammar);
    auto g = grammar::build_spec({grammar::SpecKind::kGbnf, forced->output.spec, ""});
    ASSERT_TRUE(g.ok()) << g.status().to_string() << "\n" << forced->output.spec;
    EXPECT_TRUE(grammar::accepts(**g, c.good)) << forced->output.spec;
    for (const char* bad : c.bad) EXPECT_FALSE(grammar::accepts(**g, bad)) << bad;
    auto parser = make_reply_parser(r, c.parser, true);
    ASSERT_TRUE(parser.ok() && *parser);
    const ParsedReply reply = parse_whole(**parser, c.good);
    ASSERT_FALSE(reply.calls.empty());
    EXPECT_EQ(reply.calls[0].name, "add");
    EXPECT_EQ(nlohmann::json::parse(reply.calls[0].arguments), nlohmann::json({{"a", 1}, {"b", 2}}));
    EXPECT_EQ(reply.content, "");
  }
  // Named: only that function; parallel_tool_calls false: one call.
  api::ApiRequest named =
      chat(R"("tool_choice":{"type":"function","function":{"name":"now"}},"parallel_tool_calls":false)");
  auto forced = forced_tool_output(named, "hermes");
  ASSERT_TRUE(forced.ok());
  auto g = grammar::build_spec({grammar::SpecKind::kGbnf, forced->output.spec, ""});
  ASSERT_TRUE(g.ok());
  const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(grammar::accepts(**g, now));
  EXPECT_FALSE(grammar::accepts(**g, now + "\n" + now));
  EXPECT_FALSE(
      grammar::accepts(**g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"));
  // Markers that are special tokens cannot be written by a byte grammar: the JSON form.
  for (const char* p : {"mistral", "openai", "pythonic", "none"}) {
    auto json_form = forced_tool_output(chat(R"("tool_choice":"required")"), p);
    ASSERT_TRUE(json_form.ok());
    EXPECT_FALSE(json_form->family_syntax) << p;
    EXPECT_EQ(json_form->output.kind, api::StructuredOutput::Kind::kJsonSchema);
  }
}

TEST(ForcedTools, Qwen3CoderStringsItCannotConstrainUseTheJsonForm) {
  auto r = api::parse_request(
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required","tools":[{"type":"function",)"
      R"("function":{"name":"f","parameters":{"type":"object","properties":{"code":{"type":"string","pattern":"^[a-z]+$"}}}}}]})",
      true);
  ASSERT_TRUE(std::holds_alternative<api::ApiRequest>(r));
  auto forced = forced_tool_output(std::get<api::ApiRequest>(r), "qwen3_coder");
  ASSERT_TRUE(forced.ok());
  EXPECT_FALSE(forced->family_syntax);
  // Free text in a plain string parameter: anything but the closing tags.
  auto plain = api::parse_request(
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required","tools":[{"type":"function",)"
      R"("function":{"name":"f","parameters":{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}}}]})",
      true);
  auto text = forced_tool_output(std::get<api::ApiRequest>(plain), "qwen3_coder");
  ASSERT_TRUE(text.ok() && text->family_syntax);
  auto g = grammar::build_spec({grammar::SpecKind::kGbnf, text->output.spec, ""});
  ASSERT_TRUE(g.ok());
  auto call = [](const std::string& v) {
    return "<tool_call>\n<function=f>\n<parameter=code>\n" + v + "\n</parameter>\n</function>\n</tool_call>";
  };
  EXPECT_TRUE(grammar::accepts(**g, call("if a < b:\n    print(\"<p>\")")));
  EXPECT_FALSE(grammar::accepts(**g, call("x</parameter>y")));
}

}  // namespace
}  // namespace tessera::serve
