// The grammar front ends and the byte-level recognizer: llama.cpp's own GBNF files parse and accept what their
// grammars describe; regular expressions, JSON schemas and choice lists accept and reject as their definitions
// say; errors name where the input is wrong; UTF-8 classes match exactly the encodings of their code points.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "grammar/compiler.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/stack.h"
#include "grammar/utf8_ranges.h"
#include "support/paths.h"

namespace tessera::grammar {
namespace {
namespace fs = std::filesystem;

std::string grammars_dir() {
  const std::string vocab = testing::llamacpp_vocab_dir();
  if (vocab.empty()) return "";
  fs::path p = fs::path(vocab).parent_path() / "grammars";
  return fs::exists(p) ? p.string() : "";
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Grammar gbnf(std::string_view text) {
  auto ast = parse_gbnf(text);
  EXPECT_TRUE(ast.ok()) << ast.status().to_string();
  if (!ast.ok()) return {};
  auto g = build_grammar(*ast);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(*g) : Grammar{};
}

Grammar from_spec(SpecKind kind, std::string text) {
  auto g = build_spec({kind, std::move(text), ""});
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? **g : Grammar{};
}

Status spec_error(SpecKind kind, std::string text) {
  auto g = build_spec({kind, std::move(text), ""});
  return g.ok() ? ok_status() : g.status();
}

TEST(Gbnf, LlamaCppGrammarFilesParse) {
  const std::string dir = grammars_dir();
  if (dir.empty())
    GTEST_SKIP() << "llama.cpp's grammars/ folder not found next to " << testing::llamacpp_vocab_candidates();
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".gbnf") continue;
    auto ast = parse_gbnf(read_text(e.path()));
    ASSERT_TRUE(ast.ok()) << e.path() << ": " << ast.status().to_string();
    auto g = build_grammar(*ast);
    ASSERT_TRUE(g.ok()) << e.path() << ": " << g.status().to_string();
    ++n;
  }
  EXPECT_GE(n, 8);
}

TEST(Gbnf, LlamaCppJsonGrammarAcceptsJsonAndRejectsTheRest) {
  const std::string dir = grammars_dir();
  if (dir.empty()) GTEST_SKIP() << "llama.cpp's grammars/ folder not found";
  Grammar g = gbnf(read_text(fs::path(dir) / "json.gbnf"));
  for (const char* ok : {R"({})", R"({"a": 1})", R"({"a": [1, 2.5e3, "x\n\u00e9"], "b": {"c": null}})",
                         "{\"k\": \"caf\xC3\xA9 \xF0\x9F\x98\x80\"}", R"({"a":true,"b":false})"}) {
    EXPECT_TRUE(accepts(g, ok)) << ok;
  }
  for (const char* bad : {R"([])", R"({"a" 1})", R"({"a": 01x})", R"({"a": "unterminated})", R"({'a': 1})",
                          "{\"a\": \"\x01\"}", R"({"a": 1,})", R"({"a": tru})"}) {
    EXPECT_FALSE(accepts(g, bad)) << bad;
  }
}

TEST(Gbnf, LlamaCppArithmeticChessAndListGrammars) {
  const std::string dir = grammars_dir();
  if (dir.empty()) GTEST_SKIP() << "llama.cpp's grammars/ folder not found";
  Grammar list = gbnf(read_text(fs::path(dir) / "list.gbnf"));
  EXPECT_TRUE(accepts(list, "- one\n- two\n"));
  EXPECT_FALSE(accepts(list, "one\n"));
  Grammar chess = gbnf(read_text(fs::path(dir) / "chess.gbnf"));
  EXPECT_TRUE(accepts(chess, "1. e4 e5\n2. Nf3 Nc6\n"));
  EXPECT_FALSE(accepts(chess, "1. e4 e5\n"));  // at least one more numbered move
  Grammar arith = gbnf(read_text(fs::path(dir) / "arithmetic.gbnf"));
  EXPECT_TRUE(accepts(arith, "(1+2)*3=9\n") || accepts(arith, "1+2=3\n"));
  Grammar c = gbnf(read_text(fs::path(dir) / "c.gbnf"));
  EXPECT_TRUE(accepts(c, "int main(){return 0;}"));
  EXPECT_FALSE(accepts(c, "int main({}"));
}

