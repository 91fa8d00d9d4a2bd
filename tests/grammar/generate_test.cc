// The generator test: seeded JSON schemas of our own making (nested objects, arrays, enums, anyOf/oneOf,
// $ref/$defs with recursion, formats, patterns, bounds), regular expressions and GBNF grammars, each walked to
// completion by choosing random tokens among those the mask allows (late in a walk, closing tokens first so that
// every walk ends); every output is then checked by references nobody here wrote (tests/grammar/validate.mjs:
// ajv with ajv-formats, JSON.parse, the JavaScript RegExp engine). A few deliberately broken outputs go along
// and must be rejected, so the checker is shown able to fail.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "model/tokenizer/load_tokenizer.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera::grammar {
namespace {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using Rng = std::mt19937_64;

int uniform(Rng& rng, int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1)); }
bool chance(Rng& rng, int percent) { return uniform(rng, 1, 100) <= percent; }
template <typename T>
const T& pick(Rng& rng, const std::vector<T>& v) {
  return v[rng() % v.size()];
}

// ---- schemas ----

class SchemaGen {
 public:
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}

  ojson make() {
    ojson root = ojson::object();
    defs_ = ojson::object();
    if (chance(rng_, 40)) {
      // Definitions, one of them maybe recursive.
      const int n = uniform(rng_, 1, 2);
      for (int i = 0; i < n; ++i) defs_[fmt::format("d{}", i)] = scalar_or_small(2);
      if (chance(rng_, 50)) {
        defs_["node"] = {{"type", "object"},
                         {"properties",
                          {{"value", {{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}},
                           {"children", {{"type", "array"}, {"items", {{"$ref", "#/$defs/node"}}}, {"maxItems", 2}}}}},
                         {"required", {"value"}},
                         {"additionalProperties", false}};
      }
    }
    ojson body = object(3);
    for (auto it = body.begin(); it != body.end(); ++it) root[it.key()] = it.value();
    if (!defs_.empty()) root["$defs"] = defs_;
    return root;
  }

 private:
  ojson object(int depth) {
    ojson s = {{"type", "object"}};
    ojson props = ojson::object();
    ojson required = ojson::array();
    const int n = uniform(rng_, 1, 4);
    for (int i = 0; i < n; ++i) {
      std::string name = pick(rng_, std::vector<std::string>{"id", "name", "value", "items", "kind", "when", "a b",
                                                             "caf\xC3\xA9", "x\"y", "count", "tags", "ok"});
      name += std::to_string(i);
      props[name] = any(depth - 1);
      if (chance(rng_, 60)) required.push_back(name);
    }
    s["properties"] = props;
    if (!required.empty()) s["required"] = required;
    const int extra = uniform(rng_, 1, 10);
    if (extra <= 7) {
      s["additionalProperties"] = false;
    } else if (extra == 8) {
      s["additionalProperties"] = {{"type", "integer"}};
    } else if (extra == 9) {
      s["additionalProperties"] = true;
    }  // 10: absent (only the listed properties are generated)
    return s;
  }

  ojson array(int depth) {
    ojson s = {{"type", "array"}, {"items", any(depth - 1)}};
    const int min = uniform(rng_, 0, 2);
    if (min > 0 || chance(rng_, 50)) s["minItems"] = min;
    if (chance(rng_, 70)) s["maxItems"] = min + uniform(rng_, 0, 3);
    if (chance(rng_, 15)) {
      s["prefixItems"] = ojson::array({scalar(), scalar()});
      if (s.contains("maxItems") && s["maxItems"].get<int>() < 2) s["maxItems"] = 2;
    }
    return s;
  }

  ojson string_schema() {
    ojson s = {{"type", "string"}};
    switch (uniform(rng_, 0, 5)) {
      case 0:
        break;  // any string
      case 1:
        s["maxLength"] = uniform(rng_, 0, 12);
        if (chance(rng_, 50)) s["minLength"] = uniform(rng_, 0, s["maxLength"].get<int>());
        break;
      case 2:
        s["format"] = pick(rng_, std::vector<std::string>{"date", "time", "date-time", "uuid", "email", "ipv4",
                                                          "hostname", "uri", "duration", "ipv6"});
        break;
      case 3:
        s["pattern"] =
            pick(rng_, std::vector<std::string>{"^[A-Z]{2,3}-\\d{2,5}$", "^(yes|no|maybe)$", "^[a-z]+(_[a-z]+){0,2}$",
                                                "^\\+?[0-9 ]{7,12}$", "^#[0-9a-fA-F]{6}$", "^\"quoted\\\\[a-c]\"$",
                                                "^caf\u00e9 [\\w.]{1,4}$", "^[^\\s\"]{1,8}$"});
        break;
      case 4:
        s["enum"] = ojson::array({"red", "green", "blue\nsky", "\u00fcber"});
        break;
      default:
        s["minLength"] = uniform(rng_, 1, 3);
        break;
    }
    return s;
  }

  ojson number_schema(bool integer) {
    ojson s = {{"type", integer ? "integer" : "number"}};
    const int mode = uniform(rng_, 0, 4);
    if (mode == 1 || mode == 3) s[chance(rng_, 50) ? "minimum" : "exclusiveMinimum"] = uniform(rng_, -100, 50);
    if (mode == 2 || mode == 3) {
      const int lo = s.contains("minimum")            ? s["minimum"].get<int>()
                     : s.contains("exclusiveMinimum") ? s["exclusiveMinimum"].get<int>()
                                                      : -100;
      s[chance(rng_, 50) ? "maximum" : "exclusiveMaximum"] = lo + uniform(rng_, 2, 500);
    }
    if (mode == 4 && !integer) {
      s["minimum"] = -2.5;
      s["maximum"] = 7.25;
    }
    return s;
  }

  ojson scalar() {
    switch (uniform(rng_, 0, 7)) {
      case 0:
      case 1:
        return string_schema();
      case 2:
        return number_schema(true);
      case 3:
        return number_schema(false);
      case 4:
        return {{"type", "boolean"}};
      case 5:
        return {{"type", "null"}};
      case 6:
        return {{"enum", ojson::array({1, "two", nullptr, true, 3.5, ojson::array({1, 2}), ojson{{"k", "v"}}})}};
      default:
        return {{"const", pick(rng_, std::vector<ojson>{"fixed", 42, ojson{{"nested", ojson::array({1})}}})}};
    }
  }

  ojson scalar_or_small(int depth) { return chance(rng_, 50) ? scalar() : object(depth); }

  ojson any(int depth) {
    const int r = uniform(rng_, 0, 99);
    if (depth <= 0 || r < 40) {
      if (!defs_.empty() && chance(rng_, 25)) {
        std::vector<std::string> names;
        for (auto it = defs_.begin(); it != defs_.end(); ++it) names.push_back(it.key());
        return {{"$ref", "#/$defs/" + pick(rng_, names)}};
      }
      return scalar();
    }
    if (r < 60) return object(depth);
    if (r < 78) return array(depth);
    if (r < 88) {
      // anyOf / oneOf over distinct types, so that oneOf's "exactly one" holds too.
      std::vector<ojson> branches = {{{"type", "string"}, {"maxLength", 5}},
                                     number_schema(true),
                                     {{"type", "null"}},
                                     {{"type", "boolean"}},
                                     object(depth - 1),
                                     {{"type", "array"}, {"items", scalar()}, {"maxItems", 2}}};
      std::shuffle(branches.begin(), branches.end(), rng_);
      ojson s = ojson::object();
      s[chance(rng_, 50) ? "anyOf" : "oneOf"] = ojson::array({branches[0], branches[1]});
      if (chance(rng_, 30)) s[s.contains("anyOf") ? "anyOf" : "oneOf"].push_back(branches[2]);
      return s;
    }
    if (r < 94) return {{"type", ojson::array({"string", "null"})}, {"maxLength", 6}};
    if (r < 97) return ojson::object();  // any value
    ojson first = object(depth - 1);
    first.erase("additionalProperties");  // else it would forbid the second part's property (JSON Schema's allOf)
    return {{"allOf",
             ojson::array({first, {{"properties", {{"extra", {{"type", "boolean"}}}}}, {"required", {"extra"}}}})}};
  }

  Rng rng_;
  ojson defs_;
};

