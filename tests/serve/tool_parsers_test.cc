// Tool-call parsers (serve/tool_parsers/): every family's reply read whole, byte by byte, split in two at every
// byte boundary, and in token-sized pieces, must give the same content and calls; a stream's deltas assemble as
// the `openai` client assembles them (content concatenated, calls by index, the name on the first delta,
// arguments concatenated) and every arguments prefix sent continues a valid JSON document; malformed calls (cut
// off, bad JSON, unknown shapes) come back as content, verbatim, in a whole reply, and lose no text in a stream.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "serve/reasoning.h"
#include "serve/tool_parsers/json_scanner.h"
#include "serve/tool_parsers/python_literal.h"
#include "serve/tool_parsers/tool_parser.h"
#include "serve/tool_stream.h"

namespace tessera::serve {
namespace {

using Json = nlohmann::ordered_json;

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "where": {"type": "object"}, "tags": {"type": "array"}, "scale": {"type": ["number", "null"]}}}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}, "b": {"type": "number"}}}}}])";

std::unique_ptr<ToolParser> make(const std::string& name) {
  auto ctx = ToolParserContext::from_tools_json(kTools);
  EXPECT_TRUE(ctx.ok());
  auto plugin = tool_parsers().find(name);
  EXPECT_TRUE(plugin.ok()) << name;
  ctx->id_chars = plugin->factory.id_chars;
  return plugin->factory.create(*ctx);
}

struct Call {
  std::string name;
  Json args;
};
struct Expected {
  std::string content;
  std::vector<Call> calls;
};

// What a streaming client assembles from the deltas (and checks on the way).
struct Assembled {
  std::string content;
  std::vector<std::string> names, args, ids;
  int completed = 0;
};

void absorb(Assembled& a, const std::vector<ToolEvent>& events) {
  for (const ToolEvent& e : events) {
    switch (e.kind) {
      case ToolEvent::Kind::kContent:
      case ToolEvent::Kind::kCallBroken:
        a.content += e.text;
        break;
      case ToolEvent::Kind::kCallStart:
        ASSERT_EQ(e.index, static_cast<int>(a.names.size())) << "indices increase from 0";
        ASSERT_FALSE(e.id.empty());
        a.names.push_back(e.text);
        a.ids.push_back(e.id);
        a.args.emplace_back();
        break;
      case ToolEvent::Kind::kArguments: {
        ASSERT_LT(e.index, static_cast<int>(a.args.size()));
        a.args[static_cast<size_t>(e.index)] += e.text;
        // Every prefix sent continues a valid document.
        JsonScanner scan;
        for (char c : a.args[static_cast<size_t>(e.index)])
          ASSERT_NE(scan.feed(c), JsonScanner::Step::kError) << a.args[static_cast<size_t>(e.index)];
        break;
      }
      case ToolEvent::Kind::kCallEnd:
        a.completed++;
        break;
    }
  }
}

Assembled stream(const std::string& parser, const std::vector<std::string>& pieces) {
  auto p = make(parser);
  Assembled a;
  for (const std::string& piece : pieces) absorb(a, p->feed(piece));
  absorb(a, p->finish());
  return a;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// Whole, byte by byte, every two-way split, random pieces: the same content and calls.
void check(const std::string& parser, const std::string& text, const Expected& want) {
  SCOPED_TRACE(parser + ": " + text);
  auto whole = make(parser);
  ParsedReply r = parse_whole(*whole, text);
  EXPECT_EQ(r.content, want.content);
  ASSERT_EQ(r.calls.size(), want.calls.size());
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].name, want.calls[i].name);
    EXPECT_EQ(Json::parse(r.calls[i].arguments), want.calls[i].args) << r.calls[i].arguments;
  }
  std::vector<std::vector<std::string>> splits;
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  splits.push_back(bytes);
  for (size_t at = 0; at <= text.size(); ++at) splits.push_back({text.substr(0, at), text.substr(at)});
  std::mt19937 rng(7);
  for (int k = 0; k < 20; ++k) {
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t n = 1 + rng() % 6;
      pieces.push_back(text.substr(at, n));
      at += n;
    }
    splits.push_back(pieces);
  }
  for (const auto& pieces : splits) {
    Assembled a = stream(parser, pieces);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(a.completed, static_cast<int>(want.calls.size())) << "pieces: " << pieces.size();
    EXPECT_EQ(want.calls.empty() ? a.content : trim(a.content), want.content) << "pieces: " << pieces.size();
    for (size_t i = 0; i < want.calls.size(); ++i) {
      EXPECT_EQ(a.names[i], want.calls[i].name);
      EXPECT_EQ(Json::parse(a.args[i]), want.calls[i].args) << a.args[i];
    }
  }
}