TEST(Gbnf, Syntax) {
  Grammar g = gbnf(R"(
# comment
root ::= greeting ("," ws name)? "!"   # trailing comment
greeting ::= "hi" | "hello"
name ::= [A-Z] [a-z]{1,3}
ws ::= [ \t]*
)");
  EXPECT_TRUE(accepts(g, "hi!"));
  EXPECT_TRUE(accepts(g, "hello,  Bob!"));
  EXPECT_TRUE(accepts(g, "hi,Anna!"));
  EXPECT_FALSE(accepts(g, "hi,Annabel!"));
  EXPECT_FALSE(accepts(g, "hi, bob!"));
  Grammar any = gbnf("root ::= . . \"\\u00e9\" [^a-z\\x00]+");
  EXPECT_TRUE(accepts(any,
                      "\xE2\x82\xAC"
                      "a\xC3\xA9"
                      "A\xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(any,
                       "ab\xC3\xA9"
                       "a"));
  EXPECT_FALSE(accepts(any, "ab\xC3\xA9"));
  Grammar rep = gbnf("root ::= (\"ab\"){2} \"c\"{0,2} \"d\"{1,}");
  EXPECT_TRUE(accepts(rep, "ababd"));
  EXPECT_TRUE(accepts(rep, "ababccddd"));
  EXPECT_FALSE(accepts(rep, "abd"));
  EXPECT_FALSE(accepts(rep, "ababcccd"));
}

TEST(Gbnf, ErrorsNameTheLineAndColumn) {
  auto e1 = parse_gbnf("root ::= \"a\"\nfoo ::= (\"b\"\n");
  ASSERT_FALSE(e1.ok());
  EXPECT_NE(e1.status().message().find("expecting ')'"), std::string::npos) << e1.status().message();
  auto e2 = parse_gbnf("root ::= \"a\" \"b\" ]");
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.status().message().find("line 1 column 18"), std::string::npos) << e2.status().message();
  auto e3 = build_grammar(*parse_gbnf("root ::= x\nx ::= y\n"));
  ASSERT_FALSE(e3.ok());
  EXPECT_NE(e3.status().message().find("undefined rule 'y' (line 2 column 7)"), std::string::npos)
      << e3.status().message();
  auto e4 = build_grammar(*parse_gbnf("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n"));
  ASSERT_FALSE(e4.ok());
  EXPECT_NE(e4.status().message().find("left recursion"), std::string::npos) << e4.status().message();
  auto e5 = build_grammar(*parse_gbnf("root ::= \"a\" root\n"));
  ASSERT_FALSE(e5.ok());
  EXPECT_NE(e5.status().message().find("never finish"), std::string::npos) << e5.status().message();
  auto e6 = parse_gbnf("root ::= <think> \"x\"");
  ASSERT_FALSE(e6.ok());
  EXPECT_NE(e6.status().message().find("token terminals"), std::string::npos);
  EXPECT_FALSE(parse_gbnf("").ok());
  EXPECT_FALSE(parse_gbnf("root ::= \"a\"{3,1}").ok() && build_grammar(*parse_gbnf("root ::= \"a\"{3,1}")).ok());
  EXPECT_FALSE(build_grammar(*parse_gbnf("root ::= [^\\x00-\\U0010FFFF]")).ok());
}