// ---- regexes ----

class RegexGen {
 public:
  explicit RegexGen(uint64_t seed) : rng_(seed) {}
  // A JavaScript-compatible (unicode mode) pattern; `nullable` tells whether it matches "".
  std::string make(int depth, bool* nullable) {
    std::vector<std::string> alts;
    bool any_nullable = false;
    const int n = depth > 0 && chance(rng_, 30) ? uniform(rng_, 2, 3) : 1;
    for (int i = 0; i < n; ++i) {
      bool null = true;
      std::string seq;
      const int items = uniform(rng_, 1, 4);
      for (int k = 0; k < items; ++k) {
        bool atom_null = false;
        std::string atom = this->atom(depth, &atom_null);
        std::string q;
        const int qr = uniform(rng_, 0, 9);
        if (qr == 0) q = "?";
        if (qr == 1 && !atom_null) q = "*";
        if (qr == 2 && !atom_null) q = "+";
        if (qr == 3) q = fmt::format("{{{}}}", uniform(rng_, 1, 3));
        if (qr == 4) {
          const int a = uniform(rng_, 0, 2);
          q = fmt::format("{{{},{}}}", a, a + uniform(rng_, 0, 3));
        }
        if (q == "?" || q == "*" || (q.size() > 2 && q[1] == '0')) atom_null = true;
        seq += atom + q;
        null = null && atom_null;
      }
      any_nullable = any_nullable || null;
      alts.push_back(seq);
    }
    *nullable = any_nullable;
    std::string out;
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? "|" : "") + alts[i];
    return out;
  }

 private:
  std::string atom(int depth, bool* nullable) {
    *nullable = false;
    switch (uniform(rng_, 0, 9)) {
      case 0:
      case 1:
      case 2:
        return pick(rng_, std::vector<std::string>{"a", "b", "x", "0", "7", " ", "-", "_", "\\.", "\\(", "\\?",
                                                   "\u00e9", "\\n", "\\$", "/", "\"", "\\\\"});
      case 3:
        return pick(rng_, std::vector<std::string>{"[a-f]", "[0-9]", "[^\"\\n]", "[A-Z_]", "[xyz\u00e0-\u00e5]",
                                                   "[^a-z\\s]", "[-+]"});
      case 4:
        return pick(rng_, std::vector<std::string>{"\\d", "\\w", "\\s", "\\D", "\\W"});
      case 5:
        return ".";
      default:
        if (depth <= 0) return "c";
        bool null = false;
        std::string inner = make(depth - 1, &null);
        *nullable = null;
        return (chance(rng_, 50) ? "(?:" : "(") + inner + ")";
    }
  }
  Rng rng_;
};