// A malformed reply: whole, it is all content and no call; streamed, nothing breaks and no text is lost (what
// did not go out in a call's deltas goes out as content).
void check_malformed(const std::string& parser, const std::string& text, int complete_calls = 0) {
  SCOPED_TRACE(parser + " (malformed): " + text);
  auto whole = make(parser);
  ParsedReply r = parse_whole(*whole, text);
  if (complete_calls == 0) {
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, text);
  } else {
    EXPECT_EQ(static_cast<int>(r.calls.size()), complete_calls);
  }
  for (size_t at = 0; at <= text.size(); ++at) {
    Assembled a = stream(parser, {text.substr(0, at), text.substr(at)});
    EXPECT_EQ(a.completed, complete_calls);
    size_t carried = a.content.size();
    for (size_t i = 0; i < a.names.size(); ++i) carried += a.names[i].size() + a.args[i].size();
    EXPECT_GE(carried + 64, text.size() / 2) << "most of the text arrives somewhere";
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(stream(parser, bytes).completed, complete_calls);
}

const Json kParis = {{"city", "Paris"}, {"days", 3}};

TEST(ToolParsers, Hermes) {
  check("hermes",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
        {"", {{"get_weather", kParis}}});
  check("hermes",
        "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n"
        "</tool_call>\n<tool_call>\n{\"arguments\": {\"a\": 1, \"b\": 2.5}, \"name\": \"add\"}\n</tool_call>",
        {"Let me check.", {{"get_weather", kParis}, {"add", {{"a", 1}, {"b", 2.5}}}}});
  // Arguments as a JSON string; no closing tag at the end of the reply.
  check("hermes", "<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}", {"", {{"add", {{"a", 1}}}}});
  check("hermes", "No tools needed: 2 < 3 and <b>bold</b>.", {"No tools needed: 2 < 3 and <b>bold</b>.", {}});
  check("hermes", "<tool_call>{\"name\": \"now\"}</tool_call>", {"", {{"now", Json::object()}}});
  check_malformed("hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par");
  check_malformed("hermes", "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": Paris}}</tool_call>");
  check_malformed("hermes", "<tool_call>{\"function\": \"get_weather\"}</tool_call>");
  check_malformed("hermes", "<tool_call>[1, 2]</tool_call>");
  check_malformed("hermes", "Hi there.\n\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1");
  check_malformed("hermes", "<tool_call>{\"name\": \"add\", \"arguments\": \"{not json\"}</tool_call>");
}

TEST(ToolParsers, Qwen3Coder) {
  check("qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
        "</parameter>\n</function>\n</tool_call>",
        {"", {{"get_weather", kParis}}});
  // Typed by the schema: a number string stays a string, object values are JSON or Python literals, booleans,
  // a union with null; multi-line strings keep their inner newlines; parameters the schema does not list are text.
  check("qwen3_coder",
        "I will call it.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n42 \"quoted\"\nline 2\n</parameter>\n"
        "<parameter=metric>\ntrue\n</parameter>\n<parameter=where>\n{'lat': 1.5, 'ok': True}\n</parameter>\n"
        "<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n<parameter=scale>\nnull\n</parameter>\n"
        "<parameter=extra>\n7\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=add>\n"
        "<parameter=a>\n-2\n</parameter>\n<parameter=b>\n0.5\n</parameter>\n</function>\n</tool_call>",
        {"I will call it.",
         {{"get_weather",
           {{"city", "42 \"quoted\"\nline 2"},
            {"metric", true},
            {"where", {{"lat", 1.5}, {"ok", true}}},
            {"tags", {"a", "b"}},
            {"scale", nullptr},
            {"extra", "7"}}},
          {"add", {{"a", -2}, {"b", 0.5}}}}});
  // A value left open ends at the next parameter; an integer that is not one stays text.
  check("qwen3_coder",
        "<tool_call>\n<function=add>\n<parameter=a>\nmany\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>",
        {"", {{"add", {{"a", "many"}, {"b", 2}}}}});
  // Code in a string value: tags and quotes of its own.
  check("qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nif a < b:\n    print(\"<p>\")\n\n</parameter>\n"
        "</function>\n</tool_call>",
        {"", {{"get_weather", {{"city", "if a < b:\n    print(\"<p>\")\n"}}}}});
  check_malformed("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar");
  check_malformed("qwen3_coder", "<tool_call>\nget_weather(city='Paris')\n</tool_call>");
  check_malformed("qwen3_coder", "<tool_call>\n<function=get weather\nx");
  check_malformed("qwen3_coder", "Let me see.\n<tool_call>\n<function=add>\n<parameter=a>\n1");
}

