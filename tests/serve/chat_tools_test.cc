// Tools on the chat path: `tools` / `tool_choice` and tool-call messages are validated and reach the chat
// template in the client's key order (the calls in generated text: tool_parsers_test.cc).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/openai.h"
#include "serve/chat_format.h"

namespace tessera::serve {
namespace {

using api::ApiError;
using api::ApiRequest;
using api::parse_request;

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
  EXPECT_EQ(m[1]["content"], "");  // null in the API; "" for templates, as vLLM passes it
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
  auto none = f->formatter(req(user + "," + kTools + R"(,"tool_choice":"none"})"), {});
  ASSERT_TRUE(none.ok());  // tools still reach the template; calls are not parsed back (tool_stream.h)
  auto no_tools = f->formatter(req(user + "}"), {});
  ASSERT_TRUE(no_tools.ok());
  EXPECT_EQ(no_tools->text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
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

}  // namespace
}  // namespace tessera::serve