TEST(Utf8Ranges, EveryCodePointOfAClassAndNothingElse) {
  // [U+0041-U+0042], U+00E9, [U+07FF-U+0801], [U+FFF0-U+10010], U+10FFFF: each member's encoding matches,
  // its neighbours' do not; surrogates never.
  Ast ast;
  ast.add("root", Expr::cls({{0x41, 0x42}, {0xE9, 0xE9}, {0x7FF, 0x801}, {0xFFF0, 0x10010}, {0x10FFFF, 0x10FFFF}}));
  auto g = build_grammar(ast);
  ASSERT_TRUE(g.ok());
  auto in = [](uint32_t cp) {
    return (cp >= 0x41 && cp <= 0x42) || cp == 0xE9 || (cp >= 0x7FF && cp <= 0x801) ||
           (cp >= 0xFFF0 && cp <= 0x10010) || cp == 0x10FFFF;
  };
  for (uint32_t cp = 0; cp <= kMaxCodePoint; cp += (cp < 0x12000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    append_utf8(cp, s);
    ASSERT_EQ(accepts(*g, s), in(cp)) << std::hex << cp;
  }
  // A negated class takes every scalar value but its members, and no malformed bytes.
  Ast neg;
  neg.add("root", Expr::cls({{'a', 'a'}}, true));
  auto n = build_grammar(neg);
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(accepts(*n, "a"));
  EXPECT_TRUE(accepts(*n, "b"));
  EXPECT_TRUE(accepts(*n, "\xED\x9F\xBF"));       // U+D7FF
  EXPECT_FALSE(accepts(*n, "\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(accepts(*n, "\xC0\x80"));          // overlong
  EXPECT_FALSE(accepts(*n, "\xF4\x90\x80\x80"));  // beyond U+10FFFF
  EXPECT_FALSE(accepts(*n, "\x80"));
}

TEST(Regex, AcceptsWhatItDescribes) {
  Grammar g = from_spec(SpecKind::kRegex, R"(^(?:\+?1[-. ])?\(?\d{3}\)?[-. ]?\d{3}[-. ]?\d{4}$)");
  EXPECT_TRUE(accepts(g, "+1 (555) 123-4567"));
  EXPECT_TRUE(accepts(g, "5551234567"));
  EXPECT_FALSE(accepts(g, "555-1234"));
  Grammar w = from_spec(SpecKind::kRegex, R"([\w.-]+@[a-z]+\.(com|org)|N/A)");
  EXPECT_TRUE(accepts(w, "a.b-c@example.org"));
  EXPECT_TRUE(accepts(w, "N/A"));
  EXPECT_FALSE(accepts(w, "a@b.net"));
  Grammar dot = from_spec(SpecKind::kRegex, "a.c[^\\n]*?x{2,}?");
  EXPECT_TRUE(accepts(dot,
                      "a\xC3\xA9"
                      "cqqxx"));
  EXPECT_FALSE(accepts(dot, "a\nc"));
  Grammar esc = from_spec(SpecKind::kRegex, R"([\d\s][^\W_]\u00e9\x41\.\{)");
  EXPECT_TRUE(accepts(esc,
                      "1z\xC3\xA9"
                      "A.{"));
  EXPECT_FALSE(accepts(esc,
                       "1_\xC3\xA9"
                       "A.{"));
  Grammar brace = from_spec(SpecKind::kRegex, "a{,3}");  // not a quantifier: literal text
  EXPECT_TRUE(accepts(brace, "a{,3}"));
}

TEST(Regex, RefusesWhatItCannotMatchWithTheColumn) {
  for (const char* bad : {R"((a)\1)", "(?=a)b", "a\\bc", "a^b", "(?i)abc", "a++", "[a-", "(ab", "ab)", "*a", "a**"}) {
    Status s = spec_error(SpecKind::kRegex, bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("column"), std::string::npos) << s.message();
  }
}

TEST(Choice, ExactlyOneOfTheChoices) {
  Grammar g = from_spec(SpecKind::kChoice, R"(["yes", "no", "yes, but"])");
  EXPECT_TRUE(accepts(g, "yes"));
  EXPECT_TRUE(accepts(g, "yes, but"));
  EXPECT_FALSE(accepts(g, "yes,"));
  EXPECT_FALSE(accepts(g, "maybe"));
  EXPECT_FALSE(spec_error(SpecKind::kChoice, "[]").ok());
  EXPECT_FALSE(spec_error(SpecKind::kChoice, "[1]").ok());
}

TEST(JsonSchema, ObjectsPropertiesRequiredAndExtras) {
  Grammar g = from_spec(SpecKind::kJsonSchema, R"({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name"], "additionalProperties": false})");
  EXPECT_TRUE(accepts(g, R"({"name": "x"})"));
  EXPECT_TRUE(accepts(g, R"({"name":"x","age":-3,"tags":[]})"));
  EXPECT_TRUE(accepts(g, "{\n  \"name\": \"x\",\n  \"tags\": [\"a\", \"b\"]\n}"));
  EXPECT_FALSE(accepts(g, R"({"age": 3})"));               // name is required
  EXPECT_FALSE(accepts(g, R"({"age": 3, "name": "x"})"));  // the schema's order
  EXPECT_FALSE(accepts(g, R"({"name": "x", "other": 1})"));
  EXPECT_FALSE(accepts(g, R"({"name": "x", "age": 1.5})"));
  EXPECT_FALSE(accepts(g, R"({"name": "x",})"));
  Grammar extra = from_spec(SpecKind::kJsonSchema, R"({"type": "object", "properties": {"a": {"type": "integer"}},
    "required": ["a"], "additionalProperties": {"type": "boolean"}})");
  EXPECT_TRUE(accepts(extra, R"({"a": 1, "b": true, "ab": false})"));
  EXPECT_FALSE(accepts(extra, R"({"a": 1, "a": true})"));  // a listed name is not an extra
  EXPECT_FALSE(accepts(extra, R"({"a": 1, "b": 2})"));
  Grammar any = from_spec(SpecKind::kJsonSchema, R"({"type": "object"})");
  EXPECT_TRUE(accepts(any, R"({"x": [1, {"y": null}]})"));
  Grammar all_optional =
      from_spec(SpecKind::kJsonSchema, R"({"properties": {"a": {"const": 1}, "b": {"const": 2}, "c": {"const": 3}}})");
  for (const char* ok : {"{}", R"({"b": 2})", R"({"a": 1, "c": 3})", R"({"a":1,"b":2,"c":3})"})
    EXPECT_TRUE(accepts(all_optional, ok)) << ok;
  EXPECT_FALSE(accepts(all_optional, R"({"a": 1 "b": 2})"));
}