TEST(ToolParsers, Llama3Json) {
  check("llama3_json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
        {"", {{"get_weather", kParis}}});
  check("llama3_json",
        "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}; "
        "{\"name\": \"add\", \"arguments\": {\"a\": 1}}",
        {"", {{"get_weather", kParis}, {"add", {{"a", 1}}}}});
  check("llama3_json", " The weather is {fine}.", {" The weather is {fine}.", {}});
  check("llama3_json", "Sure, {\"name\": \"add\"}", {"Sure, {\"name\": \"add\"}", {}});
  check("llama3_json", "{\"answer\": 42}", {"{\"answer\": 42}", {}});  // JSON content, not a call
  check_malformed("llama3_json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"");
  check_malformed("llama3_json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}}", 1);
}

TEST(ToolParsers, Pythonic) {
  check("pythonic", "[get_weather(city=\"Paris\", days=3)]", {"", {{"get_weather", kParis}}});
  check("pythonic",
        "<|python_tag|>[get_weather(city='It\\'s \"here\"', where={'a': [1, 2.5, None]}, metric=False), add()]",
        {"",
         {{"get_weather", {{"city", "It's \"here\""}, {"where", {{"a", {1, 2.5, nullptr}}}}, {"metric", false}}},
          {"add", Json::object()}}});
  check("pythonic", "[add(a=1, b=-.5, )]", {"", {{"add", {{"a", 1}, {"b", -0.5}}}}});
  check("pythonic", "[1] is a citation.", {"[1] is a citation.", {}});
  check("pythonic", "Hello [there]", {"Hello [there]", {}});
  check_malformed("pythonic", "[get_weather(city='Par");
  check_malformed("pythonic", "[get_weather(city=Paris)]");
  check_malformed("pythonic", "[get_weather('Paris')]");
}

TEST(ToolParsers, Mistral) {
  // v3 (Nemo): a JSON array, ids written by the model.
  check("mistral",
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}, \"id\": "
        "\"a1b2c3d4e\"}, {\"name\": \"add\", \"arguments\": {\"a\": 1}}]",
        {"", {{"get_weather", kParis}, {"add", {{"a", 1}}}}});
  // v7+ (Small 3.2, Devstral): NAME[CALL_ID]id[ARGS]{...}, repeated; the id optional.
  check("mistral",
        "Checking.[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"Paris\", \"days\": 3}"
        "[TOOL_CALLS]add[ARGS]{\"a\": 1}",
        {"Checking.", {{"get_weather", kParis}, {"add", {{"a", 1}}}}});
  check("mistral", "Plain [TEXT] and [TOOL_CALL] lookalikes.", {"Plain [TEXT] and [TOOL_CALL] lookalikes.", {}});
  check_malformed("mistral", "[TOOL_CALLS]get_weather[ARGS]{\"city\": ");
  check_malformed("mistral", "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}");
  check_malformed("mistral", "[TOOL_CALLS]not a call");
  check_malformed("mistral", "Checking. [TOOL_CALLS]add[ARGS]{\"a\": 1");
}

TEST(ToolParsers, MistralIdsAreTheModelsOrNineAlphanumerics) {
  auto p = make("mistral");
  ParsedReply r = parse_whole(*p, "[TOOL_CALLS]add[CALL_ID]Zz9Zz9Zz9[ARGS]{}[TOOL_CALLS]add[ARGS]{}");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].id, "Zz9Zz9Zz9");
  EXPECT_EQ(r.calls[1].id.size(), 9u);
  for (char c : r.calls[1].id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << r.calls[1].id;
}