// The same language in GBNF: the generated regexes use a syntax that maps piece by piece.
std::string regex_to_gbnf(const std::string& re) {
  std::string out;
  for (size_t i = 0; i < re.size();) {
    const char c = re[i];
    if (c == '(') {
      out += " (";
      i += re.compare(i, 3, "(?:") == 0 ? 3 : 1;
    } else if (c == ')' || c == '|' || c == '?' || c == '*' || c == '+') {
      out += std::string(" ") + c;
      ++i;
    } else if (c == '{') {
      const size_t e = re.find('}', i);
      out += re.substr(i, e - i + 1);
      i = e + 1;
    } else if (c == '[') {
      size_t e = i + 1;
      while (re[e] != ']') e += re[e] == '\\' ? 2 : 1;
      std::string cls = re.substr(i, e - i + 1);
      // \s inside a class: GBNF has no shorthands.
      for (size_t p; (p = cls.find("\\s")) != std::string::npos;) cls.replace(p, 2, "\\t\\n\\x0B\\x0C\\r ");
      out += " " + cls;
      i = e + 1;
    } else if (c == '.') {
      out += " [^\\n\\r\\u2028\\u2029]";
      ++i;
    } else if (c == '\\') {
      const char e = re[i + 1];
      if (e == 'd')
        out += " [0-9]";
      else if (e == 'w')
        out += " [0-9A-Za-z_]";
      else if (e == 's')
        out += " [\\t\\n\\x0B\\x0C\\r ]";
      else if (e == 'D')
        out += " [\\x00-/:-\\x7F]";
      else if (e == 'W')
        out += " [\\x00-/:-@\\[-^`{-\\x7F]";
      else if (e == 'n')
        out += " \"\\n\"";
      else if (e == '\\')
        out += " \"\\\\\"";
      else
        out += fmt::format(" \"{}\"", e);
      i += 2;
    } else if (c == '"') {
      out += " \"\\\"\"";
      ++i;
    } else {
      size_t n = 1;
      while (i + n < re.size() && (static_cast<unsigned char>(re[i + n]) & 0xC0) == 0x80) ++n;
      out += " \"" + re.substr(i, n) + "\"";
      i += n;
    }
  }
  return "root ::=" + out + "\n";
}

// ---- walking ----

struct Walk {
  bool finished = false;
  std::string text;
  int steps = 0;
};