TEST(JsonSchema, ScalarsFormatsPatternsAndRanges) {
  Grammar g = from_spec(SpecKind::kJsonSchema, R"({"type": "array", "prefixItems": [
      {"type": "string", "format": "date"}, {"type": "string", "format": "uuid"},
      {"type": "string", "pattern": "^[A-Z]{2}\"-\\d+$"}, {"type": "integer", "minimum": -12, "maximum": 345},
      {"type": "number", "exclusiveMinimum": 0, "maximum": 2.5}, {"enum": ["a", 1, null, [true]]},
      {"type": "string", "minLength": 2, "maxLength": 3}, {"type": ["boolean", "null"]}], "items": false})");
  const std::string good =
      R"(["2024-02-28", "123e4567-e89b-12d3-a456-426614174000", "AB\"-42", 345, 1.25, [true], "\u00e9t\n", null])";
  EXPECT_TRUE(accepts(g, good));
  auto with = [&](int index, const std::string& value) {
    std::vector<std::string> parts = {R"("2024-02-28")",
                                      R"("123e4567-e89b-12d3-a456-426614174000")",
                                      R"("AB\"-42")",
                                      "345",
                                      "1.25",
                                      "[true]",
                                      R"("\u00e9t\n")",
                                      "null"};
    parts[static_cast<size_t>(index)] = value;
    std::string s = "[";
    for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
    return s + "]";
  };
  EXPECT_FALSE(accepts(g, with(0, R"("2024-02-30")")));
  EXPECT_FALSE(accepts(g, with(1, R"("123e4567e89b12d3a456426614174000")")));
  EXPECT_FALSE(accepts(g, with(2, R"("AB-42")")));
  EXPECT_FALSE(accepts(g, with(3, "346")));
  EXPECT_FALSE(accepts(g, with(3, "-13")));
  EXPECT_TRUE(accepts(g, with(3, "-12")));
  EXPECT_TRUE(accepts(g, with(3, "0")));
  EXPECT_FALSE(accepts(g, with(3, "007")));
  EXPECT_FALSE(accepts(g, with(4, "0")));
  EXPECT_FALSE(accepts(g, with(4, "0.0")));  // exclusiveMinimum 0: the decimals generated start at 1
  EXPECT_TRUE(accepts(g, with(4, "2")));
  EXPECT_TRUE(accepts(g, with(4, "1.999")));
  EXPECT_FALSE(accepts(g, with(4, "2.6")));
  EXPECT_FALSE(accepts(g, with(4, "2.5")));  // within the bounds, but decimals stop below floor(max)
  EXPECT_FALSE(accepts(g, with(4, "-0.5")));
  EXPECT_TRUE(accepts(g, with(5, R"("a")")));
  EXPECT_FALSE(accepts(g, with(5, R"("b")")));
  EXPECT_FALSE(accepts(g, with(6, R"("abcd")")));
  EXPECT_FALSE(accepts(g, with(6, R"("a")")));
  EXPECT_FALSE(accepts(g, with(6, R"("\ud83d\ude00x")")));             // surrogate escapes are not generated
  EXPECT_FALSE(accepts(g, good.substr(0, good.size() - 1) + ", 1]"));  // items: false
}