TEST(ToolParsers, OpenAiHarmony) {
  // After the gpt_oss reasoning parser: commentary verbatim, final as plain content.
  check("openai",
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        "{\"city\": \"Paris\", \"days\": 3}<|call|>",
        {"", {{"get_weather", kParis}}});
  // The recipient in the role part, continuing the prompt's <|start|>assistant (as the template writes calls).
  check("openai", " to=functions.add<|channel|>commentary json<|message|>{\"a\": 1}", {"", {{"add", {{"a", 1}}}}});
  // A preamble on the commentary channel is content; the final answer too.
  check("openai",
        "<|channel|>commentary<|message|>Let me look.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.add <|constrain|>json<|message|>{\"a\": 2}<|call|>",
        {"Let me look.", {{"add", {{"a", 2}}}}});
  check("openai", "The answer is 4.", {"The answer is 4.", {}});
  check_malformed("openai", "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": ", 0);
}

TEST(ToolParsers, HarmonyAfterTheReasoningParser) {
  // gpt-oss as the node runs it: the gpt_oss reasoning parser first (analysis -> reasoning_content), its content
  // into the openai tool parser (commentary to=functions.X -> tool_calls, final -> content), token by token.
  const std::vector<std::string> tokens = {"<|channel|>",
                                           "analysis",
                                           "<|message|>",
                                           "Need",
                                           " weather",
                                           ".",
                                           "<|end|>",
                                           "<|start|>",
                                           "assistant",
                                           "<|channel|>",
                                           "commentary",
                                           " to",
                                           "=",
                                           "functions",
                                           ".get",
                                           "_weather",
                                           " ",
                                           "<|constrain|>",
                                           "json",
                                           "<|message|>",
                                           "{\"",
                                           "city",
                                           "\":\"",
                                           "Paris",
                                           "\",\"days\":",
                                           "3",
                                           "}"};
  ReasoningParser reasoning(ReasoningFormat::kGptOss, "<|start|>assistant");
  auto tools = make("openai");
  std::string thought;
  Assembled a;
  for (const std::string& t : tokens) {
    ReasoningDelta d = reasoning.feed(t);
    thought += d.reasoning;
    absorb(a, tools->feed(d.content));
  }
  ReasoningDelta d = reasoning.finish();
  thought += d.reasoning;
  absorb(a, tools->feed(d.content));
  absorb(a, tools->finish());
  EXPECT_EQ(thought, "Need weather.");
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.completed, 1);
  EXPECT_EQ(a.names[0], "get_weather");
  EXPECT_EQ(Json::parse(a.args[0]), kParis);
}

TEST(ToolParsers, Qwen3ThinksThenCalls) {
  const std::vector<std::string> tokens = {
      "<think>", "\n",    "Need",   " the weather", ".\n",      "</think>", "\n\n",      "<tool_call>", "\n",
      "{\"",     "name",  "\": \"", "get",          "_weather", "\", \"",   "arguments", "\": {\"",     "city",
      "\": \"",  "Paris", "\", \"", "days",         "\": ",     "3",        "}}",        "\n",          "</tool_call>"};
  ReasoningParser reasoning(ReasoningFormat::kQwen3, "<|im_start|>assistant\n");
  auto tools = make("hermes");
  std::string thought;
  Assembled a;
  for (const std::string& t : tokens) {
    ReasoningDelta d = reasoning.feed(t);
    thought += d.reasoning;
    absorb(a, tools->feed(d.content));
  }
  ReasoningDelta d = reasoning.finish();
  absorb(a, tools->feed(d.content));
  absorb(a, tools->finish());
  EXPECT_EQ(thought, "\nNeed the weather.\n");
  EXPECT_EQ(trim(a.content), "");
  ASSERT_EQ(a.completed, 1);
  EXPECT_EQ(Json::parse(a.args[0]), kParis);
}

TEST(ToolParsers, ForcedJson) {
  auto ctx = ToolParserContext::from_tools_json(kTools);
  ASSERT_TRUE(ctx.ok());
  auto named = make_forced_json_parser(*ctx, "add");
  Assembled a;
  absorb(a, named->feed("{\"a\": 1,"));
  ASSERT_EQ(a.names.size(), 1u);  // the name goes out with the first byte
  EXPECT_EQ(a.names[0], "add");
  EXPECT_EQ(a.args[0], "{\"a\": 1,");
  absorb(a, named->feed(" \"b\": 2}"));
  absorb(a, named->finish());
  EXPECT_EQ(a.completed, 1);
  EXPECT_EQ(Json::parse(a.args[0]), Json({{"a", 1}, {"b", 2}}));
  auto required = make_forced_json_parser(*ctx, "");
  ParsedReply r = parse_whole(*required,
                              "[{\"name\": \"add\", \"parameters\": {\"a\": 1}}, {\"name\": "
                              "\"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}]");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "get_weather");
  EXPECT_EQ(Json::parse(r.calls[1].arguments), kParis);
  // Cut by max_tokens: no call, the text as content.
  auto cut = make_forced_json_parser(*ctx, "");
  r = parse_whole(*cut, "[{\"name\": \"add\", \"parameters\": {\"a\"");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "[{\"name\": \"add\", \"parameters\": {\"a\"");
}

