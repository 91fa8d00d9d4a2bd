// Structured-output requests on the wire (api/structured_output.h): every dialect (OpenAI response_format, vLLM's
// structured_outputs and guided_*, llama-server's json_schema and grammar) lands on one spec, in the schema's own
// key order; wrong shapes and two requests at once are 400s naming the field; the prefill call carries the spec.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/openai.h"
#include "api/pd_messages.h"
#include "api/structured_output.h"

namespace tessera::api {
namespace {

using Kind = StructuredOutput::Kind;

StructuredOutput parsed(const std::string& extra, bool chat = true) {
  const std::string head =
      chat ? R"({"model":"m","messages":[{"role":"user","content":"x"}],)" : R"({"model":"m","prompt":"x",)";
  auto r = parse_request(head + extra + "}", chat);
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << extra << " -> " << e->message;
    return {};
  }
  return std::get<ApiRequest>(r).generation.structured;
}

ApiError refused(const std::string& extra, bool chat = true) {
  const std::string head =
      chat ? R"({"model":"m","messages":[{"role":"user","content":"x"}],)" : R"({"model":"m","prompt":"x",)";
  auto r = parse_request(head + extra + "}", chat);
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << extra << " was accepted";
  return {};
}

TEST(StructuredOutput, EveryDialectLandsOnOneSpec) {
  for (bool chat : {true, false}) {
    auto s = parsed(R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,
                      "schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}}})",
                    chat);
    EXPECT_EQ(s.kind, Kind::kJsonSchema);
    EXPECT_EQ(s.field, "response_format");
    EXPECT_LT(s.spec.find("\"z\""), s.spec.find("\"a\"")) << "the schema's key order is kept: " << s.spec;
    EXPECT_EQ(parsed(R"("response_format":{"type":"json_object"})", chat).kind, Kind::kJsonObject);
    EXPECT_EQ(parsed(R"("response_format":{"type":"json_object","schema":{"type":"array"}})", chat).kind,
              Kind::kJsonSchema);
    EXPECT_EQ(parsed(R"("response_format":{"type":"text"})", chat).kind, Kind::kNone);
    EXPECT_EQ(parsed(R"("guided_json":{"type":"object"})", chat).kind, Kind::kJsonSchema);
    EXPECT_EQ(parsed(R"("guided_json":"{\"type\":\"object\"}")", chat).spec, R"({"type":"object"})");
    auto re = parsed(R"("guided_regex":"\\d+","guided_decoding_backend":"xgrammar")", chat);
    EXPECT_EQ(re.kind, Kind::kRegex);
    EXPECT_EQ(re.spec, "\\d+");
    auto ch = parsed(R"("guided_choice":["a","b c"])", chat);
    EXPECT_EQ(ch.kind, Kind::kChoice);
    EXPECT_EQ(ch.spec, R"(["a","b c"])");
    EXPECT_EQ(parsed(R"("guided_grammar":"root ::= \"x\"")", chat).kind, Kind::kGrammar);
    auto ws = parsed(R"("guided_json":{"type":"object"},"guided_whitespace_pattern":"[ ]?")", chat);
    EXPECT_EQ(ws.whitespace, "[ ]?");
    EXPECT_EQ(parsed(R"("structured_outputs":{"json":{"type":"string"}})", chat).kind, Kind::kJsonSchema);
    EXPECT_EQ(parsed(R"("structured_outputs":{"regex":"a+"})", chat).kind, Kind::kRegex);
    EXPECT_EQ(parsed(R"("structured_outputs":{"choice":["x"]})", chat).kind, Kind::kChoice);
    EXPECT_EQ(parsed(R"("structured_outputs":{"grammar":"root ::= \"x\""})", chat).kind, Kind::kGrammar);
    auto compact = parsed(R"("structured_outputs":{"json_object":true,"disable_any_whitespace":true})", chat);
    EXPECT_EQ(compact.kind, Kind::kJsonObject);
    EXPECT_EQ(compact.whitespace, "(?:)");
    EXPECT_EQ(parsed(R"("json_schema":{"type":"object"})", chat).kind, Kind::kJsonSchema);
    EXPECT_EQ(parsed(R"("grammar":"root ::= \"x\"")", chat).kind, Kind::kGrammar);
    EXPECT_EQ(parsed(R"("grammar":"")", chat).kind, Kind::kNone);
  }
}

TEST(StructuredOutput, WrongShapesAndConflictsAre400sNamingTheField) {
  struct Case {
    const char* extra;
    const char* param;
  } cases[] = {
      {R"("response_format":{"type":"xml"})", "response_format"},
      {R"("response_format":{"type":"json_schema"})", "response_format"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":[1]}})", "response_format"},
      {R"("response_format":"json")", "response_format"},
      {R"("guided_json":[1])", "guided_json"},
      {R"("guided_json":"{not json")", "guided_json"},
      {R"("guided_regex":5)", "guided_regex"},
      {R"("guided_choice":[])", "guided_choice"},
      {R"("guided_choice":["a",1])", "guided_choice"},
      {R"("guided_grammar":{})", "guided_grammar"},
      {R"("structured_outputs":{"structural_tag":"x"})", "structured_outputs"},
      {R"("structured_outputs":{"regx":"a"})", "structured_outputs"},
      {R"("json_schema":"yes")", "json_schema"},
      {R"("grammar":7)", "grammar"},
      {R"("response_format":{"type":"json_object"},"guided_regex":"a")", "guided_regex"},
      {R"("json_schema":{},"grammar":"root ::= \"a\"")", "grammar"},
      {R"("guided_regex":"a","guided_whitespace_pattern":" ")", "guided_whitespace_pattern"},
  };
  for (const Case& c : cases) {
    ApiError e = refused(c.extra);
    EXPECT_EQ(e.status, 400) << c.extra;
    EXPECT_EQ(e.param, c.param) << c.extra << " -> " << e.message;
  }
}

TEST(StructuredOutput, ThePrefillCallCarriesTheSpec) {
  PrefillCall c;
  c.prompt = {1, 2, 3};
  c.structured = {Kind::kJsonSchema, R"({"type":"object"})", "[ ]*", "response_format"};
  auto back = parse_prefill_call(prefill_call_body(c), 32, 100);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->structured.kind, Kind::kJsonSchema);
  EXPECT_EQ(back->structured.spec, c.structured.spec);
  EXPECT_EQ(back->structured.whitespace, "[ ]*");
  PrefillCall none;
  none.prompt = {1};
  auto plain = parse_prefill_call(prefill_call_body(none), 32, 100);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->structured.none());
  // A peer's body is untrusted: an unknown kind is refused.
  nlohmann::json bad = nlohmann::json::parse(prefill_call_body(c));
  bad["structured"]["kind"] = "xml";
  EXPECT_FALSE(parse_prefill_call(bad.dump(), 32, 100).ok());
}

}  // namespace
}  // namespace tessera::api