// Random tokens among the allowed ones for `random_steps`, then mostly the way to the nearest end: a token that
// spells the start of Matcher::shortest_completion() (the longest such), with a random one now and then.
Walk walk(const std::shared_ptr<const CompiledGrammar>& g, uint64_t seed, int random_steps = 40, int limit = 4000) {
  const TokenVocab& v = g->vocab();
  Matcher m(g);
  Rng rng(seed);
  std::vector<uint64_t> mask(v.mask_words());
  Walk w;
  for (; w.steps < limit; ++w.steps) {
    if (m.must_end() || (m.can_end() && (w.steps >= random_steps || chance(rng, 10)))) {
      w.finished = true;
      return w;
    }
    m.fill_mask(mask);
    std::vector<TokenId> allowed;
    for (TokenId t = 0; t < v.size(); ++t)
      if (((mask[static_cast<size_t>(t) / 64] >> (t % 64)) & 1u) != 0 && !v.is_eog(t)) allowed.push_back(t);
    if (allowed.empty()) return w;  // only the end was allowed, and can_end said no: a failure
    TokenId t = pick(rng, allowed);
    if (w.steps >= random_steps && !chance(rng, 20)) {
      const std::optional<std::string> rest = m.shortest_completion();
      if (!rest) return w;
      size_t best = 0;
      for (TokenId c : allowed) {
        const std::string_view b = v.bytes(c);
        if (b.size() > best && std::string_view(*rest).substr(0, b.size()) == b) best = b.size(), t = c;
      }
    }
    if (!m.accept_token(t)) return w;
    w.text += v.bytes(t);
  }
  return w;
}

std::shared_ptr<const TokenVocab> load_vocab(const std::string& path) {
  auto tok = model::load_tokenizer(path);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? TokenVocab::from_tokenizer(**tok, {(*tok)->eos_id()}) : nullptr;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    checker_ = testing::source_dir() + "/tests/grammar/validate.mjs";
    if (std::system("command -v node >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "node is not installed (scripts/install-deps)";
    if (!fs::exists(testing::source_dir() + "/tests/grammar/node_modules/ajv"))
      GTEST_SKIP() << "ajv is not installed in tests/grammar (scripts/install-deps runs npm ci there)";
    vocab_ = load_vocab(testing::stories260k_dir() + "/tok512.bin");
    ASSERT_TRUE(vocab_ != nullptr);
    out_path_ = testing::scratch_dir() + "/cases.jsonl";
    out_.open(out_path_);
  }

  void add(const std::string& id, const std::string& kind, const std::string& spec, const std::string& output,
           const std::string& check = "", bool expect_valid = true) {
    ojson c = {{"id", id}, {"kind", kind}, {"spec", spec}, {"output", output}};
    if (!check.empty()) c["check"] = check;
    if (!expect_valid) c["expect_valid"] = false;
    out_ << c.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
    ++cases_;
  }

  // Compiles `spec`, walks it, and records the output under `kind` for the checker.
  void run(const std::string& id, const Spec& spec, const std::string& kind, const std::string& check,
           const std::shared_ptr<const TokenVocab>& vocab, uint64_t seed) {
    auto g = build_spec(spec);
    ASSERT_TRUE(g.ok()) << id << ": " << g.status().to_string() << "\n" << spec.text;
    auto compiled = CompiledGrammar::compile(*g, vocab);
    Walk w = walk(compiled, seed);
    ASSERT_TRUE(w.finished) << id << ": the walk did not reach the end after " << w.steps << " steps: '"
                            << w.text.substr(0, 300) << "'\n"
                            << spec.text;
    add(id, kind, spec.text, w.text, check);
  }

  void check_all(int at_least) {
    out_.close();
    EXPECT_GE(cases_, at_least);
    auto r = testing::run_process({"/usr/bin/env", "node", checker_, out_path_}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto summary = ojson::parse(r.out, nullptr, false);
    ASSERT_TRUE(summary.is_object()) << r.out;
    EXPECT_EQ(summary["checked"].get<int>(), cases_);
  }

  std::string checker_, out_path_;
  std::ofstream out_;
  int cases_ = 0;
  std::shared_ptr<const TokenVocab> vocab_;
};

TEST_F(GeneratorTest, TwoHundredFiftySchemasValidateWithAjv) {
  for (uint64_t seed = 1; seed <= 250; ++seed) {
    SchemaGen gen(seed);
    const std::string schema = gen.make().dump();
    run(fmt::format("schema-{}", seed), {SpecKind::kJsonSchema, schema, ""}, "json_schema", "", vocab_, seed);
    if (HasFatalFailure()) return;
  }
  for (uint64_t seed = 1; seed <= 10; ++seed)
    run(fmt::format("object-{}", seed), {SpecKind::kJsonObject, "", ""}, "json_object", "", vocab_, seed);
  // Broken outputs the checker must refuse.
  add("wrong-type", "json_schema", R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})",
      R"({"a": "1"})", "", false);
  add("wrong-date", "json_schema", R"({"type": "string", "format": "date"})", R"("2023-02-29")", "", false);
  add("not-json", "json_object", "", R"({"a": 1)", "", false);
  check_all(263);
}