TEST(JsonSchema, RefsDefsAnyOfAndRecursion) {
  Grammar g = from_spec(SpecKind::kJsonSchema, R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["v", "kids"], "additionalProperties": false}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"type": "string", "enum": ["leaf"]}]})");
  EXPECT_TRUE(accepts(g, R"("leaf")"));
  EXPECT_TRUE(accepts(g, R"({"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
  EXPECT_FALSE(accepts(g, R"({"v": 1, "kids": ["leaf"]})"));
  EXPECT_FALSE(accepts(g, R"("tree")"));
}

TEST(JsonSchema, ErrorsNameThePointer) {
  struct Case {
    const char* schema;
    const char* expect;
  } cases[] = {
      {R"({"type": "object", "properties": {"a": {"type": "strng"}}})", "#/properties/a/type"},
      {R"({"type": "array", "items": {"type": "integer", "multipleOf": 3}})", "#/items"},
      {R"({"$ref": "#/$defs/missing"})", "does not resolve"},
      {R"({"type": "string", "pattern": "(a"})", "#/pattern"},
      {R"({"type": "integer", "minimum": 5, "maximum": 4})", "no integer"},
      {R"({"type": "string", "minLength": 4, "maxLength": 2})", "maxLength is below minLength"},
      {R"({"properties": {"x": false}})", "#/properties/x"},
      {R"({"type": "object", "fooBar": 1})", "unknown keyword 'fooBar'"},
      {R"({"type": "object")", "not valid JSON"},
  };
  for (const Case& c : cases) {
    Status s = spec_error(SpecKind::kJsonSchema, c.schema);
    EXPECT_FALSE(s.ok()) << c.schema;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.schema << " -> " << s.message();
  }
}

TEST(JsonObject, AnyObjectOnly) {
  Grammar g = from_spec(SpecKind::kJsonObject, "");
  EXPECT_TRUE(accepts(g, R"({"a": [1, "b", {"c": false}], "d": -0.5e-3})"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, "\"x\""));
}

}  // namespace
}  // namespace tessera::grammar