// Random replies made of the families' markers, JSON and Python fragments and stray bytes: no parser crashes, and
// feeding a reply whole, byte by byte or in random pieces gives the same content and calls.
TEST(ToolParsers, RandomRepliesGiveTheSameResultHoweverSplit) {
  const std::vector<std::string> frags = {"<tool_call>",
                                          "</tool_call>",
                                          "<function=",
                                          "get_weather",
                                          ">",
                                          "<parameter=",
                                          "city",
                                          "</parameter>",
                                          "</function>",
                                          "[TOOL_CALLS]",
                                          "[ARGS]",
                                          "[CALL_ID]",
                                          "<|python_tag|>",
                                          "<|channel|>",
                                          "commentary",
                                          " to=functions.add",
                                          "<|message|>",
                                          "<|call|>",
                                          "<|end|>",
                                          "<|start|>",
                                          "{",
                                          "}",
                                          "[",
                                          "]",
                                          "(",
                                          ")",
                                          "\"",
                                          "'",
                                          ":",
                                          ",",
                                          "=",
                                          ";",
                                          "\"name\"",
                                          "\"arguments\"",
                                          "\"parameters\"",
                                          "\"add\"",
                                          "1",
                                          "2.5",
                                          "true",
                                          "None",
                                          " ",
                                          "\n",
                                          "\\",
                                          "x",
                                          "é",
                                          "\x01"};
  std::mt19937 rng(42);
  for (const char* name : {"hermes", "qwen3_coder", "llama3_json", "pythonic", "mistral", "openai"}) {
    for (int n = 0; n < 300; ++n) {
      std::string text;
      const int len = 1 + static_cast<int>(rng() % 40);
      for (int k = 0; k < len; ++k) text += frags[rng() % frags.size()];
      auto whole = make(name);
      const ParsedReply w = parse_whole(*whole, text);
      std::vector<std::string> pieces;
      for (size_t at = 0; at < text.size();) {
        const size_t step = 1 + rng() % 5;
        pieces.push_back(text.substr(at, step));
        at += step;
      }
      auto piecewise = make(name);
      std::vector<ToolEvent> events;
      for (const std::string& p : pieces) {
        auto e = piecewise->feed(p);
        events.insert(events.end(), e.begin(), e.end());
      }
      auto e = piecewise->finish();
      events.insert(events.end(), e.begin(), e.end());
      const ParsedReply r = assemble(events);
      ASSERT_EQ(r.content, w.content) << name << ": " << text;
      ASSERT_EQ(r.calls.size(), w.calls.size()) << name << ": " << text;
      for (size_t i = 0; i < r.calls.size(); ++i) {
        EXPECT_EQ(r.calls[i].name, w.calls[i].name);
        EXPECT_EQ(r.calls[i].arguments, w.calls[i].arguments);
        EXPECT_TRUE(Json::parse(r.calls[i].arguments, nullptr, false).is_object()) << r.calls[i].arguments;
      }
    }
  }
}