TEST_F(GeneratorTest, SchemasOnALargeByteLevelVocabulary) {
  const std::string dir = testing::llamacpp_vocab_dir();
  if (dir.empty())
    GTEST_SKIP() << "llama.cpp's ggml-vocab-qwen2.gguf not found in " << testing::llamacpp_vocab_candidates();
  auto qwen = load_vocab(dir + "/ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(qwen != nullptr);
  for (uint64_t seed = 1001; seed <= 1030; ++seed) {
    SchemaGen gen(seed);
    run(fmt::format("qwen-schema-{}", seed), {SpecKind::kJsonSchema, gen.make().dump(), ""}, "json_schema", "", qwen,
        seed);
    if (HasFatalFailure()) return;
  }
  check_all(30);
}

TEST_F(GeneratorTest, RegexesMatchInJavaScript) {
  const std::vector<std::string> fixed = {R"(\d{3}-\d{4})",
                                          R"([A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2})",
                                          R"((true|false|null))",
                                          R"(-?\d+(\.\d{1,3})?)",
                                          R"([a-z0-9._%+-]{1,10}@[a-z0-9-]{1,10}\.(com|org|net))",
                                          R"(#[0-9a-fA-F]{6})",
                                          R"(\((\w+, ){0,3}\w+\))",
                                          R"([^aeiou\s]{2,6})",
                                          R"(caf\u00e9|na\u00efve|\u{1F600}+)",
                                          R"(\/\*[^*]{0,20}\*\/)",
                                          R"((ab|cd)*ef)",
                                          R"(.{3,5}\.)",
                                          R"(\x41\x42?[\x30-\x39]+)",
                                          R"([\-+]?(0|[1-9]\d{0,5}))",
                                          R"("(\\.|[^"\\]){0,12}")"};
  int n = 0;
  for (const std::string& re : fixed) {
    run(fmt::format("regex-fixed-{}", n), {SpecKind::kRegex, re, ""}, "regex", "", vocab_,
        static_cast<uint64_t>(n) + 7);
    ++n;
  }
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    RegexGen gen(seed);
    bool nullable = false;
    std::string re = gen.make(2, &nullable);
    run(fmt::format("regex-{}", seed), {SpecKind::kRegex, re, ""}, "regex", "", vocab_, seed);
    if (HasFatalFailure()) return;
  }
  add("regex-wrong", "regex", R"(\d+)", "12a", "", false);
  check_all(136);
}

TEST_F(GeneratorTest, GbnfGrammarsMatchTheirTwins) {
  // Each generated regex once more, written as GBNF: the JavaScript twin of the same language checks the output.
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    RegexGen gen(seed + 5000);
    bool nullable = false;
    const std::string re = gen.make(2, &nullable);
    run(fmt::format("gbnf-{}", seed), {SpecKind::kGbnf, regex_to_gbnf(re), ""}, "js_regex", re, vocab_, seed);
    if (HasFatalFailure()) return;
  }
  const std::string vocab_dir = testing::llamacpp_vocab_dir();
  fs::path grammars = vocab_dir.empty() ? fs::path() : fs::path(vocab_dir).parent_path() / "grammars";
  int llama_cases = 0;
  if (!grammars.empty() && fs::exists(grammars / "json.gbnf")) {
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      run(fmt::format("json.gbnf-{}", seed), {SpecKind::kGbnf, read_text(grammars / "json.gbnf"), ""}, "json_object",
          "", vocab_, seed);
      run(fmt::format("json_arr.gbnf-{}", seed), {SpecKind::kGbnf, read_text(grammars / "json_arr.gbnf"), ""},
          "json_array", "", vocab_, seed);
      run(fmt::format("list.gbnf-{}", seed), {SpecKind::kGbnf, read_text(grammars / "list.gbnf"), ""}, "js_regex",
          R"((- [^\r\n\v\f\u0085\u2028\u2029]+\n)+)", vocab_, seed);
      llama_cases += 3;
    }
  }
  add("gbnf-wrong", "js_regex", "root ::= [0-9]+", "1x", "[0-9]+", false);
  check_all(81 + llama_cases);
}

}  // namespace
}  // namespace tessera::grammar
