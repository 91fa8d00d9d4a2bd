// Tools on the chat path: `tools` / `tool_choice` and tool-call messages are validated and reach the chat
// template in the client's key order; tool calls in generated text are parsed back (Hermes/Qwen and Llama
// 3.x JSON), including what streaming may release before a call is complete.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/openai.h"
#include "serve/chat_format.h"
#include "serve/tool_calls.h"

namespace tessera::serve {
namespace {

using api::ApiError;
using api::ApiRequest;
using api::parse_request;
using model::ToolCallFormat;

ApiRequest req(const std::string& body) {
  auto r = parse_request(body, true);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::get<ApiRequest>(r);
}
ApiError err(const std::string& body) {
  auto r = parse_request(body, true);
  if (!std::holds_alternative<ApiError>(r)) ADD_FAILURE() << "accepted: " << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

const char* kTools = R"("tools":[{"type":"function","function":{"name":"get_weather","description":"d",)"
                     R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])";

TEST(ChatTools, RequestsCarryToolsAndToolMessages) {
  ApiRequest r = req(std::string(R"({"model":"m","messages":[{"role":"user","content":"Weather?"},)") +
                     R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",)" +
                     R"("function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},)" +
                     R"({"role":"tool","tool_call_id":"c1","content":"21C"}],)" + kTools + "}");
  EXPECT_EQ(r.tool_choice, "auto");
  // Key order kept (tojson in templates prints it); arguments became an object.
  EXPECT_EQ(r.tools_json.find("\"name\":\"get_weather\",\"description\""), r.tools_json.find("\"name\""));
  auto m = nlohmann::json::parse(r.messages_json);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_TRUE(m[1]["content"].is_null());
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(m[2]["role"], "tool");
  EXPECT_EQ(m[2]["tool_call_id"], "c1");

  const std::string user = R"({"model":"m","messages":[{"role":"user","content":"x"}],)";
  EXPECT_EQ(req(user + kTools + R"(,"tool_choice":"none"})").tool_choice, "none");
  // Forcing a call is enforced by a grammar of the tools' parameter schemas (serve/forced_tools.h).
  EXPECT_EQ(req(user + kTools + R"(,"tool_choice":"required"})").tool_choice, "required");
  ApiRequest named = req(user + kTools + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}}})");
  EXPECT_EQ(named.tool_choice, "function");
  EXPECT_EQ(named.tool_choice_function, "get_weather");
  EXPECT_FALSE(req(user + kTools + R"(,"parallel_tool_calls":false})").parallel_tool_calls);
  EXPECT_EQ(err(user + kTools + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}}})").param,
            "tool_choice");
  EXPECT_EQ(err(user + R"("tool_choice":"required"})").param, "tool_choice");
  EXPECT_EQ(err(user + kTools + R"(,"tool_choice":"sometimes"})").param, "tool_choice");
  EXPECT_EQ(err(user + R"("tools":[{"type":"function"}]})").param, "tools");
  EXPECT_EQ(err(user + R"("tools":{"a":1}})").param, "tools");
  EXPECT_EQ(
      err(R"({"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{bad"}}]}]})")
          .param,
      "messages");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"tool","content":"x"}]})").param, "messages");
}

TEST(ChatTools, ToolsReachTheTemplate) {
  // A Hermes-style template that lists the tools (tojson) and writes bos_token first.
  const std::string tmpl =
      "{{ bos_token }}{% if tools %}<tools>{% for t in tools %}{{ t.function | tojson }}{% endfor %}</tools>{% endif %}"
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}{# <tool_call> #}";
  model::ModelChatInfo info;
  info.chat_template = tmpl;
  info.bos_token = "<s>";
  auto f = make_chat_format("", info);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const std::string user = R"({"model":"m","messages":[{"role":"user","content":"Hi"}])";
  auto p = f->formatter(req(user + "," + kTools + "}"), {});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->add_bos);  // the template wrote BOS; it is left to the tokenizer, once
  EXPECT_EQ(p->text,
            "<tools>{\"name\": \"get_weather\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", "
            "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}</tools>"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(p->tool_calls, ToolCallFormat::kHermes);
  auto none = f->formatter(req(user + "," + kTools + R"(,"tool_choice":"none"})"), {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->tool_calls, ToolCallFormat::kNone);  // not parsed back
  auto no_tools = f->formatter(req(user + "}"), {});
  ASSERT_TRUE(no_tools.ok());
  EXPECT_EQ(no_tools->text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(no_tools->tool_calls, ToolCallFormat::kNone);
  // A template's own refusal reaches the client as its message.
  info.chat_template = "{{ raise_exception('Conversation roles must alternate') }}";
  auto refusing = make_chat_format("", info);
  ASSERT_TRUE(refusing.ok());
  auto r = refusing->formatter(req(user + "}"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Conversation roles must alternate"), std::string::npos);
  // Fallback families cannot render tools: said so, not ignored.
  auto chatml = make_chat_format("chatml", info);
  ASSERT_TRUE(chatml.ok());
  EXPECT_FALSE(chatml->formatter(req(user + "," + kTools + "}"), {}).ok());
  // A template that does not parse is refused at startup with its line.
  info.chat_template = "ok\n{% if x %}";
  auto broken = make_chat_format("", info);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("line 2"), std::string::npos);
}

TEST(ToolCallParser, Hermes) {
  auto r = parse_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
      ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Let me check.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  // Cut off by the end of generation before </tool_call>: still a call.
  r = parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}", ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"a\":[1,2]}");
  EXPECT_EQ(r.content, "");
  // Broken JSON or no name: the text stays content.
  for (const char* text :
       {"<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>", "<tool_call>[1]</tool_call>", "no calls here"}) {
    r = parse_tool_calls(text, ToolCallFormat::kHermes);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(ToolCallParser, Llama3Json) {
  auto r = parse_tool_calls(" {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                            ToolCallFormat::kLlama3Json);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Paris\"}");
  r = parse_tool_calls("<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": \"{}\"}",
                       ToolCallFormat::kLlama3Json);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "b");
  r = parse_tool_calls("The weather is {fine}.", ToolCallFormat::kLlama3Json);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "The weather is {fine}.");
  r = parse_tool_calls("{\"not\": \"a call\"}", ToolCallFormat::kLlama3Json);
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolCallParser, StreamingReleasesOnlyWhatCannotBeACall) {
  EXPECT_EQ(releasable_content("Hello", ToolCallFormat::kHermes), 5u);
  EXPECT_EQ(releasable_content("Hello <tool", ToolCallFormat::kHermes), 6u);  // "<tool" may open a call
  EXPECT_EQ(releasable_content("Hi <tool_call>{\"na", ToolCallFormat::kHermes), 3u);
  EXPECT_EQ(releasable_content("a < b", ToolCallFormat::kHermes), 5u);
  EXPECT_EQ(releasable_content("  ", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(releasable_content(" {\"name\"", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(releasable_content("<|pyth", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(releasable_content("Sure", ToolCallFormat::kLlama3Json), 4u);
  EXPECT_EQ(releasable_content("anything", ToolCallFormat::kNone), 8u);
}

}  // namespace
}  // namespace tessera::serve