TEST(ToolParsers, StreamDeltasAreOpenAisShape) {
  auto p = make("hermes");
  std::vector<ToolEvent> events = p->feed("Hi.<tool_call>{\"name\": \"add\", \"arguments\": {\"a\"");
  std::vector<ToolEvent> rest = p->feed(": 1}}</tool_call>");
  events.insert(events.end(), rest.begin(), rest.end());
  const std::vector<nlohmann::json> d = tool_deltas(events);
  ASSERT_GE(d.size(), 3u);
  EXPECT_EQ(d[0], nlohmann::json({{"content", "Hi."}}));
  const auto& first = d[1]["tool_calls"][0];
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "add");
  EXPECT_EQ(first["function"]["arguments"], "");
  EXPECT_TRUE(first["id"].get<std::string>().starts_with("call_"));
  std::string args;
  for (size_t i = 2; i < d.size(); ++i) {
    EXPECT_FALSE(d[i]["tool_calls"][0].contains("id"));
    EXPECT_FALSE(d[i]["tool_calls"][0]["function"].contains("name"));
    args += d[i]["tool_calls"][0]["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(args, "{\"a\": 1}");
}

TEST(ToolParsers, DetectedFromTemplatesAndChosenByName) {
  EXPECT_EQ(*choose_tool_parser("", "<tool_call>{\"name\": <function-name>, \"arguments\": <args>}</tool_call>"),
            "hermes");
  EXPECT_EQ(*choose_tool_parser("", "<tool_call>{function-name}<arg_key>k</arg_key>\"arguments\""), "none");  // GLM
  EXPECT_EQ(*choose_tool_parser("", "<tool_call>\\n<function=x>\\n<parameter=y>"), "qwen3_coder");
  EXPECT_EQ(*choose_tool_parser("", "[TOOL_CALLS]"), "mistral");
  EXPECT_EQ(*choose_tool_parser("", "<|start|>assistant<|channel|>final<|message|>"), "openai");
  EXPECT_EQ(*choose_tool_parser("", "<|start_header_id|>{\"name\": function name, \"parameters\": ...}"),
            "llama3_json");
  EXPECT_EQ(*choose_tool_parser("", "<|start_header_id|> [func_name1(params_name1=params_value1)]"), "pythonic");
  EXPECT_EQ(*choose_tool_parser("", "{{ messages }}"), "none");
  EXPECT_EQ(*choose_tool_parser("pythonic", "<tool_call>"), "pythonic");
  EXPECT_EQ(*choose_tool_parser("none", "<tool_call>"), "none");
  auto bad = choose_tool_parser("hermes2", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("qwen3_coder"), std::string::npos) << bad.status().message();
}

TEST(ToolParsers, JsonScannerAcceptsJsonAndRefusesTheRest) {
  for (const char* good : {"{}", "[]", " {\"a\": [1, -2.5e+3, true, false, null, \"x\\u00e9\\n\"]}", "[{}, [], \"\"]",
                           "{\"a\":{\"b\":{\"c\":0.0}}}"}) {
    JsonScanner s;
    JsonScanner::Step last = JsonScanner::Step::kMore;
    for (const char* c = good; *c; ++c) last = s.feed(*c);
    EXPECT_EQ(last, JsonScanner::Step::kDone) << good;
  }
  for (const char* bad : {"{,}", "[1,]", "{\"a\" 1}", "{\"a\": 01}", "{\"a\": tru }", "[1 2]", "{\"a\": \"\\x\"}",
                          "{\"a\": -}", "5", "{} x", "{\"a\": .5}", "{'a': 1}"}) {
    JsonScanner s;
    JsonScanner::Step last = JsonScanner::Step::kMore;
    for (const char* c = bad; *c && last != JsonScanner::Step::kError; ++c) last = s.feed(*c);
    EXPECT_EQ(last, JsonScanner::Step::kError) << bad;
  }
}

TEST(ToolParsers, PythonLiteralsBecomeJson) {
  const std::pair<const char*, const char*> cases[] = {
      {"'a\\tb'", "\"a\\tb\""}, {"(1, 2,)", "[1, 2]"}, {"{'k': [True, None]}", "{\"k\": [true, null]}"},
      {"1_000", "1000"},        {"-.5e3", "-0.5e3"},   {"\"\\x41\\u00e9\"", "\"\\u0041\\u00e9\""}};
  for (const auto& [py, json] : cases) {
    PyLiteral lit;
    std::string out;
    for (const char* c = py; *c; ++c) ASSERT_EQ(lit.feed(*c, out), PyLiteral::Step::kMore) << py;
    ASSERT_TRUE(lit.finish(out)) << py;
    EXPECT_EQ(out, json);
    EXPECT_EQ(Json::parse(out), Json::parse(json));
  }
  for (const char* bad : {"{1: 2}", "[1, 2", "'abc", "foo", "0x10", "{'a' 1}"}) {
    PyLiteral lit;
    std::string out;
    bool error = false;
    for (const char* c = bad; *c && !error; ++c) error = lit.feed(*c, out) != PyLiteral::Step::kMore;
    EXPECT_TRUE(error || !lit.finish(out)) << bad;
  }
}

}  // namespace
}  // namespace tessera::serve
