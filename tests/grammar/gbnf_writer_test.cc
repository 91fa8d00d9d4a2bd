// Syntax trees written back as GBNF (grammar/gbnf_writer.h) are the same language: JSON schemas' grammars and
// their GBNF twins accept and refuse the same documents; trees merged under a prefix keep working; text_without()
// matches exactly the texts in which none of its words occurs.
#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar/gbnf_writer.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/stack.h"

namespace tessera::grammar {
namespace {

Grammar build(const Ast& ast) {
  auto g = build_grammar(ast);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(*g) : Grammar{};
}

Grammar reparsed(const Ast& ast) {
  const std::string text = write_gbnf(ast);
  auto back = parse_gbnf(text);
  EXPECT_TRUE(back.ok()) << back.status().to_string() << "\n" << text;
  return back.ok() ? build(*back) : Grammar{};
}

TEST(GbnfWriter, JsonSchemaGrammarsReadBackAsTheSameLanguage) {
  const std::pair<const char*, std::vector<std::pair<const char*, bool>>> cases[] = {
      {R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 5},
          "unit": {"enum": ["°C", "日本", "a\"b", "x-y]"]}, "n": {"type": "integer", "minimum": -3, "maximum": 40}},
          "required": ["city"], "additionalProperties": false})",
       {{R"({"city": "Paris"})", true},
        {R"({"city": "Paris", "unit": "°C", "n": 39})", true},
        {R"({"city":"Lyon","unit":"日本"})", true},
        {R"({"city": "a", "unit": "a\"b"})", true},
        {R"({"city": "a", "unit": "x-y]"})", true},
        {R"({"city": "Parisian"})", false},
        {R"({"unit": "°C"})", false},
        {R"({"city": "a", "n": 41})", false},
        {R"({"city": "a", "unit": "F"})", false}}},
      {R"({"type": "array", "items": {"anyOf": [{"type": "boolean"}, {"type": "null"},
          {"$ref": "#/$defs/p"}]}, "minItems": 1, "maxItems": 3,
          "$defs": {"p": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}})",
       {{"[true]", true},
        {R"([null, {"x": 1.5}, false])", true},
        {"[]", false},
        {"[1]", false},
        {"[true, true, true, true]", false},
        {R"([{"x": "1"}])", false}}},
      {R"({"type": "string", "pattern": "^[a-z]{2}\\d+$"})", {{R"("ab12")", true}, {R"("a12")", false}}},
  };
  for (const auto& [schema, docs] : cases) {
    auto ast = json_schema_grammar(schema);
    ASSERT_TRUE(ast.ok()) << ast.status().to_string();
    const Grammar a = build(*ast), b = reparsed(*ast);
    for (const auto& [doc, valid] : docs) {
      EXPECT_EQ(accepts(a, doc), valid) << schema << "\n" << doc;
      EXPECT_EQ(accepts(b, doc), valid) << write_gbnf(*ast) << "\n" << doc;
    }
  }
}

TEST(GbnfWriter, MergedTreesAndTextWithoutWords) {
  auto args = json_schema_grammar(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  ASSERT_TRUE(args.ok());
  Ast ast;
  const std::vector<std::string> words = {"</parameter>", "<parameter=", "</function>"};
  ast.add("root", Expr::alt({Expr::seq({Expr::lit("<call>"), Expr::ref("x"), Expr::lit("</call>")}),
                             Expr::seq({Expr::lit("<text>\n"), Expr::ref("t"), Expr::lit("\n</parameter>")})}));
  const std::string x = merge_ast(ast, *args, "tool-0");
  ast.add("x", Expr::ref(x));
  ast.add("t", text_without(words));
  const Grammar g = reparsed(ast);
  EXPECT_TRUE(accepts(g, R"(<call>{"a": 1}</call>)"));
  EXPECT_FALSE(accepts(g, R"(<call>{"a": "1"}</call>)"));
  for (const char* ok : {"", "plain", "a < b", "<p>html</p>", "</para", "</parametersss", "<param", "x\n<\n<",
                         "</functio>", "é<日本>"}) {
    EXPECT_TRUE(accepts(g, std::string("<text>\n") + ok + "\n</parameter>")) << ok;
  }
  for (const char* bad : {"</parameter>", "a</parameter>b", "x<parameter=y", "</function>", "<</function>"}) {
    EXPECT_FALSE(accepts(g, std::string("<text>\n") + bad + "\n</parameter>")) << bad;
  }
  // Not empty when asked.
  Ast one;
  one.add("root", text_without(words, false));
  const Grammar o = build(one);
  EXPECT_FALSE(accepts(o, ""));
  EXPECT_TRUE(accepts(o, "<"));
  EXPECT_TRUE(accepts(o, "a"));
}

}  // namespace
}  // namespace tessera::grammar
