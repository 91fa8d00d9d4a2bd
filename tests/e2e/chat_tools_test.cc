// Tools end to end through a real `tessera serve`: the request's tools reach the chat template (the
// prompt grows by their rendered schema), and a reply holding a Hermes tool call comes back as OpenAI
// `tool_calls` with finish_reason "tool_calls", non-streamed and streamed (where no content chunk may leak
// the call's markup, and the call arrives as OpenAI streams one: its name first, then its arguments in pieces).
// stories260K never writes a tool call by itself, so the reply's tokens are given as a continued stream
// (tessera_resume, resume.h: the tokens an earlier node generated), the way a migrated stream arrives; the node then
// runs its ordinary output path over them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "http/http.h"
#include "model/loader.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;

const char* kTemplate =
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n"
    "For each call return <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Current weather in a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");

class ChatTools : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::have_stories260k()) GTEST_SKIP() << "stories260K not found at " << testing::stories260k_dir();
    const std::string dir = testing::scratch_dir();
    tmpl_ = dir + "/hermes.jinja";
    std::FILE* f = std::fopen(tmpl_.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs(kTemplate, f);
    std::fclose(f);
    proc_ = std::make_unique<testing::BackgroundProcess>(
        std::vector<std::string>{testing::tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0",
                                 "--chat-template", tmpl_});
    const int port = testing::port_from_line(proc_->wait_for_line("listening on"));
    ASSERT_GT(port, 0);
    url_ = "http://127.0.0.1:" + std::to_string(port);
  }

  Result<http::Response> post(const json& body) {
    return http::fetch({.method = "POST",
                        .url = url_ + "/v1/chat/completions",
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body.dump()});
  }

  std::string tmpl_, url_;
  std::unique_ptr<testing::BackgroundProcess> proc_;
};

TEST_F(ChatTools, ToolsReachTheTemplate) {
  json body = {{"model", "stories260K"},
               {"messages", json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}})},
               {"max_tokens", 1},
               {"temperature", 0}};
  auto plain = post(body);
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->status, 200) << plain->body;
  body["tools"] = kTools;
  auto with_tools = post(body);
  ASSERT_TRUE(with_tools.ok());
  ASSERT_EQ(with_tools->status, 200) << with_tools->body;
  const int a = json::parse(plain->body)["usage"]["prompt_tokens"],
            b = json::parse(with_tools->body)["usage"]["prompt_tokens"];
  // The schema's JSON (about 200 characters) is in the prompt only with tools.
  EXPECT_GT(b, a + 40) << a << " vs " << b;
  // A forced call cut short by max_tokens is no call: finish_reason "length", the partial text as content.
  body["tool_choice"] = "required";
  auto cut = post(body);
  ASSERT_TRUE(cut.ok());
  ASSERT_EQ(cut->status, 200) << cut->body;
  const json choice = json::parse(cut->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_FALSE(choice["message"].contains("tool_calls")) << cut->body;
  // The grammar writes the Hermes family's own syntax (forced_tools.h): its only start is "<tool_call>"'s "<".
  EXPECT_EQ(choice["message"]["content"], "<") << cut->body;
}

TEST_F(ChatTools, AToolCallInTheReplyBecomesToolCalls) {
  auto model = model::load_model(testing::stories260k_dir());
  ASSERT_TRUE(model.ok()) << model.status().message();
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  std::vector<model::TokenId> ids = model->tokenizer->encode(call, false);
  // SentencePiece spells it with a leading space; the parser takes the space as (empty) content.
  ASSERT_NE(model->tokenizer->decode(ids).find(call), std::string::npos) << "the tokenizer must spell the call";
  json body = {{"model", "stories260K"},
               {"messages", json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}})},
               {"tools", kTools},
               {"max_tokens", ids.size()},
               {"temperature", 0},
               {"tessera_resume", {{"tokens", ids}, {"text_bytes", 0}}}};
  auto r = post(body);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r->body;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << r->body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r->body;
  const json& tc = choice["message"]["tool_calls"][0];
  EXPECT_EQ(tc["type"], "function");
  EXPECT_FALSE(tc["id"].get<std::string>().empty());
  EXPECT_EQ(tc["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(tc["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));

  // Streamed: content chunks never carry the markup; one tool_calls delta; the same finish reason.
  body["stream"] = true;
  std::string sse;
  auto s = http::fetch_streaming({.method = "POST",
                                  .url = url_ + "/v1/chat/completions",
                                  .headers = {{"Content-Type", "application/json"}},
                                  .body = body.dump()},
                                 [&](std::string_view piece) {
                                   sse.append(piece);
                                   return true;
                                 });
  ASSERT_TRUE(s.ok());
  std::string content, finish;
  json calls = json::array();
  int deltas = 0;
  for (size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
    size_t end = sse.find("\n\n", at);
    std::string data = sse.substr(at + 6, end - at - 6);
    if (data == "[DONE]") break;
    json chunk = json::parse(data);
    const json& d = chunk["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
    // As the openai client assembles them: the first delta of a call names it, the arguments come in pieces.
    if (d.contains("tool_calls")) {
      for (const json& c : d["tool_calls"]) {
        deltas++;
        const size_t i = c["index"].get<size_t>();
        if (i == calls.size()) {
          ASSERT_TRUE(c.contains("id") && c["type"] == "function" && c["function"].contains("name")) << c;
          EXPECT_EQ(c["function"]["arguments"], "");
          calls.push_back(c);
        } else {
          ASSERT_LT(i, calls.size());
          EXPECT_FALSE(c["function"].contains("name"));
          calls[i]["function"]["arguments"] =
              calls[i]["function"]["arguments"].get<std::string>() + c["function"]["arguments"].get<std::string>();
        }
      }
    }
    if (chunk["choices"][0]["finish_reason"].is_string()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content.find("tool_call"), std::string::npos) << content;
  EXPECT_EQ(finish, "tool_calls") << sse;
  ASSERT_EQ(calls.size(), 1u) << sse;
  // The resumed tokens arrive as one output here, so the arguments come in one piece after the name's delta
  // (pieces as they are generated: ToolParsers.* and e2e.openai_tools).
  EXPECT_EQ(deltas, 2) << sse;
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
}

}  // namespace
}  // namespace tessera
